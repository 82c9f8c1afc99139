"""The `streams` InfluxDB measurement: a streamed target's window (Triton decoupled models).

One point per window and streamed target, next to that window's `requests` point (same time,
same tags: run_id, target, server, protocol, model, worker=all). Fields: `requests` (streamed
requests that succeeded), `responses`, `responses_per_s`, `responses_per_request` (mean),
`first_response_{mean,p50,p90,p99,max}_ms` (send -> first response) and
`inter_response_{mean,p50,p90,p99,max}_ms` (between consecutive responses); a figure with no
sample is left out. Percentiles are exact over all workers (merged histograms).
"""

from __future__ import annotations

from inferload.measure.stream_record import StreamWindow
from inferload.observe.sink import Point, seconds_to_ns

MEASUREMENT = "streams"
FIGURES = ("mean", "p50", "p90", "p99", "max")


def stream_point(run_id: str, target_tags: dict[str, str], index: int, window_s: float, window: StreamWindow) -> Point:
    """The `streams` point of one target's window (pure)."""
    counts = window.counts
    fields: dict[str, float | int | None] = {
        "requests": counts.requests,
        "responses": counts.responses,
        "responses_per_s": counts.responses / window_s,
        "responses_per_request": counts.responses / counts.requests if counts.requests else None,
    }
    for prefix, stats in (("first_response", window.first_response), ("inter_response", window.inter_response)):
        figures = stats.latency_ms()
        for key in FIGURES:
            fields[f"{prefix}_{key}_ms"] = figures[key]
    tags = {"run_id": run_id, "worker": "all", **target_tags}
    return Point(MEASUREMENT, tags, fields, seconds_to_ns(index * window_s))
