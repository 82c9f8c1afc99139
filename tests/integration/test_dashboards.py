"""The Grafana dashboards: every panel query, with its variables substituted as Grafana does, runs
against the real InfluxDB filled by a real observed run and returns the fields the panel plots
(the checks on the files alone are in tests/unit/test_dashboard_files.py). The run dashboard reads a
run against Triton and TorchServe (`observed_run`), the LLM one a run streaming chat from llama.cpp
(`observed_generation_run`), each with the collector reading the servers meanwhile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.grafana import DASHBOARDS, query_panels, selected_fields, substitute

#: the observed run each dashboard is read against
RUN_OF = {"inferload-run.json": "observed_run", "inferload-llm.json": "observed_generation_run"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_query_returns_the_fields_it_plots_after_a_real_run(path: Path, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(RUN_OF[path.name])
    dashboard = json.loads(path.read_text())
    all_targets = "(" + "|".join(re.escape(t) for t in run.targets) + ")"
    checked = 0
    for panel in query_panels(dashboard):
        choices = [re.escape(t) for t in run.targets] if panel.get("repeat") == "target" else [all_targets]
        for target_value in choices:
            frames: list[dict[str, float]] = []
            for target in panel["targets"]:
                query = substitute(target["query"], run.run_id, target_value)
                series = run.influx.series(query)
                assert series, f"{panel['title']}: no points for {query}"
                for field in selected_fields(target["query"]):
                    values = [row[s["columns"].index(field)] for s in series for row in s["values"]]
                    assert any(v is not None for v in values), f"{panel['title']}: field {field} is empty in {query}"
                frames.append({row[0]: row[1] for s in series for row in s["values"] if row[1] is not None})
                checked += 1
            if panel.get("transformations"):  # client − server: both sides must meet on some time bucket
                assert set(frames[0]) & set(frames[1]), f"{panel['title']}: client and server series never line up"
    assert checked >= len(query_panels(dashboard))


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variables_and_annotations_return_the_run(path: Path, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(RUN_OF[path.name])
    dashboard = json.loads(path.read_text())
    variables = {v["name"]: v["query"] for v in dashboard["templating"]["list"]}
    run_ids = [row[1] for row in run.influx.series(variables["run_id"])[0]["values"]]
    assert run.run_id in run_ids
    targets = [row[1] for row in run.influx.series(substitute(variables["target"], run.run_id, ""))[0]["values"]]
    assert sorted(targets) == sorted(run.targets)
    for annotation in dashboard["annotations"]["list"]:
        if annotation.get("datasource", {}).get("uid") == "inferload-influxdb":
            series = run.influx.series(substitute(annotation["query"], run.run_id, ""))
            columns = series[0]["columns"]
            assert annotation["textColumn"] in columns and annotation["tagsColumn"] in columns
            assert len(series[0]["values"]) >= 4  # start, warm-up end, a stage, stop
