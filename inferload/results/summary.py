"""summary.json (a `RunSummary`) and the per-window CSV, from a run's record (contract: docs/results.md)."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from inferload.measure.decoupled_record import StreamRecord
from inferload.measure.generation_record import GenerationRecord, TurnTotals
from inferload.measure.hdr import LatencyStats, WindowStats
from inferload.paths import replacing
from inferload.results.files import WINDOWS_NAME, write_summary
from inferload.results.histograms import write_histograms
from inferload.results.schema import (
    SCHEMA_VERSION,
    Burstiness,
    GenerationLengthsSummary,
    GenerationServerSummary,
    GenerationSummary,
    GoodputSummary,
    LatencyMs,
    LengthFigures,
    OpenLoop,
    RunSummary,
    SendLag,
    ServerSide,
    StreamFigures,
    StreamingStats,
    TargetSummary,
    TokenCountSummary,
    TurnSummary,
    WorkerLoss,
)
from inferload.results.slo import evaluate, slo_section
from inferload.results.tail import tail_summary
from inferload.scenario.generation import GenerationSpec, GoodputSpec
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.lengths import token_counter
from inferload.scenario.schema import RunOutline, Scenario, is_open_loop
from inferload.scenario.shapes import BurstShape, RateBurstsShape, ReplayShape
from inferload.scenario.targets import GenerativeTarget, Target
from inferload.traffic.arrivals import RateTimeline, rate_timeline

# CSV cells a spreadsheet shows as text, never runs as a formula.
#
# Excel, LibreOffice and Google Sheets treat a cell that starts with `=`, `+`, `-` or `@` (and, in
# some, a tab or carriage return before one) as a formula. Every text cell of requests.csv and
# windows.csv that can come from outside (target names, worker ids, outcomes) goes through
# `safe_cell`, which puts a `'` in front of such a cell (the OWASP "CSV injection" advice). Numbers
# are left alone, so a negative residual stays a number.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

T = TypeVar("T")


def safe_cell(value: T) -> T | str:
    """`value`, with a leading `'` when it is text a spreadsheet would read as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def safe_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A csv.DictWriter row with every text cell made safe."""
    return {name: safe_cell(value) for name, value in row.items()}


def safe_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [safe_row(row) for row in rows]


# -- bursts ------------------------------------------------------------
# Burst recovery: for each burst of a `burst` or `rate-bursts` shape, how bad the tail got and how
# long it took to come back.
#
# Per burst, from the target's windows (windows.csv rows, times relative to the run's start):
# - `pre_burst_p99_ms`: the median windowed p99 of the steady windows before the burst (since the last
#   burst's end, at most `PRE_WINDOWS` of them);
# - `peak_p99_ms`: the highest windowed p99 from the burst's start to its recovery (or the next burst);
# - `recovery_s`: from the burst's end until the windowed p99 is back within `within_pct` % of the
#   pre-burst p99 for `SETTLE_WINDOWS` windows in a row (0: it never left; null: not before the next
#   burst or the run's end);
# - `server_recovery_s`: the same on the server's own mean request duration per window
#   (`server_request_ms`, queue included): how long the server's queue took to drain; null when the
#   server's figures are not read per window;
# - `failures`, `unsent`: requests failed and (open loop) arrivals not sent from the burst's start
#   until its recovery.
# A window counts for a burst when it starts inside [start, end) of the span looked at.


PRE_WINDOWS = 10
SETTLE_WINDOWS = 2
WITHIN_PCT = 20.0


def burst_spans(shape: object, duration_s: float) -> list[tuple[float, float]]:
    """(start, end) of every burst, seconds from the run's start; [] for shapes without bursts."""
    if not isinstance(shape, (BurstShape, RateBurstsShape)):
        return []
    spans = []
    start = shape.first_burst_at
    while start < duration_s:
        spans.append((start, min(start + shape.burst_length, duration_s)))
        start += shape.period
    return spans


