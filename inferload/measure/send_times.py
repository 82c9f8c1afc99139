"""Open-loop requests' actual send times, merged over every process, as each target's sent gaps.

The burstiness a run really sent is the CV of the gaps between its requests' send times, all
workers together (each worker sends every n-th arrival: its own gaps say nothing of the whole).
So times are kept per (window, target) until the window closes (when the run record closes its
histograms: `RunRecord._close_old_windows`, some seconds after the window's end, once every
worker's report for it is in), then sorted and added in time order to the target's `GapStats`,
counting only the steady state's. A time for a window already folded (a report later than that)
is counted in ``late`` and left out. Memory is bounded by the windows still open. Workers drain
their times with every report (about every 3 s, well before a window closes).
"""

from __future__ import annotations

import copy
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from inferload.measure.gaps import GapStats

WindowKey = tuple[int, str]


@dataclass
class SendTimes:
    open: dict[WindowKey, array[float]] = field(default_factory=dict)
    gaps: dict[str, GapStats] = field(default_factory=lambda: defaultdict(GapStats))
    #: windows below this index are folded into `gaps`
    folded_before: int | None = None
    #: times that came for a window already folded (left out of `gaps`)
    late: int = 0

    def add(self, index: int, target: str, t: float) -> None:
        if self.folded_before is not None and index < self.folded_before:
            self.late += 1
            return
        times = self.open.get((index, target))
        if times is None:
            times = self.open[(index, target)] = array("d")
        times.append(t)

    def fold_before(self, index: int, steady_from: float | None) -> None:
        """Fold every window below ``index`` into the gaps, in time order (times before ``steady_from`` left out)."""
        for key in sorted(key for key in self.open if key[0] < index):
            _fold(self.gaps[key[1]], self.open.pop(key), steady_from)
        self.folded_before = index if self.folded_before is None else max(self.folded_before, index)

    def figures(self, target: str, steady_from: float | None) -> GapStats:
        """The target's gaps so far, windows still open included (nothing is folded here)."""
        stats = copy.copy(self.gaps.get(target) or GapStats())
        for key in sorted(key for key in self.open if key[1] == target):
            _fold(stats, self.open[key], steady_from)
        return stats

    def drain_to_wire(self) -> list[list[Any]]:
        """Every open window's times as ``[index, target, float64 bytes]``; leaves them empty."""
        wire = [[index, target, times.tobytes()] for (index, target), times in self.open.items()]
        self.open.clear()
        return wire

    def merge_wire(self, wire: list[list[Any]]) -> None:
        for index, target, raw in wire:
            times = array("d")
            times.frombytes(bytes(raw))
            if self.folded_before is not None and int(index) < self.folded_before:
                self.late += len(times)
                continue
            mine = self.open.get((int(index), target))
            if mine is None:
                self.open[(int(index), target)] = times
            else:
                mine.extend(times)


def _fold(stats: GapStats, times: array[float], steady_from: float | None) -> None:
    for t in sorted(times):
        if steady_from is None or t >= steady_from:
            stats.add(t)
