"""The Grafana dashboards: every panel query, with its variables substituted as Grafana does, runs
against the real InfluxDB filled by a real observed run and returns the fields the panel plots."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

GRAFANA = Path(__file__).resolve().parent.parent.parent / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dashboard) if p["type"] != "row"]


def substitute(query: str, run_id: str, target: str) -> str:
    """Grafana's InfluxDB substitutions: regex-escaped values inside /.../, a multi-value as (a|b)."""
    return (
        query.replace("$timeFilter", "time > now() - 1h")
        .replace("$__interval", "1s")
        .replace("$run_id", re.escape(run_id))
        .replace("$target", target)
    )


def selected_fields(query: str) -> list[str]:
    return re.findall(r'AS "([^"]+)"', query.split(" FROM ")[0])


def test_there_is_a_dashboard() -> None:
    assert [d.name for d in DASHBOARDS] == ["inferload-run.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_has_a_unit_a_title_and_influxql_filtered_by_run(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"run_id", "target"}
    for panel in query_panels(dashboard):
        assert panel["title"] and panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        for target in panel["targets"]:
            assert target["rawQuery"] and target["datasource"]["uid"] == "inferload-influxdb"
            assert '"run_id" =~ /^$run_id$/' in target["query"] and "$timeFilter" in target["query"], panel["title"]
            assert selected_fields(target["query"]), f"{panel['title']}: name every plotted field with AS"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_query_returns_the_fields_it_plots_after_a_real_run(path: Path, observed_run) -> None:
    run = observed_run
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
    assert checked >= 15


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variables_and_annotations_return_the_run(path: Path, observed_run) -> None:
    run = observed_run
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


def test_provisioning_points_grafana_at_influxql_and_the_dashboards_folder() -> None:
    datasource = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "influxdb.yaml").read_text())["datasources"][0]
    assert datasource["type"] == "influxdb" and datasource["uid"] == "inferload-influxdb"
    assert datasource["jsonData"]["version"] == "InfluxQL"
    assert datasource["secureJsonData"]["httpHeaderValue1"] == "Token ${INFLUX_TOKEN}"  # from the environment, not the repo
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "inferload.yaml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
