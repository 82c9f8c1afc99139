"""The versioned Grafana dashboards, read as Grafana reads them: panels, queries, variable substitution."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tests.support.system_tools import REPO

GRAFANA = REPO / "grafana"
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
