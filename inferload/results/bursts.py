"""Burst recovery: for each burst of a `burst` or `rate-bursts` shape, how bad the tail got and how
long it took to come back (issue 10, item 4).

Per burst, from the target's windows (windows.csv rows, times relative to the run's start):
- `pre_burst_p99_ms`: the median windowed p99 of the steady windows before the burst (since the last
  burst's end, at most `PRE_WINDOWS` of them);
- `peak_p99_ms`: the highest windowed p99 from the burst's start to its recovery (or the next burst);
- `recovery_s`: from the burst's end until the windowed p99 is back within `within_pct` % of the
  pre-burst p99 for `SETTLE_WINDOWS` windows in a row (0: it never left; null: not before the next
  burst or the run's end);
- `server_recovery_s`: the same on the server's own mean request duration per window
  (`server_request_ms`, queue included): how long the server's queue took to drain; null when the
  server's figures are not read per window;
- `failures`, `unsent`: requests failed and (open loop) arrivals not sent from the burst's start
  until its recovery.
A window counts for a burst when it starts inside [start, end) of the span looked at.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from inferload.scenario.shapes import BurstShape, RateBurstsShape

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
