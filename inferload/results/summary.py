"""summary.json (a `RunSummary`) and the per-window CSV, from a run's record (contract: README, "Results")."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferload.measure.csv_safe import safe_rows
from inferload.measure.hdr import LatencyStats
from inferload.results.bursts import burst_recovery, burst_spans
from inferload.results.files import WINDOWS_NAME
from inferload.results.histograms import write_histograms
from inferload.results.model import (
    LatencyMs,
    OpenLoop,
    RunSummary,
    SendLag,
    ServerSide,
    StreamingStats,
    TargetSummary,
    WorkerLoss,
)
from inferload.results.slo import evaluate, slo_section
from inferload.results.stream_figures import STREAM_WINDOW_COLUMNS, stream_figures, stream_window
from inferload.results.summary_file import write_summary
from inferload.results.tail import tail_summary
from inferload.scenario.model import Scenario, is_open_loop
from inferload.scenario.targets import Target
from inferload.traffic.arrivals import RateTimeline, rate_timeline

if TYPE_CHECKING:  # the recorder imports Locust; reading results must not
    from inferload.measure.run_record import RunRecord

WINDOW_COLUMNS = [
    "window_start",
    "elapsed_s",
    "phase",
    "target",
    "requests",
    "failures",
    "rps",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "users",
    # open loop only (empty otherwise): intended arrivals/s, arrivals not sent, send lag p99
    "target_rps",
    "unsent",
    "send_lag_p99_ms",
    # the server's own mean request duration in the window, and client mean minus it
    "server_request_ms",
    "residual_ms",
    # streamed targets only (Triton decoupled models; empty otherwise): responses, time to first
    # response and between responses
    *STREAM_WINDOW_COLUMNS,
]


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def latency(stats: LatencyStats) -> LatencyMs:
    return LatencyMs.model_validate(stats.latency_ms())


def target_figures(target: Target, stats: LatencyStats, duration_s: float, server_side: ServerSide | None) -> dict[str, Any]:
    figures = latency(stats)
    return {
        "server": target.server,
        "protocol": target.protocol,
        "kind": target.kind,
        "model": target.model,
        "requests": stats.requests,
        "failures": stats.failures,
        "error_rate": stats.failures / stats.requests if stats.requests else 0.0,
        "throughput_rps": stats.successes / duration_s if duration_s > 0 else 0.0,
        "latency_ms": figures,
        "server_side": server_side,
        "residual_ms": residual(figures.mean, None if server_side is None else server_side.request_ms_avg),
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


def open_loop_figures(
    record: RunRecord, target: str, timeline: RateTimeline, share: float, warmup_s: float, steady_s: float
) -> OpenLoop:
    arrivals, unsent = record.arrivals_steady.get(target, [0, 0])
    lag = record.lag_steady.get(target) or LatencyStats()
    lag_ms = lag.latency_ms()
    configured = mean_rate(timeline, warmup_s, warmup_s + steady_s) * share
    sent_rps = (arrivals - unsent) / steady_s if steady_s > 0 else 0.0
    return OpenLoop(
        configured_rps=configured,
        arrivals=arrivals,
        unsent=unsent,
        achieved_rps=sent_rps,
        achieved_ratio=sent_rps / configured if configured else None,
        send_lag_ms=SendLag(p50=lag_ms["p50"], p99=lag_ms["p99"], max=lag_ms["max"]),
    )


@dataclass(frozen=True)
class RunFacts:
    """What a run knows beyond its record, for its summary."""

    run_id: str
    workers: int = 1
    server_side: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)  # target -> servermetrics' figures
    cold_starts: Mapping[str, float | None] = field(default_factory=dict)
    workers_lost: list[str] | None = None  # distributed runs
    worker_losses: Sequence[Mapping[str, Any]] | None = None  # distributed runs: `WorkerLoss` as dicts
    rejected_reports: int | None = None  # distributed runs: worker reports refused (not signed with the run key)
    streaming: Mapping[str, Any] | None = None  # the InfluxDB stream's own summary
    interrupted: bool = False
    tails: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # trace join per target (`run.trace_run`)


def build_summary(scenario: Scenario, record: RunRecord, facts: RunFacts) -> RunSummary:
    """summary.json of a run that started (record.started_at and stopped_at set), SLO checks included."""
    if record.started_at is None:
        raise ValueError("the run never started: no summary")
    duration = record.steady_duration_s
    targets: dict[str, TargetSummary] = {}
    spans = burst_spans(scenario.shape, scenario.duration)
    rows = window_rows(record) if spans else []
    for target in scenario.targets:
        stats = record.steady.get(target.name) or LatencyStats()
        side = facts.server_side.get(target.name)
        figures = target_figures(target, stats, duration, None if side is None else ServerSide.model_validate(side))
        shape: Any = scenario.shape  # an open-loop shape when is_open_loop
        if is_open_loop(shape):
            share = target.weight / sum(t.weight for t in scenario.targets)
            timeline = rate_timeline(shape, scenario.duration)
            # arrivals are only scheduled until `duration`; Locust stops a few ms later
            scheduled_s = min(duration, scenario.duration - scenario.warmup)
            figures["open_loop"] = open_loop_figures(record, target.name, timeline, share, scenario.warmup, scheduled_s)
        outages = [outage.as_dict() for outage in record.outages(target.name)]
        if outages:
            figures["outages"] = outages
        streamed = stream_figures(record.streams, target.name, duration)
        if streamed is not None:
            figures["streaming"] = streamed
        traced = facts.tails.get(target.name)
        if traced is not None:
            latency_ms = figures["latency_ms"]
            figures["tail"] = tail_summary(dict(traced), latency_ms.p99, latency_ms.p50)
        if spans:
            figures["bursts"] = burst_recovery([r for r in rows if r["target"] == target.name], spans, scenario.duration)
        targets[target.name] = TargetSummary(**figures, cold_start_s=facts.cold_starts.get(target.name))
    total = (record.stopped_at - record.started_at) if record.started_at and record.stopped_at else 0.0
    return RunSummary(
        run_id=facts.run_id,
        scenario=scenario.name,
        started_at=datetime.fromtimestamp(record.started_at, timezone.utc).isoformat(),
        duration_s=round(total, 3),
        warmup_s=scenario.warmup,
        steady_s=round(duration, 3),
        workers=facts.workers,
        targets=targets,
        slo=slo_section(evaluate(scenario, targets)),
        workers_lost=facts.workers_lost,
        worker_losses=None if facts.worker_losses is None else [WorkerLoss.model_validate(dict(x)) for x in facts.worker_losses],
        rejected_reports=facts.rejected_reports,
        streaming=None if facts.streaming is None else StreamingStats.model_validate(dict(facts.streaming)),
        interrupted=facts.interrupted,
    )


def window_rows(record: RunRecord) -> list[dict[str, Any]]:
    """One row per window per target, oldest first."""
    rows = []
    started = record.started_at or 0.0
    warmup_ends = record.warmup_ends_at or 0.0
    for (index, target), stats in record.all_windows():  # zero-request windows included
        start = index * record.window_s
        figures = stats.latency_ms()
        rows.append(
            {
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
                **stream_window(record.streams, index, target, record.window_s),
            }
        )
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


def write_windows(results_dir: Path, record: RunRecord) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / WINDOWS_NAME
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=WINDOW_COLUMNS)
        writer.writeheader()
        writer.writerows(safe_rows(window_rows(record)))  # text cells never run as spreadsheet formulas
    return path


def write_results(results_dir: Path, summary: RunSummary, record: RunRecord) -> None:
    """summary.json, windows.csv and histograms.jsonl into `results_dir` (made if needed)."""
    write_summary(results_dir, summary)
    write_windows(results_dir, record)
    write_histograms(results_dir, record)
