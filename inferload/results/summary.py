"""summary.json and the per-window CSV, from a run's record (contract: README, "Results")."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferload.traffic.arrivals import RateTimeline, rate_timeline
from inferload.measure.hdr import LatencyStats
from inferload.scenario.model import Scenario, is_open_loop

if TYPE_CHECKING:  # the recorder imports Locust; reading results must not
    from inferload.measure.run_record import RunRecord

WINDOW_COLUMNS = [
    "window_start", "elapsed_s", "phase", "target", "requests", "failures", "rps",
    "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "users",
    # open loop only (empty otherwise): intended arrivals/s, arrivals not sent, send lag p99
    "target_rps", "unsent", "send_lag_p99_ms",
    # the server's own mean request duration in the window, and client mean minus it
    "server_request_ms", "residual_ms",
]


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def target_figures(stats: LatencyStats, duration_s: float) -> dict[str, Any]:
    return {
        "requests": stats.requests,
        "failures": stats.failures,
        "error_rate": stats.failures / stats.requests if stats.requests else 0.0,
        "throughput_rps": stats.successes / duration_s if duration_s > 0 else 0.0,
        "latency_ms": stats.latency_ms(),
    }


def mean_rate(timeline: RateTimeline, start: float, end: float) -> float:
    """The configured rate averaged over [start, end) (the timeline's rate is piecewise constant)."""
    if end <= start:
        return 0.0
    total, t = 0.0, start
    while t < end:
        boundary = min(timeline.next_change(t), end)
        total += timeline.rate_at(t) * (boundary - t)
        t = boundary
    return total / (end - start)


def open_loop_figures(record: RunRecord, target: str, timeline: RateTimeline, share: float, warmup_s: float, steady_s: float) -> dict[str, Any]:
    arrivals, unsent = record.arrivals_steady.get(target, [0, 0])
    lag = record.lag_steady.get(target) or LatencyStats()
    lag_ms = lag.latency_ms()
    configured = mean_rate(timeline, warmup_s, warmup_s + steady_s) * share
    sent_rps = (arrivals - unsent) / steady_s if steady_s > 0 else 0.0
    return {
        "configured_rps": configured,
        "arrivals": arrivals,
        "unsent": unsent,
        "achieved_rps": sent_rps,
        "achieved_ratio": sent_rps / configured if configured else None,
        "send_lag_ms": {"p50": lag_ms["p50"], "p99": lag_ms["p99"], "max": lag_ms["max"]},
    }


def build_summary(
    run_id: str,
    scenario: Scenario,
    record: RunRecord,
    workers: int,
    server_side: dict[str, dict[str, Any] | None],
    cold_starts: dict[str, float | None],
    slo: dict[str, Any],
) -> dict[str, Any]:
    duration = record.steady_duration_s
    targets: dict[str, Any] = {}
    for target in scenario.targets:
        stats = record.steady.get(target.name) or LatencyStats()
        targets[target.name] = {
            "server": target.server,
            "protocol": target.protocol,
            "kind": target.kind,
            "model": target.model,
            **target_figures(stats, duration),
            "server_side": server_side.get(target.name),
            "cold_start_s": cold_starts.get(target.name),
        }
        targets[target.name]["residual_ms"] = residual(
            targets[target.name]["latency_ms"]["mean"], (server_side.get(target.name) or {}).get("request_ms_avg")
        )
        if is_open_loop(scenario.shape):
            share = target.weight / sum(t.weight for t in scenario.targets)
            timeline = rate_timeline(scenario.shape, scenario.duration)
            # arrivals are only scheduled until `duration`; Locust stops a few ms later
            scheduled_s = min(duration, scenario.duration - scenario.warmup)
            targets[target.name]["open_loop"] = open_loop_figures(record, target.name, timeline, share, scenario.warmup, scheduled_s)
    total = (record.stopped_at - record.started_at) if record.started_at and record.stopped_at else 0.0
    return {
        "run_id": run_id,
        "scenario": scenario.name,
        "started_at": iso(record.started_at),
        "duration_s": round(total, 3),
        "warmup_s": scenario.warmup,
        "steady_s": round(duration, 3),
        "workers": workers,
        "targets": targets,
        "slo": slo,
    }


def window_rows(record: RunRecord) -> list[dict[str, Any]]:
    """One row per window per target, oldest first."""
    rows = []
    started = record.started_at or 0.0
    warmup_ends = record.warmup_ends_at or 0.0
    for (index, target), stats in sorted(record.windows.items()):
        start = index * record.window_s
        figures = stats.latency_ms()
        rows.append({
            "window_start": iso(start),
            "elapsed_s": round(start - started, 3),
            "phase": "warmup" if start < warmup_ends else "steady",
            "target": target,
            "requests": stats.requests,
            "failures": stats.failures,
            "rps": round(stats.requests / record.window_s, 3),
            **{f"{k}_ms": (None if v is None else round(v, 3)) for k, v in figures.items()},
            "users": record.users_by_window.get(index),
            **open_loop_window(record, index, target),
            **residual_window(record, index, target, figures["mean"]),
        })
    return rows


def residual(client_mean_ms: float | None, server_ms: float | None) -> float | None:
    return None if client_mean_ms is None or server_ms is None else client_mean_ms - server_ms


def residual_window(record: RunRecord, index: int, target: str, client_mean_ms: float | None) -> dict[str, Any]:
    server_ms = record.server_request_ms.get((index, target))
    value = residual(client_mean_ms, server_ms)
    return {
        "server_request_ms": None if server_ms is None else round(server_ms, 3),
        "residual_ms": None if value is None else round(value, 3),
    }


def open_loop_window(record: RunRecord, index: int, target: str) -> dict[str, Any]:
    counts = record.arrival_windows.get((index, target))
    if counts is None:
        return {"target_rps": None, "unsent": None, "send_lag_p99_ms": None}
    lag = record.lag_windows.get((index, target))
    p99 = lag.latency_ms()["p99"] if lag is not None else None
    return {
        "target_rps": round(counts[0] / record.window_s, 3),
        "unsent": counts[1],
        "send_lag_p99_ms": None if p99 is None else round(p99, 3),
    }


def write_results(results_dir: Path, summary: dict[str, Any], record: RunRecord) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with open(results_dir / "windows.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=WINDOW_COLUMNS)
        writer.writeheader()
        writer.writerows(window_rows(record))


def format_table(summary: dict[str, Any]) -> str:
    """Side-by-side figures, one column per target."""
    names = list(summary["targets"])
    if not names:
        return "(no targets)"

    def fmt(value: Any, spec: str = ".2f") -> str:
        return "n/a" if value is None else format(value, spec)

    def side(t: dict[str, Any], key: str) -> Any:
        return (t.get("server_side") or {}).get(key)

    rows: list[tuple[str, ...]] = [("", *names)]
    spec = [
        ("requests", lambda t: fmt(t["requests"], "d")),
        ("failures", lambda t: fmt(t["failures"], "d")),
        ("error rate", lambda t: fmt(t["error_rate"] * 100, ".2f") + " %"),
        ("throughput (req/s)", lambda t: fmt(t["throughput_rps"], ".1f")),
        ("p50 (ms)", lambda t: fmt(t["latency_ms"]["p50"])),
        ("p95 (ms)", lambda t: fmt(t["latency_ms"]["p95"])),
        ("p99 (ms)", lambda t: fmt(t["latency_ms"]["p99"])),
        ("max (ms)", lambda t: fmt(t["latency_ms"]["max"])),
        ("avg batch (server)", lambda t: fmt(side(t, "avg_batch_size"))),
        ("queue (ms, server)", lambda t: fmt(side(t, "queue_ms_avg"), ".3f")),
        ("compute (ms, server)", lambda t: fmt(side(t, "compute_ms_avg"), ".3f")),
        ("cold start (s)", lambda t: fmt(t.get("cold_start_s"))),
    ]
    for label, getter in spec:
        rows.append((label, *(getter(summary["targets"][n]) for n in names)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    )
