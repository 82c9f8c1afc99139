"""The `requests_cumulative` InfluxDB measurement: exact percentiles since the end of the warm-up.

Per-window p99s cannot be combined into the p99 of everything so far; window histograms can. Each
closed window gets, per target, one point at the window's time (as its `requests` point; tags
run_id, target, server, protocol, model, worker=all) whose figures cover every window from the
first steady one (the first that starts at or after the end of the warm-up: those windows.csv marks
`steady`) through this one, all workers merged: `count`, `failures`, `windows`, `mean_ms`,
`p50_ms`, `p90_ms`, `p95_ms`, `p99_ms`, `p999_ms`, `max_ms` (no latency field before a success).

`CumulativeLatency` keeps one running merge per target and adds each new window once. On a master a
late worker report can still add to a window already counted; then that target's merge is redone
from its first steady window (histograms merge exactly, they cannot be subtracted) and its points
from the changed window on are written again (same series and time: InfluxDB keeps the last).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.observe.sink import Point, seconds_to_ns

MEASUREMENT = "requests_cumulative"
WindowKey = tuple[int, str]


def first_steady_index(warmup_ends_at: float, window_s: float) -> int:
    """The first window whose start is at or after the end of the warm-up."""
    index = math.ceil(warmup_ends_at / window_s)
    while (index - 1) * window_s >= warmup_ends_at:
        index -= 1
    while index * window_s < warmup_ends_at:
        index += 1
    return index


@dataclass(frozen=True)
class CumulativeFigures:
    """One target's figures from the first steady window through window `index`."""

    index: int
    target: str
    windows: int
    requests: int
    failures: int
    latency_ms: dict[str, float | None]


@dataclass
class _Running:
    stats: LatencyStats = field(default_factory=LatencyStats)
    through: int | None = None  # the last window merged
    counts: dict[int, int] = field(default_factory=dict)  # requests merged per window index

    def reset(self) -> None:
        self.stats.release()
        self.stats = LatencyStats()
        self.through = None
        self.counts.clear()


class CumulativeLatency:
    """Running merges of every target's steady windows (one per target)."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def update(self, windows: Iterable[tuple[WindowKey, WindowStats]], first_index: int) -> list[CumulativeFigures]:
        """The figures that are new or changed, given every closed window so far (any order;
        windows before `first_index`, the first steady one, are left out)."""
        by_target: dict[str, list[tuple[int, WindowStats]]] = {}
        for (index, target), stats in windows:
            if index >= first_index:
                by_target.setdefault(target, []).append((index, stats))
        changed: list[CumulativeFigures] = []
        for target, series in sorted(by_target.items()):
            series.sort(key=lambda item: item[0])
            changed += self._update_target(target, series)
        return changed

    def _update_target(self, target: str, series: list[tuple[int, WindowStats]]) -> list[CumulativeFigures]:
        running = self._running.setdefault(target, _Running())
        through = running.through
        late = [i for i, s in series if through is not None and i <= through and s.requests != running.counts.get(i, 0)]
        emit_from = min(late) if late else (series[0][0] if through is None else through + 1)
        if late:
            running.reset()
        out = []
        for index, stats in series:
            if running.through is not None and index <= running.through:
                continue
            if isinstance(stats, LatencyStats):
                running.stats.merge(stats)
            elif isinstance(stats, ClosedStats) and stats.requests:
                reopened = stats.reopen()
                running.stats.merge(reopened)
                reopened.release()
            running.counts[index] = stats.requests
            running.through = index
            if index >= emit_from:
                totals = running.stats
                out.append(
                    CumulativeFigures(index, target, len(running.counts), totals.requests, totals.failures, totals.latency_ms())
                )
        return out


def cumulative_point(run_id: str, target_tags: Mapping[str, str], window_s: float, figures: CumulativeFigures) -> Point:
    """The `requests_cumulative` point of one target through one window (pure)."""
    latency = figures.latency_ms
    fields: dict[str, float | int | None] = {
        "count": figures.requests,
        "failures": figures.failures,
        "windows": figures.windows,
        **{f"{key}_ms": latency[key] for key in ("mean", "p50", "p90", "p95", "p99", "p999", "max")},
    }
    tags = {"run_id": run_id, "worker": "all", **target_tags}
    return Point(MEASUREMENT, tags, fields, seconds_to_ns(figures.index * window_s))
