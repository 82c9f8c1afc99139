"""A streamed target's figures for summary.json (`targets.<t>.streaming`) and windows.csv.

Pure functions of a run's `StreamRecord` (see `inferload.measure.stream_record`). A target that
had no streamed request gets no `streaming` block and empty stream columns in windows.csv.
"""

from __future__ import annotations

from typing import Any

from inferload.measure.hdr import LatencyStats, WindowStats
from inferload.measure.stream_record import StreamRecord
from inferload.results.model import LatencyMs, StreamFigures

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
    """The target's `streaming` block over the steady state; None when it streamed nothing."""
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