def _back_within(rows: Sequence[Mapping[str, Any]], key: str, reference: float | None, within_pct: float) -> int | None:
    """Index of the first of SETTLE_WINDOWS rows in a row whose `key` is within `within_pct` % of `reference`."""
    if reference is None:
        return None
    run = 0
    for index, row in enumerate(rows):
        value = row.get(key)
        run = run + 1 if value is not None and value <= reference * (1 + within_pct / 100.0) else 0
        if run == SETTLE_WINDOWS:
            return index - SETTLE_WINDOWS + 1
    return None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def burst_recovery(
    rows: Sequence[Mapping[str, Any]], spans: Sequence[tuple[float, float]], duration_s: float, within_pct: float = WITHIN_PCT
) -> list[dict[str, Any]]:
    """One entry per burst (see the module's doc) from one target's window rows, oldest first."""
    bursts = []
    for number, (start, end) in enumerate(spans):
        previous_end = spans[number - 1][1] if number else 0.0
        next_start = spans[number + 1][0] if number + 1 < len(spans) else duration_s
        before = [r for r in rows if previous_end <= r["elapsed_s"] < start and r.get("phase") == "steady"][-PRE_WINDOWS:]
        during = [r for r in rows if start <= r["elapsed_s"] < end]
        after = [r for r in rows if end <= r["elapsed_s"] < next_start]
        pre_p99 = _median([r.get("p99_ms") for r in before])
        pre_server = _median([r.get("server_request_ms") for r in before])
        back = _back_within(after, "p99_ms", pre_p99, within_pct)
        server_back = _back_within(after, "server_request_ms", pre_server, within_pct)
        affected = during + (after[: back + SETTLE_WINDOWS] if back is not None else after)
        peaks = [r["p99_ms"] for r in affected if r.get("p99_ms") is not None]
        bursts.append(
            {
                "start_s": round(start, 3),
                "end_s": round(end, 3),
                "pre_burst_p99_ms": pre_p99,
                "peak_p99_ms": max(peaks) if peaks else None,
                "recovery_s": None if back is None else round(max(0.0, after[back]["elapsed_s"] - end), 3),
                "server_recovery_s": None if server_back is None else round(max(0.0, after[server_back]["elapsed_s"] - end), 3),
                "failures": sum(int(r.get("failures") or 0) for r in affected),
                "unsent": sum(int(r.get("unsent") or 0) for r in affected),
            }
        )
    return bursts


# -- stream figures ------------------------------------------------------------
# A streamed target's figures for summary.json (`targets.<t>.decoupled`) and windows.csv.
#
# Pure functions of a run's `StreamRecord` (see `inferload.measure.decoupled_record`). A target that
# had no streamed request gets no `decoupled` block and empty stream columns in windows.csv.


#: windows.csv columns of streamed targets (appended after the others; empty for other targets)
STREAM_WINDOW_COLUMNS = [
    "responses",
    "responses_per_s",
    "first_response_p50_ms",
    "first_response_p99_ms",
    "inter_response_p50_ms",
    "inter_response_p99_ms",
]


def stream_figures(streams: StreamRecord, target: str, steady_s: float) -> StreamFigures | None:
    """The target's `decoupled` block over the steady state; None when it streamed nothing."""
    if target not in streams.targets:
        return None
    totals = streams.steady.get(target)
    first = totals.first_response if totals is not None else LatencyStats()
    gaps = totals.inter_response if totals is not None else LatencyStats()
    requests = totals.counts.requests if totals is not None else 0
    responses = totals.counts.responses if totals is not None else 0
    return StreamFigures(
        requests=requests,
        responses=responses,
        responses_per_s=responses / steady_s if steady_s > 0 else 0.0,
        responses_per_request=responses / requests if requests else None,
        max_responses_per_request=totals.counts.max_responses if totals is not None else 0,
        first_response_ms=LatencyMs.model_validate(first.latency_ms()),
        inter_response_ms=LatencyMs.model_validate(gaps.latency_ms()),
    )


