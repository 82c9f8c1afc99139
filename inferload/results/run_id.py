"""A run's identifier: given with --run-id, else <scenario>-<UTC start time> (results folder,
summary.json and the InfluxDB points all use the same one)."""

from __future__ import annotations

from datetime import datetime, timezone


def default_run_id(scenario_name: str, started_at: float) -> str:
    stamp = datetime.fromtimestamp(started_at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario_name}-{stamp}"
