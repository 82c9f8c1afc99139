"""Kolmogorov-Smirnov statistics for the arrival-law tests (seeded draws: a check at 0.1 % is a
fixed pass or fail, never a flip)."""

from __future__ import annotations

import bisect
import math


def ks_critical(alpha: float, n: int, m: int | None = None) -> float:
    """The KS critical distance at level ``alpha``: one sample of ``n``, or two of ``n`` and ``m``."""
    c = math.sqrt(-math.log(alpha / 2) / 2)
    return c / math.sqrt(n) if m is None else c * math.sqrt((n + m) / (n * m))


def ks_against_exponential(gaps: list[float], rate: float) -> float:
    """The one-sample KS statistic of ``gaps`` against Exp(rate) (Poisson's gaps)."""
    ordered = sorted(gaps)
    n = len(ordered)
    worst = 0.0
    for i, gap in enumerate(ordered):
        cdf = 1 - math.exp(-rate * gap)
        worst = max(worst, abs((i + 1) / n - cdf), abs(i / n - cdf))
    return worst


def ks_two_sample(a: list[float], b: list[float]) -> float:
    """The largest distance between the two samples' empirical distribution functions."""
    a, b = sorted(a), sorted(b)
    return max(abs(bisect.bisect_right(a, x) / len(a) - bisect.bisect_right(b, x) / len(b)) for x in a + b)
