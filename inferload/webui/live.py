"""What the Inference tab shows, from the run's own record: one pure function, `inference_stats`.

Per target: the exact steady-state percentiles merged over every worker (the record's HDR
histograms, not Locust's rounded stats), throughput, errors by class, the server's figures
(`server_views`), the client-server residual, the open loop's intended and achieved rate, send
lag and unsent arrivals; per run: the GPUs (`tab.py`) and each SLO check's state: ``pending``
while its figure is not known yet (warm-up, no server reading yet) or the run has no steady
state, else ``pass``/``fail`` on the figures so far. Once the run stopped, every figure is the
one summary.json gets (the same functions compute both: `inferload.results.summary`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferload.measure.hdr import LatencyStats
from inferload.results.schema import ServerSide, SloCheck, TargetSummary
from inferload.results.slo import bound, evaluate
from inferload.results.summary import configured_rps, open_loop_figures, stream_blocks, target_figures
from inferload.scenario.schema import Scenario, is_open_loop

# -- series ------------------------------------------------------------
# Per-window figures for the tab's charts: p99, throughput and the open-loop target rate of the
# latest windows of each target (pure; the same arithmetic as windows.csv's rows).


if TYPE_CHECKING:  # the recorder imports Locust; reading a record does not
    from inferload.measure.run_record import RunRecord
from inferload.errors import InferloadError
from inferload.servermetrics.readers import reading_groups, server_side
from inferload.servermetrics.snapshot import ServerSnapshot


# Each target's server figures as the tab shows them: over the steady state so far while the run
# goes (the reading at the warm-up's end to the newest per-window reading), and once it stopped,
# exactly the `server_side` that summary.json gets. Pure: the readings are handed in.
@dataclass(frozen=True)
class ServerReadings:
    """What the run read of its servers (by the name of each reading group's first target, except
    `final` and `errors`, which are by target): at the warm-up's end, the newest per-window reading,
    and after the stop the summary's figures and the reasons some are missing."""

    at_warmup_end: Mapping[str, ServerSnapshot]
    newest: Mapping[str, ServerSnapshot]
    final: Mapping[str, Mapping[str, Any] | None]
    errors: Mapping[str, str]


@dataclass(frozen=True)
class ServerView:
    """One target's server figures (None: not known, `why` says why)."""

    figures: Mapping[str, Any] | None
    why: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"figures": None if self.figures is None else dict(self.figures), "why": self.why}


def server_views(scenario: Scenario, readings: ServerReadings, stopped: bool, in_warmup: bool) -> dict[str, ServerView]:
    """target name -> its server figures now (see the module's docstring)."""
    views: dict[str, ServerView] = {}
    for group in reading_groups(scenario.targets):
        read = group[0].name
        others = {t.name: [o.name for o in group if o.name != t.name] for t in group}
        for target in group:
            views[target.name] = _view(read, target.name, others[target.name], readings, stopped, in_warmup)
    return views


def _view(read: str, name: str, others: list[str], readings: ServerReadings, stopped: bool, in_warmup: bool) -> ServerView:
    error = readings.errors.get(name)
    if stopped and name in readings.final:
        final = readings.final[name]
        return ServerView(final, None if final is not None else error or "the server could not be read")
    if error is not None:
        return ServerView(None, error)
    before = readings.at_warmup_end.get(read)
    if before is None:
        why = "server figures start when the warm-up ends" if in_warmup or not stopped else "not read yet"
        return ServerView(None, why)
    after = readings.newest.get(read)
    if after is None or after.taken_at <= before.taken_at:
        return ServerView(None, "waiting for the first server reading after the warm-up (one per window)")
    try:
        figures = server_side(before, after)
    except InferloadError as exc:  # counters went backwards: the server restarted
        return ServerView(None, str(exc))
    if others:
        figures = {**figures, "scope": "model", "shared_with": others}
    return ServerView(figures, None)


