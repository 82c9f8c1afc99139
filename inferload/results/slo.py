"""SLO thresholds per target turned into checks: each with its limit, its value and a verdict.

Each scenario `slo` key names a figure of `inferload.results.figures`; the figure's better
direction is the bound (lower is better: value <= limit; higher is better: value >= limit).

A check on a server figure says so in its ``note`` when the figure is not this target's alone (other
targets of the run are on the same model of the same server: ``server_side.shared_with``), or when
the server does not report it at all (``server_side.unknown``: the check fails, with the reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferload.results.figures import BY_NAME, Figure, value_at
from inferload.results.schema import SloCheck, SloSection
from inferload.scenario.schema import RunOutline, Scenario
from inferload.scenario.targets import Slo

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
    "ttft_p50_ms": "decoupled.first_response_ms.p50",
    "ttft_p99_ms": "decoupled.first_response_ms.p99",
    "tpot_p99_ms": "generation.tpot_ms.p99",
    "itl_p99_ms": "generation.itl_ms.p99",
    "min_output_tokens_per_s": "generation.output_tokens_per_s",
    "min_goodput_pct": "generation.goodput.attainment_pct",
}


def checked_figure(metric: str) -> Figure:
    return BY_NAME[CHECKS[metric]]


def bound(metric: str) -> str:
    """'<=' or '>=' for a scenario slo key; '' for one this version does not know."""
    if metric not in CHECKS:
        return ""
    return ">=" if checked_figure(metric).better == "higher" else "<="


#: checks on figures taken from the server (the residual: client mean minus the server's mean)
_FROM_SERVER = {"max_residual_ms": "request_ms_avg"}


def check_note(metric: str, target: Any) -> str | None:
    """What a reader of the check must know about its server figure (None: nothing)."""
    figure = checked_figure(metric)
    if not figure.server and metric not in _FROM_SERVER:
        return None
    side = value_at(target, ("server_side",))
    key = _FROM_SERVER.get(metric, figure.path[-1])
    unknown = value_at(side, ("unknown", key))
    if isinstance(unknown, str):
        return f"not reported by this server: {unknown}"
    shared = value_at(side, ("shared_with",))
    if shared:
        model = value_at(target, ("model",))
        what = "its server figure covers" if metric in _FROM_SERVER else "the figure covers"
        return (
            f"{what} all targets of model {model!r} on this server together ({', '.join([*shared])} too): "
            "the server cannot split it per target"
        )
    return None


def thresholds(scenario: Scenario | RunOutline) -> list[tuple[str, Slo]]:
    """(name, thresholds) of every target or request with an ``slo``: a scenario's targets', an outline's own."""
    if isinstance(scenario, RunOutline):
        return list(scenario.slo.items())
    return [(target.name, target.slo) for target in scenario.targets if target.slo is not None]


def evaluate(scenario: Scenario | RunOutline, targets: Mapping[str, Any]) -> list[SloCheck]:
    """One check per threshold set in the scenario; a figure that could not be measured fails.

    `targets`: target name -> `TargetSummary` (or its JSON form)."""
    checks: list[SloCheck] = []
    for name, slo in thresholds(scenario):
        figures = targets.get(name, {})
        for key in CHECKS:
            limit = getattr(slo, key, None)
            if limit is None:
                continue
            value = checked_figure(key).value(figures)
            if value is None:
                passed = False
            else:
                passed = value >= limit if bound(key) == ">=" else value <= limit
            note = check_note(key, figures)
            checks.append(SloCheck(target=name, metric=key, limit=float(limit), value=value, passed=passed, note=note))
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
    notes = [f"  note: {c.target} {c.metric}: {c.note}" for c in checks if c.note]
    return "\n".join([f"SLO {verdict}:", *lines, *notes])
