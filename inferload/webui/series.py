"""Per-window figures for the tab's charts: p99, throughput and the open-loop target rate of the
latest windows of each target (pure; the same arithmetic as windows.csv's rows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the recorder imports Locust; reading a record does not
    from inferload.measure.run_record import RunRecord

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
    requests, rps (requests per second of the window), p99 ms (None: nothing succeeded), and for
    open-loop targets the intended rate and the arrivals not sent."""
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
        series.setdefault(target, []).append(point)
    return series