def generation_figures(
    generations: GenerationRecord, target: str, steady_s: float, requests: int = 0, goodput: GoodputSpec | None = None
) -> GenerationSummary | None:
    """The target's `generation` block over the steady state; None when the engine measured no generation
    of it. ``requests``: the target's steady requests, failures included (goodput's attainment is over
    them); ``goodput``: the target's per-request thresholds, if it sets them."""
    totals = generations.steady.get(target)
    if totals is None:
        return None
    counts = totals.counts
    good = None
    if goodput is not None:
        good = GoodputSummary(
            **goodput.model_dump(),
            good=counts.good,
            per_s=counts.good / steady_s if steady_s > 0 else 0.0,
            attainment_pct=100.0 * counts.good / requests if requests else None,
        )
    server = None
    if totals.server_prefill.successes:
        server = GenerationServerSummary(
            generations=totals.server_prefill.successes,
            prefill_ms=LatencyMs.model_validate(totals.server_prefill.latency_ms()),
            decode_ms_per_token=LatencyMs.model_validate(totals.server_decode.latency_ms()),
            ttft_residual_ms=LatencyMs.model_validate(totals.ttft_residual.latency_ms()),
        )
    checked = counts.token_check
    token_count = None
    if checked.compared:
        token_count = TokenCountSummary(
            compared=checked.compared,
            differing=checked.differing,
            tokenizer_tokens=checked.tokenizer_tokens,
            usage_tokens=checked.usage_tokens,
            difference_pct=(
                100.0 * (checked.tokenizer_tokens - checked.usage_tokens) / checked.usage_tokens if checked.usage_tokens else None
            ),
        )
    turns = [turn_figures(turn, totals) for (name, turn), totals in sorted(generations.turns.items()) if name == target]
    return GenerationSummary(
        turns=turns or None,
        generations=counts.generations,
        output_tokens=counts.output_tokens,
        output_tokens_per_s=counts.output_tokens / steady_s if steady_s > 0 else 0.0,
        output_tokens_per_request=counts.output_tokens / counts.generations if counts.generations else None,
        max_output_tokens=counts.max_output_tokens,
        token_source=counts.token_source,
        token_count=token_count,
        ttst_ms=LatencyMs.model_validate(totals.ttst.latency_ms()),
        tpot_ms=LatencyMs.model_validate(totals.tpot.latency_ms()),
        itl_ms=LatencyMs.model_validate(totals.itl.latency_ms()),
        goodput=good,
        server=server,
        ttft_from_intended_ms=(
            LatencyMs.model_validate(totals.ttft_intended.latency_ms()) if totals.ttft_intended.successes else None
        ),
    )


def turn_figures(turn: int, totals: TurnTotals) -> TurnSummary:
    """One turn position's figures (`TurnTotals`) as summary.json has them."""
    counted, total, low, high = totals.prompt_tokens
    return TurnSummary(
        turn=turn,
        generations=totals.ttft.successes,
        ttft_ms=LatencyMs.model_validate(totals.ttft.latency_ms()),
        prompt_tokens=LengthFigures(mean=total / counted, min=low, max=high) if counted else None,
    )


def stream_blocks(record: RunRecord, target: Target, steady_s: float, requests: int) -> dict[str, Any]:
    """A target's ``decoupled`` and ``generation`` blocks over ``steady_s`` (those it has): what
    summary.json and the web UI's Inference tab both show. ``requests``: its steady requests,
    failures included (goodput's attainment is over them)."""
    blocks: dict[str, Any] = {}
    streamed = stream_figures(record.streams, target.name, steady_s)
    if streamed is not None:
        blocks["decoupled"] = streamed
    generation = getattr(target, "generation", None)
    generated = generation_figures(
        record.generations, target.name, steady_s, requests, None if generation is None else generation.goodput
    )
    if generated is not None:
        if generation is not None and generation.distinct_requests() is not None:
            generated = generated.model_copy(update={"lengths": lengths_figures(generation, generated.output_tokens_per_request)})
        blocks["generation"] = generated
    return blocks


def lengths_figures(generation: GenerationSpec, achieved_per_request: float | None) -> GenerationLengthsSummary:
    """The target's distinct requests' lengths (drawn, or its data set's: the same its users sent),
    against the output tokens its steady generations had per request."""
    drawn = generation.distinct_requests()
    assert drawn is not None

    def figures(values: list[int]) -> LengthFigures | None:
        if not values:
            return None
        return LengthFigures(mean=statistics.fmean(values), min=min(values), max=max(values))

    inputs = [d.counted_input_tokens for d in drawn if d.counted_input_tokens is not None]
    asked = [d.output_tokens for d in drawn if d.output_tokens is not None]
    asked_figures = figures(asked)
    achieved = (
        None
        if asked_figures is None or achieved_per_request is None
        else round(100.0 * achieved_per_request / float(asked_figures.mean), 2)
    )
    return GenerationLengthsSummary(
        requests=len(drawn),
        input_tokens=figures(inputs),
        input_counted_in=None if not inputs else "tokens" if token_counter(generation.tokenizer) is not None else "words",
        output_tokens_asked=asked_figures,
        output_tokens_achieved_pct=achieved,
    )


