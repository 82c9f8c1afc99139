"""The Grafana dashboards and provisioning as files: every panel has a unit, a title and an
InfluxQL query filtered by run (the queries run against a real InfluxDB in
tests/integration/test_dashboards.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.grafana import DASHBOARDS, GRAFANA, query_panels, selected_fields


def test_there_is_a_dashboard() -> None:
    assert [d.name for d in DASHBOARDS] == ["inferload-llm.json", "inferload-run.json"]


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


def test_provisioning_points_grafana_at_influxql_and_the_dashboards_folder() -> None:
    datasource = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "influxdb.yaml").read_text())["datasources"][0]
    assert datasource["type"] == "influxdb" and datasource["uid"] == "inferload-influxdb"
    assert datasource["jsonData"]["version"] == "InfluxQL"
    assert datasource["secureJsonData"]["httpHeaderValue1"] == "Token ${INFLUX_TOKEN}"  # from the environment, not the repo
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "inferload.yaml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
