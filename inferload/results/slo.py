"""SLO thresholds per target turned into checks: each with its limit, its value and a verdict.

Each scenario `slo` key names a figure of `inferload.results.figures`; the figure's better
direction is the bound (lower is better: value <= limit; higher is better: value >= limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferload.results.figures import BY_NAME, Figure
from inferload.results.model import SloCheck, SloSection
from inferload.scenario.model import Scenario

# scenario slo key -> figure name
CHECKS: dict[str, str] = {
    "mean_ms": "latency_ms.mean",
    "p50_ms": "latency_ms.p50",
    "p90_ms": "latency_ms.p90",
    "p95_ms": "latency_ms.p95",
    "p99_ms": "latency_ms.p99",
    "p999_ms": "latency_ms.p999",
    "error_rate": "error_rate",
    "min_throughput_rps": "throughput_rps",
    "min_avg_batch_size": "server_side.avg_batch_size",
    "max_queue_ms": "server_side.queue_ms_avg",
    "max_compute_ms": "server_side.compute_ms_avg",
    "max_residual_ms": "residual_ms",
    "max_send_lag_p99_ms": "open_loop.send_lag_ms.p99",
    "max_unsent": "open_loop.unsent",
}


def checked_figure(metric: str) -> Figure:
    return BY_NAME[CHECKS[metric]]


def bound(metric: str) -> str:
    """'<=' or '>=' for a scenario slo key; '' for one this version does not know."""
    if metric not in CHECKS:
        return ""
    return ">=" if checked_figure(metric).better == "higher" else "<="


def evaluate(scenario: Scenario, targets: Mapping[str, Any]) -> list[SloCheck]:
    """One check per threshold set in the scenario; a figure that could not be measured fails.

    `targets`: target name -> `TargetSummary` (or its JSON form)."""
    checks: list[SloCheck] = []
    for target in scenario.targets:
        if target.slo is None:
            continue
        figures = targets.get(target.name, {})
        for key in CHECKS:
            limit = getattr(target.slo, key, None)
            if limit is None:
                continue
            value = checked_figure(key).value(figures)
            if value is None:
                passed = False
            else:
                passed = value >= limit if bound(key) == ">=" else value <= limit
            checks.append(SloCheck(target=target.name, metric=key, limit=float(limit), value=value, passed=passed))
    return checks


def slo_section(checks: list[SloCheck]) -> SloSection:
    return SloSection(passed=all(c.passed for c in checks), checks=list(checks))


def format_checks(checks: list[SloCheck]) -> str:
    """A plain table of every check, for the console and CI logs."""
    if not checks:
        return "SLO: no thresholds set"
    rows = [("target", "check", "limit", "value", "result")]
    for c in checks:
        value = "n/a" if c.value is None else f"{c.value:.4g}"
        rows.append((c.target, c.metric, f"{bound(c.metric)} {c.limit:g}", value, "pass" if c.passed else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    verdict = "passed" if all(c.passed for c in checks) else "FAILED"
    return "\n".join([f"SLO {verdict}:", *lines])