#: windows.csv columns of generative targets (appended after the stream columns; empty for other targets)
GENERATION_WINDOW_COLUMNS = [
    "output_tokens",
    "output_tokens_per_s",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "goodput_per_s",
    "itl_p50_ms",
    "itl_p99_ms",
]


def generation_window(generations: GenerationRecord, index: int, target: str, window_s: float) -> dict[str, Any]:
    """The generation columns of one window row: all None for a target that never generated; 0
    tokens (and no percentiles) for a generative target's window in which none succeeded."""
    window = generations.window((index, target))
    if window is None:
        columns: dict[str, Any] = dict.fromkeys(GENERATION_WINDOW_COLUMNS)
        if target in generations.targets:
            columns.update(output_tokens=0, output_tokens_per_s=0.0)
        return columns
    return {
        "output_tokens": window.output_tokens,
        "output_tokens_per_s": round(window.output_tokens / window_s, 3),
        "tpot_p50_ms": _p(window.tpot, "p50"),
        "tpot_p99_ms": _p(window.tpot, "p99"),
        "goodput_per_s": round(window.good / window_s, 3) if window.judged else None,
        "itl_p50_ms": _p(window.itl, "p50"),
        "itl_p99_ms": _p(window.itl, "p99"),
    }


#: windows.csv columns of the server's gauges as each window closed (the last; empty where it reports none)
SERVER_GAUGE_COLUMNS = ["server_waiting", "server_running", "server_kv_cache_used_pct"]


def server_gauge_window(record: RunRecord, index: int, target: str) -> dict[str, Any]:
    """The server's gauges as the window closed: requests waiting, running, and the KV cache's share in use (%)."""
    waiting, running, kv_used = record.server_gauges.get((index, target), (None, None, None))
    return {
        "server_waiting": waiting,
        "server_running": running,
        "server_kv_cache_used_pct": None if kv_used is None else round(100.0 * kv_used, 2),
    }


def _p(stats: WindowStats, key: str) -> float | None:
    value = stats.latency_ms()[key]
    return None if value is None else round(value, 3)


def stream_window(streams: StreamRecord, index: int, target: str, window_s: float) -> dict[str, Any]:
    """The stream columns of one window row: all None for a target that never streamed; 0
    responses (and no percentiles) for a streamed target's window in which none succeeded."""
    window = streams.window((index, target))
    if window is None:
        columns: dict[str, Any] = dict.fromkeys(STREAM_WINDOW_COLUMNS)
        if target in streams.targets:
            columns.update(responses=0, responses_per_s=0.0)
        return columns
    return {
        "responses": window.counts.responses,
        "responses_per_s": round(window.counts.responses / window_s, 3),
        "first_response_p50_ms": _p(window.first_response, "p50"),
        "first_response_p99_ms": _p(window.first_response, "p99"),
        "inter_response_p50_ms": _p(window.inter_response, "p50"),
        "inter_response_p99_ms": _p(window.inter_response, "p99"),
    }


if TYPE_CHECKING:  # the recorder imports Locust; reading results must not
    from inferload.measure.run_record import RunRecord

#: the `server` of a summary entry that is no target: a request of Locust's own (`locust_entries`)
LOCUST_SERVER = "locust"

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
    # generative targets only (empty otherwise): output tokens, per second, time per output token
    *GENERATION_WINDOW_COLUMNS,
    # the server's gauges as the window closed (empty where it reports none)
    *SERVER_GAUGE_COLUMNS,
]


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def latency(stats: LatencyStats) -> LatencyMs:
    return LatencyMs.model_validate(stats.latency_ms())


def request_figures(stats: LatencyStats, duration_s: float) -> dict[str, Any]:
    """Counts, rates and latency of a name's steady-state requests (a target's, or a plain Locust request's)."""
    return {
        "requests": stats.requests,
        "failures": stats.failures,
        "error_rate": stats.failures / stats.requests if stats.requests else 0.0,
        "throughput_rps": stats.successes / duration_s if duration_s > 0 else 0.0,
        "latency_ms": latency(stats),
    }


