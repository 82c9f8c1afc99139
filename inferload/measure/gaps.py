"""Burstiness: the coefficient of variation (sd / mean) of the gaps between consecutive arrivals.

`GapStats` takes times in order and keeps Welford's running mean and variance of their gaps
(constant memory). A Poisson process has CV 1, evenly spaced arrivals 0, bursty traffic above 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class GapStats:
    """The gaps between times given in order: how many, their mean and sum of squared deviations."""

    gaps: int = 0
    mean_s: float = 0.0
    m2: float = 0.0
    last_t: float | None = None

    def add(self, t: float) -> None:
        """The next time (not before the last one)."""
        if self.last_t is not None:
            gap = t - self.last_t
            self.gaps += 1
            delta = gap - self.mean_s
            self.mean_s += delta / self.gaps
            self.m2 += delta * (gap - self.mean_s)
        self.last_t = t

    @property
    def times(self) -> int:
        """How many times were given."""
        return 0 if self.last_t is None else self.gaps + 1

    @property
    def cv(self) -> float | None:
        """sd / mean of the gaps (sample sd); None with fewer than two gaps or a mean of 0."""
        if self.gaps < 2 or self.mean_s <= 0:
            return None
        return math.sqrt(self.m2 / (self.gaps - 1)) / self.mean_s

    def to_wire(self) -> list[Any]:
        return [self.gaps, self.mean_s, self.m2, self.last_t]

    @classmethod
    def from_wire(cls, data: list[Any]) -> GapStats:
        gaps, mean_s, m2, last_t = data
        return cls(int(gaps), float(mean_s), float(m2), None if last_t is None else float(last_t))


def gap_cv(times: list[float]) -> float | None:
    """The CV of the gaps between ``times`` (sorted here)."""
    stats = GapStats()
    for t in sorted(times):
        stats.add(t)
    return stats.cv
