"""Per-window latency statistics that keep memory bounded over a run of any length.

A `WindowStore` maps a key whose first item is the window index (`(index, target)`, or
`(index, target, worker)`) to that window's statistics. Open windows hold a full `LatencyStats`
(~184 KB each); `close_before(index)` turns every older window into a `ClosedStats` (its
compressed histogram and figures, a few hundred bytes). Data that arrives for a closed window
reopens it (the histogram is decoded), so a late worker report still merges exactly.

Reading is a read-only `Mapping`: `store[key]`, `.get`, `.items()`; the values have
`requests`, `failures`, `latency_ms()` and `to_wire()` whether open or closed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats


# The stability rule of a sweep step: N consecutive windows agree within ±P % (perf_analyzer's rule).
#
# A window agrees with its run of N when its throughput and its p99 are both within ±P % of the run's
# mean of that figure. Windows with no completed request never agree (a stalled window is not stable).
@dataclass(frozen=True)
class WindowFigures:
    """One measurement window of one target: completed requests/s and its p99 (None: nothing completed)."""

    throughput_rps: float | None
    p99_ms: float | None


@dataclass(frozen=True)
class StabilityRule:
    windows: int = 3
    tolerance_pct: float = 10.0
    max_windows: int = 10

    def __post_init__(self) -> None:
        if self.windows < 1:
            raise ValueError(f"stable windows must be at least 1; got {self.windows}")
        if self.max_windows < self.windows:
            raise ValueError(f"max windows ({self.max_windows}) must be at least the stable windows ({self.windows})")
        if not 0 < self.tolerance_pct < 100:
            raise ValueError(f"the tolerance must be between 0 and 100 %; got {self.tolerance_pct:g}")


def _within(values: Sequence[float], tolerance_pct: float) -> bool:
    mean = sum(values) / len(values)
    if mean == 0:
        return all(value == 0 for value in values)
    return all(abs(value - mean) <= mean * tolerance_pct / 100.0 for value in values)


def first_stable_run(windows: Sequence[WindowFigures], rule: StabilityRule) -> int | None:
    """Index of the first window of the first run of ``rule.windows`` agreeing windows; None if none."""
    n = rule.windows
    for start in range(0, len(windows) - n + 1):
        run = windows[start : start + n]
        rps = [w.throughput_rps for w in run]
        p99 = [w.p99_ms for w in run]
        if any(v is None or v <= 0 for v in rps) or any(v is None for v in p99):
            continue
        if _within([v for v in rps if v is not None], rule.tolerance_pct) and _within(
            [v for v in p99 if v is not None], rule.tolerance_pct
        ):
            return start
    return None


KeyT = TypeVar("KeyT", bound=tuple)


class WindowStore(Mapping[KeyT, WindowStats], Generic[KeyT]):
    """Open windows as full histograms, closed ones compressed; keys start with the window index."""

    def __init__(self) -> None:
        self._open: dict[KeyT, LatencyStats] = {}
        self._closed: dict[KeyT, ClosedStats] = {}

    # -- reading ------------------------------------------------------------------------------
    def __getitem__(self, key: KeyT) -> WindowStats:
        stats = self._open.get(key)
        if stats is not None:
            return stats
        return self._closed[key]

    def __iter__(self) -> Iterator[KeyT]:
        yield from list(self._open)
        yield from list(self._closed)

    def __len__(self) -> int:
        return len(self._open) + len(self._closed)

    def __contains__(self, key: object) -> bool:
        return key in self._open or key in self._closed

    @property
    def open_count(self) -> int:
        """How many windows hold a full histogram now."""
        return len(self._open)

    @property
    def closed_count(self) -> int:
        return len(self._closed)

    # -- writing ------------------------------------------------------------------------------
    def writable(self, key: KeyT) -> LatencyStats:
        """The window's full statistics to record into: created, or reopened when closed."""
        stats = self._open.get(key)
        if stats is None:
            closed = self._closed.pop(key, None)
            stats = closed.reopen() if closed is not None else LatencyStats()
            self._open[key] = stats
        return stats

    def merge(self, key: KeyT, stats: LatencyStats) -> None:
        self.writable(key).merge(stats)

    def close_before(self, index: int) -> int:
        """Close every open window whose index is below `index`; how many were closed."""
        old = [key for key in self._open if key[0] < index]
        for key in old:
            stats = self._open.pop(key)
            self._closed[key] = stats.close()
            stats.release()
        return len(old)

    def clear(self) -> None:
        for stats in self._open.values():
            stats.release()
        self._open.clear()
        self._closed.clear()