#: how far the server's request count may be from the client's (a share of the client's, and at least
#: this many requests: the readings at the steady state's two ends catch a few requests in flight)
SAME_REQUESTS_SHARE, SAME_REQUESTS_SLACK = 0.02, 10


def residual_basis(client_requests: int, side: ServerSide | None) -> str | None:
    """Why the client's and the server's means do not cover the same requests (None: they do, as far
    as the server's own request count tells): a client − server difference over other requests means
    nothing, and a negative one cannot be."""
    if side is None or side.request_ms_avg is None:
        return None
    counted = side.requests
    if side.scope == "model" or counted is None:
        return None  # a shared model's count covers its other targets too; a server without a count: no check
    if abs(counted - client_requests) > max(SAME_REQUESTS_SLACK, SAME_REQUESTS_SHARE * client_requests):
        return (
            f"the server's counters cover {counted} requests and the client's steady state {client_requests}:"
            " not the same requests, so no client − server difference is given"
        )
    return None


#: why a streamed Triton generate target gets no client − server difference
STREAMED_GENERATE = (
    "Triton times a generate model's execute(), which a decoupled model answering from its own threads"
    " leaves before its first token: no client − server difference is given"
)


def target_figures(target: Target, stats: LatencyStats, duration_s: float, server_side: ServerSide | None) -> dict[str, Any]:
    figures = request_figures(stats, duration_s)
    record = SERVER_KINDS[target.kind]
    streamed_generate = record.server == "triton" and isinstance(target, GenerativeTarget) and target.generation.stream
    unlike = STREAMED_GENERATE if streamed_generate and server_side is not None else residual_basis(stats.requests, server_side)
    if unlike is not None and server_side is not None:
        server_side = server_side.model_copy(update={"unknown": {**(server_side.unknown or {}), "residual_ms": unlike}})
    return {
        "server": target.server,
        "protocol": target.protocol,
        "kind": target.kind,
        "model": target.model,
        **figures,
        "server_side": server_side,
        "residual_ms": None
        if unlike is not None
        else residual(figures["latency_ms"].mean, None if server_side is None else server_side.request_ms_avg),
    }


def locust_entries(
    record: RunRecord, known: set[str], request_types: Mapping[str, str], duration_s: float
) -> dict[str, TargetSummary]:
    """One entry per request name with steady-state requests that is no target of the run: a request
    of Locust's own (a plain Locust user's, measured by ``inferload.attach``). Its ``server`` is
    ``"locust"``, its ``protocol`` the request type Locust reported it with (``GET``, ``grpc``; several
    joined by ``+``), its ``model`` empty and it has no ``kind`` and no server-side figures: inferload
    knows of it only what Locust's request event says."""
    entries: dict[str, TargetSummary] = {}
    for name in sorted(set(record.steady) - known):
        stats = record.steady[name]
        if not stats.requests:
            continue
        entries[name] = TargetSummary(
            server=LOCUST_SERVER,
            protocol=request_types.get(name, ""),
            model="",
            **request_figures(stats, duration_s),
            server_side=None,
            cold_start_s=None,
        )
    return entries


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


def configured_rps(scenario: Scenario, record: RunRecord, target: Target, scheduled_s: float) -> float:
    """The rate the arrival law asked of ``target`` over the steady state: a rate shape's own mean
    rate there (times the target's weight share); a replay's, the arrivals it scheduled there."""
    shape: Any = scenario.shape  # an open-loop shape
    if isinstance(shape, ReplayShape):
        scheduled = record.schedule_gaps.get(target.name)
        return scheduled.times / scheduled_s if scheduled is not None and scheduled_s > 0 else 0.0
    share = target.weight / sum(t.weight for t in scenario.targets)
    timeline = rate_timeline(shape, scenario.duration)
    return mean_rate(timeline, scenario.warmup, scenario.warmup + scheduled_s) * share


