"""SLO thresholds per target turned into checks: each with its limit, its value and a verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from inferload.scenario.model import Scenario

# scenario slo key -> (figure in a summary target, "max" | "min")
CHECKS: dict[str, tuple[tuple[str, ...], str]] = {
    "mean_ms": (("latency_ms", "mean"), "max"),
    "p50_ms": (("latency_ms", "p50"), "max"),
    "p90_ms": (("latency_ms", "p90"), "max"),
    "p95_ms": (("latency_ms", "p95"), "max"),
    "p99_ms": (("latency_ms", "p99"), "max"),
    "p999_ms": (("latency_ms", "p999"), "max"),
    "error_rate": (("error_rate",), "max"),
    "min_throughput_rps": (("throughput_rps",), "min"),
    "min_avg_batch_size": (("server_side", "avg_batch_size"), "min"),
    "max_queue_ms": (("server_side", "queue_ms_avg"), "max"),
    "max_compute_ms": (("server_side", "compute_ms_avg"), "max"),
    "max_residual_ms": (("residual_ms",), "max"),
    "max_send_lag_p99_ms": (("open_loop", "send_lag_ms", "p99"), "max"),
    "max_unsent": (("open_loop", "unsent"), "max"),
}


@dataclass(frozen=True)
class SloCheck:
    target: str
    metric: str
    limit: float
    value: float | None
    passed: bool


def evaluate(scenario: Scenario, targets: dict[str, dict[str, Any]]) -> list[SloCheck]:
    """One check per threshold set in the scenario; a figure that could not be measured fails."""
    checks: list[SloCheck] = []
    for target in scenario.targets:
        if target.slo is None:
            continue
        figures = targets.get(target.name, {})
        for key, (path, direction) in CHECKS.items():
            limit = getattr(target.slo, key, None)
            if limit is None:
                continue
            value: Any = figures
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                passed = False
            else:
                passed = value <= limit if direction == "max" else value >= limit
            checks.append(SloCheck(target.name, key, float(limit), value, passed))
    return checks


def slo_section(checks: list[SloCheck]) -> dict[str, Any]:
    return {"passed": all(c.passed for c in checks), "checks": [asdict(c) for c in checks]}


def format_checks(checks: list[SloCheck]) -> str:
    """A plain table of every check, for the console and CI logs."""
    if not checks:
        return "SLO: no thresholds set"
    rows = [("target", "check", "limit", "value", "result")]
    for c in checks:
        bound = "<=" if CHECKS[c.metric][1] == "max" else ">="
        value = "n/a" if c.value is None else f"{c.value:.4g}"
        rows.append((c.target, c.metric, f"{bound} {c.limit:g}", value, "pass" if c.passed else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    verdict = "passed" if all(c.passed for c in checks) else "FAILED"
    return "\n".join([f"SLO {verdict}:"] + lines)