#: how many windows a chart shows (the newest ones)
MAX_WINDOWS = 120


def last_closed_index(record: RunRecord, now: float) -> int | None:
    """The newest window the chart may show: every window of a stopped run, else the last one
    that ended before `now` (a window still filling would look like a drop in throughput)."""
    if record.stopped_at is not None:
        return None
    return int(now // record.window_s) - 1


def window_series(record: RunRecord, now: float, max_windows: int = MAX_WINDOWS) -> dict[str, list[dict[str, Any]]]:
    """target -> its newest windows, oldest first: elapsed seconds at the window's start, phase,
    requests, rps (requests per second of the window), p99 ms (None: nothing succeeded), for
    open-loop targets the intended rate and the arrivals not sent, and for generative targets the
    output tokens per second of the generations that ended in the window (windows.csv's)."""
    if record.started_at is None:
        return {}
    last = last_closed_index(record, now)
    first = None if last is None else last - max_windows + 1
    rows = record.all_windows(first_index=first, last_index=last)
    if last is None and rows:  # a stopped run: its newest windows only
        newest = rows[-1][0][0]
        rows = [row for row in rows if row[0][0] > newest - max_windows]
    warmup_ends = record.warmup_ends_at or record.started_at
    series: dict[str, list[dict[str, Any]]] = {}
    for (index, target), stats in rows:
        start = index * record.window_s
        arrivals = record.arrival_windows.get((index, target))
        point: dict[str, Any] = {
            "t": round(start - record.started_at, 3),
            "phase": "warmup" if start < warmup_ends else "steady",
            "requests": stats.requests,
            "rps": round(stats.requests / record.window_s, 3),
            "p99_ms": stats.latency_ms()["p99"],
        }
        if arrivals is not None:
            point["target_rps"] = round(arrivals[0] / record.window_s, 3)
            point["unsent"] = arrivals[1]
        if target in record.generations.targets:
            generated = record.generations.window((index, target))
            point["output_tokens_per_s"] = 0.0 if generated is None else round(generated.output_tokens / record.window_s, 3)
        series.setdefault(target, []).append(point)
    return series


if TYPE_CHECKING:  # the recorder imports Locust; reading a record does not
    from inferload.measure.run_record import RunRecord

#: "ConnectionRefused('refused: ...')" (Locust's repr of a failure) -> "ConnectionRefused"
_ERROR_CLASS = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\(")


@dataclass(frozen=True)
class LocustError:
    """One row of Locust's error table (merged over workers by Locust): target, message, count."""

    target: str
    error: str
    occurrences: int


@dataclass(frozen=True)
class LiveInputs:
    """Everything `inference_stats` reads: the run's record and what the run knows around it."""

    scenario: Scenario
    record: RunRecord
    now: float
    state: str  # Locust's runner state: ready, spawning, running, stopping, stopped
    workers: int = 1
    servers: Mapping[str, ServerView] = field(default_factory=dict)
    errors: Sequence[LocustError] = ()
    gpu: Mapping[str, Any] = field(default_factory=lambda: {"devices": None, "why": "not read"})
    max_windows: int = MAX_WINDOWS


def phase_of(record: RunRecord, now: float) -> str:
    """not started, warmup, steady or stopped."""
    if record.started_at is None:
        return "not started"
    if record.stopped_at is not None:
        return "stopped"
    ends = record.warmup_ends_at
    return "warmup" if ends is not None and now < ends else "steady"


def steady_seconds(record: RunRecord, now: float) -> float:
    """The steady state's length so far (summary.json's `steady_s` once the run stopped)."""
    if record.stopped_at is not None:
        return record.steady_duration_s
    ends = record.warmup_ends_at
    return 0.0 if ends is None else max(0.0, now - ends)


def errors_by_class(errors: Sequence[LocustError]) -> dict[str, list[dict[str, Any]]]:
    """target -> its failures grouped by class (the exception's name), most frequent first, each
    with its count and one message as an example."""
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for row in errors:
        match = _ERROR_CLASS.match(row.error)
        name = match.group(1) if match else "error"
        entry = grouped.setdefault(row.target, {}).setdefault(name, {"class": name, "count": 0, "example": row.error})
        entry["count"] += row.occurrences
    return {target: sorted(classes.values(), key=lambda e: (-e["count"], e["class"])) for target, classes in grouped.items()}


def _target_summaries(inputs: LiveInputs, steady_s: float) -> dict[str, TargetSummary]:
    scenario, record = inputs.scenario, inputs.record
    summaries: dict[str, TargetSummary] = {}
    for target in scenario.targets:
        stats = record.steady.get(target.name) or LatencyStats()
        view = inputs.servers.get(target.name)
        side = None if view is None or view.figures is None else ServerSide.model_validate(dict(view.figures))
        figures = target_figures(target, stats, steady_s, side)
        if is_open_loop(scenario.shape) and record.started_at is not None:
            scheduled_s = min(steady_s, scenario.duration - scenario.warmup)  # as build_summary
            configured = configured_rps(scenario, record, target, scheduled_s)
            figures["open_loop"] = open_loop_figures(record, target.name, configured, scheduled_s)
        figures.update(stream_blocks(record, target, steady_s, stats.requests))
        summaries[target.name] = TargetSummary(**figures, cold_start_s=None)
    return summaries


def check_state(check: SloCheck, phase: str) -> str:
    """pass, fail or pending (a figure not known yet while the run goes, or no steady state yet)."""
    if phase in ("not started", "warmup"):
        return "pending"
    if check.value is None and phase != "stopped":
        return "pending"
    return "pass" if check.passed else "fail"


def inference_stats(inputs: LiveInputs) -> dict[str, Any]:
    """The JSON the Inference tab reads (`/inference/stats`); see the module's docstring."""
    record = inputs.record
    phase = phase_of(record, inputs.now)
    steady_s = steady_seconds(record, inputs.now)
    summaries = _target_summaries(inputs, steady_s)
    series = window_series(record, inputs.now, inputs.max_windows)
    failures = errors_by_class(inputs.errors)
    targets = []
    for target in inputs.scenario.targets:
        summary = summaries[target.name].model_dump(mode="json")
        view = inputs.servers.get(target.name)
        summary.update(
            name=target.name,
            errors=failures.get(target.name, []),
            server_why=None if view is None else view.why,
            residual_why=_residual_why(summary, view),
            windows=series.get(target.name, []),
        )
        summary.pop("cold_start_s", None)
        targets.append(summary)
    checks = evaluate(inputs.scenario, summaries)
    slo_checks = [
        {**check.model_dump(mode="json"), "bound": bound(check.metric), "state": check_state(check, phase)} for check in checks
    ]
    states = {c["state"] for c in slo_checks}
    verdict = None if not slo_checks else "fail" if "fail" in states else "pending" if "pending" in states else "pass"
    return {
        "run": {
            "scenario": inputs.scenario.name,
            "state": inputs.state,
            "phase": phase,
            "final": phase == "stopped",
            "elapsed_s": None if record.started_at is None else round((record.stopped_at or inputs.now) - record.started_at, 3),
            "warmup_s": inputs.scenario.warmup,
            "steady_s": round(steady_s, 3),
            "window_s": record.window_s,
            "workers": inputs.workers,
            "open_loop": is_open_loop(inputs.scenario.shape),
        },
        "targets": targets,
        "gpu": dict(inputs.gpu),
        "slo": {"state": verdict, "checks": slo_checks},
    }


def _residual_why(summary: Mapping[str, Any], view: ServerView | None) -> str | None:
    if summary.get("residual_ms") is not None:
        return None
    if summary.get("latency_ms", {}).get("mean") is None:
        return "no successful request in the steady state yet"
    if view is None or view.figures is None:
        return view.why if view is not None and view.why else "no server figures"
    return "the server does not report its request time"