def burstiness(record: RunRecord, target: str) -> Burstiness:
    sent = record.send_times.figures(target, record.warmup_ends_at)
    scheduled = record.schedule_gaps.get(target)
    return Burstiness(
        sent_cv=_rounded(sent.cv),
        scheduled_cv=None if scheduled is None else _rounded(scheduled.cv),
        sent_gaps=sent.gaps,
        late=record.send_times.late,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def open_loop_figures(record: RunRecord, target: str, configured: float, steady_s: float) -> OpenLoop:
    arrivals, unsent = record.arrivals_steady.get(target, [0, 0])
    lag = record.lag_steady.get(target) or LatencyStats()
    lag_ms = lag.latency_ms()
    sent_rps = (arrivals - unsent) / steady_s if steady_s > 0 else 0.0
    return OpenLoop(
        configured_rps=configured,
        arrivals=arrivals,
        unsent=unsent,
        achieved_rps=sent_rps,
        achieved_ratio=sent_rps / configured if configured else None,
        send_lag_ms=SendLag(p50=lag_ms["p50"], p99=lag_ms["p99"], max=lag_ms["max"]),
        burstiness=burstiness(record, target),
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
    calibration: Mapping[str, Any] | None = None  # the certificate that applied (`inferload.results.calibration`)
    tails: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # trace join per target (`run.trace_run`)
    #: request name -> the request type(s) Locust reported it with, for the entries that are no target
    request_types: Mapping[str, str] = field(default_factory=dict)


def build_summary(scenario: Scenario | RunOutline, record: RunRecord, facts: RunFacts) -> RunSummary:
    """summary.json of a run that started (record.started_at and stopped_at set), SLO checks included.

    ``scenario``: the run's scenario, or the `RunOutline` of a run no scenario shaped (``inferload.attach``:
    no open-loop or burst figures, the load was the locustfile's own). Requests under names that
    are no target get an entry of their own (`locust_entries`)."""
    if record.started_at is None:
        raise ValueError("the run never started: no summary")
    duration = record.steady_duration_s
    targets: dict[str, TargetSummary] = {}
    shaped = scenario if isinstance(scenario, Scenario) else None
    spans = burst_spans(shaped.shape, shaped.duration) if shaped is not None else []
    rows = window_rows(record) if spans else []
    for target in scenario.targets:
        stats = record.steady.get(target.name) or LatencyStats()
        side = facts.server_side.get(target.name)
        figures = target_figures(target, stats, duration, None if side is None else ServerSide.model_validate(side))
        shape: Any = shaped.shape if shaped is not None else None  # an open-loop shape when is_open_loop
        if shaped is not None and is_open_loop(shape):
            # arrivals are only scheduled until `duration`; Locust stops a few ms later
            scheduled_s = min(duration, shaped.duration - shaped.warmup)
            configured = configured_rps(shaped, record, target, scheduled_s)
            figures["open_loop"] = open_loop_figures(record, target.name, configured, scheduled_s)
        outages = [outage.as_dict() for outage in record.outages(target.name)]
        if outages:
            figures["outages"] = outages
        figures.update(stream_blocks(record, target, duration, stats.requests))
        traced = facts.tails.get(target.name)
        if traced is not None:
            latency_ms = figures["latency_ms"]
            figures["tail"] = tail_summary(dict(traced), latency_ms.p99, latency_ms.p50)
        if spans and shaped is not None:
            figures["bursts"] = burst_recovery([r for r in rows if r["target"] == target.name], spans, shaped.duration)
        targets[target.name] = TargetSummary(**figures, cold_start_s=facts.cold_starts.get(target.name))
    targets.update(locust_entries(record, set(targets), facts.request_types, duration))
    total = (record.stopped_at - record.started_at) if record.started_at and record.stopped_at else 0.0
    return RunSummary(
        schema_version=SCHEMA_VERSION,
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
        calibration=None if facts.calibration is None else dict(facts.calibration),
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
                **generation_window(record.generations, index, target, record.window_s),
                **server_gauge_window(record, index, target),
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
    path = results_dir / WINDOWS_NAME
    with replacing(path, newline="") as handle:  # whole or not at all
        writer = csv.DictWriter(handle, fieldnames=WINDOW_COLUMNS)
        writer.writeheader()
        writer.writerows(safe_rows(window_rows(record)))  # text cells never run as spreadsheet formulas
    return path


def write_results(results_dir: Path, summary: RunSummary, record: RunRecord) -> None:
    """summary.json, windows.csv and histograms.jsonl into `results_dir` (made if needed)."""
    write_summary(results_dir, summary)
    write_windows(results_dir, record)
    write_histograms(results_dir, record)
