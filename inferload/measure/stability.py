"""The stability rule of a sweep step: N consecutive windows agree within ±P % (perf_analyzer's rule).

A window agrees with its run of N when its throughput and its p99 are both within ±P % of the run's
mean of that figure. Windows with no completed request never agree (a stalled window is not stable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
