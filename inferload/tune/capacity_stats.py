"""The statistics of a capacity search, pure (numpy; no server, no files).

**A step's percentile with its interval.** Every run keeps each window's HDR histogram
(histograms.jsonl). The interval of a percentile over a rate's steady windows is a **bootstrap over
the windows with a binomial rank**: each replicate draws as many windows as there are, with
replacement, merges their histograms, and reads the percentile at a rank drawn from Binomial(n + 1, p)
rather than at the fixed rank ⌈p·n⌉. Both halves are needed:

- the windows are the bootstrap's blocks, so the correlated latencies of a queue and a stall that
  moves a whole second stay together (resampling single requests would treat them as independent and
  give an interval far too narrow: the reason one short step could say 225 req/s and the next 600);
- the binomial rank is the order-statistic interval of the merged histogram (of n independent
  latencies, Bin(n, p) fall under the true p-quantile), which a bootstrap over three to ten windows
  cannot give alone. Its (n + 1)-th position stands for the tail not yet seen: a replicate that lands
  there reads +infinity, so a percentile measured on too few requests cannot pass (a p99 needs about
  370 requests: 0.99^367 = 2.5 %).

A bootstrap over W blocks understates the spread when W is small (a resample's variance is
(W - 1) / W of the sample's, and W - 1 degrees of freedom call for Student's t, not the normal), so
the replicates are spread t(W - 1) / 1.96 · sqrt(W / (W - 1)) times as far from the estimate in log
latency (1.87x for 4 windows, 1.24x for 10). The 95 % interval is then the 2.5 % and 97.5 % quantiles
of the replicates. Replicates are drawn from a fixed seed: the same measurements always give the same
interval. How well this covers the truth was measured on a simulated M/D/4 queue (docs/tuning.md):
short runs see too few of the rare long busy periods, so near the boundary the interval errs towards
passing a little more often than its 2.5 %, which the monotone fit, the repeats and the verification
runs are there to catch.

**Several runs at one rate** are resampled as runs: each replicate draws the runs with replacement,
then each drawn run's windows, so the interval holds how far whole runs moved from one another (a
cliff's p99 can move tenfold between two runs a few seconds apart), which one run's windows cannot show.

**The curve.** `isotonic_increasing` is the pool-adjacent-violators fit of a nondecreasing curve
(latency never falls as the offered rate grows): a level measured high below one measured low is
pooled with it, weighted by its requests, instead of flipping the answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferload.measure.hdr import LatencyStats
from inferload.results.repeats import t975

#: two-sided confidence of every interval
CONFIDENCE = 0.95
#: bootstrap replicates (the quantiles of 1,000 replicates move by well under the interval's width)
REPLICATES = 1000
#: replicates are computed this many at a time (bounds the memory: chunk x distinct latencies)
_CHUNK = 200


@dataclass(frozen=True)
class WindowHistogram:
    """One window's successful latencies as an HDR histogram's non-empty buckets, and its failures."""

    values_us: np.ndarray  # ascending, each bucket's value (µs: HDR's highest equivalent value)
    counts: np.ndarray  # successes in each bucket
    failures: int = 0
    min_us: float = 0.0  # the exact smallest and largest latency (percentiles are clamped to them, as a run's are)
    max_us: float = math.inf
    #: a generative target's requests that met every goodput threshold (None: the window judged none)
    good: int | None = None

    @property
    def successes(self) -> int:
        return int(self.counts.sum())

    @property
    def requests(self) -> int:
        return self.successes + self.failures


def _window(stats: LatencyStats) -> WindowHistogram:
    histogram = stats.histogram
    counts = np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len]
    indices = np.flatnonzero(counts)
    values = np.array(
        [histogram.get_highest_equivalent_value(histogram.get_value_from_index(int(i))) for i in indices], dtype=np.float64
    )
    return WindowHistogram(values, counts[indices].astype(np.int64), stats.failures, stats.min_ms * 1000.0, stats.max_ms * 1000.0)


def window_histogram(wire: Mapping[str, Any]) -> WindowHistogram:
    """A window as `LatencyStats.to_wire` (and each line of histograms.jsonl) holds it."""
    failures = int(wire.get("f", 0))
    good = int(wire["good"]) if wire.get("judged") else None
    if not wire.get("h") or not int(wire.get("s", 0)):
        return WindowHistogram(np.zeros(0), np.zeros(0, dtype=np.int64), failures, good=good)
    stats = LatencyStats.from_wire({key: value for key, value in wire.items() if key not in ("good", "judged")})
    try:
        return replace(_window(stats), good=good)
    finally:
        stats.release()


def histogram_of(latencies_ms: Iterable[float], failures: int = 0) -> WindowHistogram:
    """A window from raw latencies, bucketed exactly as a run's recorder buckets them."""
    stats = LatencyStats(failures=failures)
    for value in latencies_ms:
        stats.record_success(float(value))
    if not stats.successes:
        return WindowHistogram(np.zeros(0), np.zeros(0, dtype=np.int64), failures)
    try:
        return _window(stats)
    finally:
        stats.release()


def _matrix(windows: Sequence[WindowHistogram]) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in µs, clamped to the windows' exact min and max; counts: windows x values)."""
    present = [w.values_us for w in windows if len(w.values_us)]
    values = np.unique(np.concatenate(present)) if present else np.zeros(0)
    matrix = np.zeros((len(windows), len(values)), dtype=np.float64)
    for row, window in enumerate(windows):
        if len(window.values_us):
            matrix[row, np.searchsorted(values, window.values_us)] += window.counts
    if present:
        low = min(w.min_us for w in windows if len(w.values_us))
        high = max(w.max_us for w in windows if len(w.values_us))
        values = np.clip(values, low, high)
    return values, matrix


def percentile_ms(windows: Sequence[WindowHistogram], percentile: float) -> float | None:
    """The percentile over every window merged (rank ⌈p·n⌉, as the run's own figures); None: no success."""
    values, matrix = _matrix(windows)
    merged = matrix.sum(axis=0)
    total = merged.sum()
    if total <= 0:
        return None
    rank = max(1.0, math.ceil(percentile / 100.0 * total - 1e-9))
    index = int(np.searchsorted(np.cumsum(merged), rank - 1e-9))
    return float(values[min(index, len(values) - 1)]) / 1000.0


def _window_weights(count: int, replicates: int, rng: np.random.Generator, run_sizes: Sequence[int] | None = None) -> np.ndarray:
    """How often each window is drawn in each replicate (replicates x windows). With `run_sizes` (the
    windows of each run, in order, summing to `count`) and more than one run, a two-stage draw: the runs
    with replacement first, then each drawn run's windows, so a replicate moves as much as whole runs
    moved from one another (one run's windows alone never show it)."""
    if run_sizes is None or len(run_sizes) <= 1:
        if count == 1:
            return np.ones((replicates, 1))
        return rng.multinomial(count, np.full(count, 1.0 / count), size=replicates).astype(np.float64)
    if sum(run_sizes) != count or min(run_sizes) < 1:
        raise ValueError(f"run_sizes {list(run_sizes)} do not split {count} windows")
    runs = len(run_sizes)
    drawn_runs = rng.multinomial(runs, np.full(runs, 1.0 / runs), size=replicates)  # replicates x runs
    columns = []
    for run, size in enumerate(run_sizes):
        # c draws of a run's W windows each, summed: one multinomial of c * W draws
        columns.append(rng.multinomial(drawn_runs[:, run] * size, np.full(size, 1.0 / size)).astype(np.float64))
    return np.concatenate(columns, axis=1)


def percentile_replicates(
    windows: Sequence[WindowHistogram],
    percentile: float,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
    run_sizes: Sequence[int] | None = None,
) -> np.ndarray:
    """Bootstrap replicates (ms) of the percentile: windows resampled (runs first, given `run_sizes`),
    the rank drawn from Binomial(n + 1, p); +inf where the rank passes every latency seen (and with no
    success at all)."""
    values, matrix = _matrix(windows)
    out = np.full(replicates, math.inf)
    if not len(windows) or not len(values):
        return out
    weights = _window_weights(len(windows), replicates, rng, run_sizes)
    share = percentile / 100.0
    for first in range(0, replicates, _CHUNK):
        chunk = weights[first : first + _CHUNK]
        merged = chunk @ matrix  # replicates x values
        cumulative = np.cumsum(merged, axis=1)
        totals = cumulative[:, -1]
        ranks = rng.binomial(totals.astype(np.int64) + 1, share).astype(np.float64)
        ranks = np.maximum(ranks, 1.0)
        index = (cumulative < ranks[:, None] - 1e-9).sum(axis=1)
        picked = values[np.minimum(index, len(values) - 1)] / 1000.0
        out[first : first + len(chunk)] = np.where((index >= len(values)) | (totals <= 0), math.inf, picked)
    return out


def spread_for_few_windows(windows: int) -> float:
    """How much a bootstrap over `windows` blocks understates the spread: Student's t with windows - 1
    degrees of freedom over the normal's 1.96, times sqrt(W / (W - 1)) (a resample's variance is
    (W - 1) / W of the sample's). 1.87 for 4 windows, 1.24 for 10, 1.0 in the limit."""
    if windows <= 1:
        return 3.0
    return t975(windows - 1) / 1.96 * math.sqrt(windows / (windows - 1))


def widened(replicates: np.ndarray, estimate: float | None, windows: int) -> np.ndarray:
    """Replicates spread `spread_for_few_windows` times as far from the estimate, in log latency."""
    if estimate is None or estimate <= 0:
        return replicates
    factor = spread_for_few_windows(windows)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = estimate * np.power(replicates / estimate, factor)
    return np.where(np.isfinite(replicates) & (replicates > 0), scaled, replicates)


def percentile_interval(
    windows: Sequence[WindowHistogram],
    percentile: float,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
    run_sizes: Sequence[int] | None = None,
) -> tuple[float | None, np.ndarray]:
    """(the percentile over every window, its replicates widened for the number of windows)."""
    estimate = percentile_ms(windows, percentile)
    drawn = percentile_replicates(windows, percentile, rng, replicates, run_sizes)
    return estimate, widened(drawn, estimate, len(windows))


def error_rate_replicates(
    windows: Sequence[WindowHistogram],
    rng: np.random.Generator,
    replicates: int = REPLICATES,
    run_sizes: Sequence[int] | None = None,
) -> np.ndarray:
    """Bootstrap replicates of the error rate: windows resampled, then the rate drawn from the Jeffreys
    posterior Beta(f + 1/2, n - f + 1/2) of the replicate's f failures in n requests (no failure in n
    requests still leaves a rate of about 1/n possible; with no request at all, 1.0)."""
    return _share_replicates([w.failures for w in windows], windows, rng, replicates, run_sizes)


def missed_goodput_replicates(
    windows: Sequence[WindowHistogram],
    rng: np.random.Generator,
    replicates: int = REPLICATES,
    run_sizes: Sequence[int] | None = None,
) -> np.ndarray:
    """Bootstrap replicates of the share of requests that were not good (failed, or missed a goodput
    threshold; a window that judged none counts every request as missed), as `error_rate_replicates`."""
    return _share_replicates([w.requests - (w.good or 0) for w in windows], windows, rng, replicates, run_sizes)


def _share_replicates(
    counted: Sequence[int],
    windows: Sequence[WindowHistogram],
    rng: np.random.Generator,
    replicates: int,
    run_sizes: Sequence[int] | None,
) -> np.ndarray:
    """Replicates of the share ``sum(counted) / sum(requests)`` (see `error_rate_replicates`)."""
    failures = np.array(counted, dtype=np.float64)
    requests = np.array([w.requests for w in windows], dtype=np.float64)
    if not len(windows) or requests.sum() <= 0:
        return np.ones(replicates)
    weights = _window_weights(len(windows), replicates, rng, run_sizes)
    f = weights @ failures
    n = weights @ requests
    drawn = rng.beta(f + 0.5, np.maximum(n - f, 0.0) + 0.5)
    return np.where(n > 0, drawn, 1.0)


def error_rate(windows: Sequence[WindowHistogram]) -> float | None:
    requests = sum(w.requests for w in windows)
    return None if requests == 0 else sum(w.failures for w in windows) / requests


def missed_goodput(windows: Sequence[WindowHistogram]) -> float | None:
    """The share of the windows' requests that were not good (None: no request)."""
    requests = sum(w.requests for w in windows)
    return None if requests == 0 else sum(w.requests - (w.good or 0) for w in windows) / requests


def interval(replicates: np.ndarray) -> tuple[float, float]:
    """The two-sided `CONFIDENCE` interval of bootstrap replicates (+inf allowed)."""
    tail = (1.0 - CONFIDENCE) / 2.0
    return float(np.quantile(replicates, tail, method="lower")), float(np.quantile(replicates, 1.0 - tail, method="higher"))


def isotonic_increasing(values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray) -> list[float]:
    """The nondecreasing sequence closest to `values` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, length]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([float(value), max(float(weight), 1e-12), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, weight_b, length = blocks.pop()
            previous = blocks[-1]
            total = previous[1] + weight_b
            previous[0] = (previous[0] * previous[1] + mean * weight_b) / total
            previous[1] = total
            previous[2] += length
    fitted: list[float] = []
    for mean, _, length in blocks:
        fitted.extend([mean] * int(length))
    return fitted


def isotonic_increasing_rows(values: np.ndarray, weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """`isotonic_increasing` of every row of `values` (rows x points) at once, by the min-max formula
    fit_i = max over j <= i of min over k >= i of the weighted mean of points j..k (finite values)."""
    rows, points = values.shape
    w = np.asarray(weights, dtype=np.float64)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cv = np.concatenate([np.zeros((rows, 1)), np.cumsum(values * w, axis=1)], axis=1)
    j = np.arange(points)[:, None]
    k = np.arange(points)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        means = (cv[:, None, 1:] - cv[:, :-1, None]) / (cw[None, 1:] - cw[:-1, None])[None, :, :]
    means = np.where((j <= k)[None, :, :], means, np.inf)
    # min over k >= i: a cumulative minimum from the right along k
    suffix_min = np.minimum.accumulate(means[:, :, ::-1], axis=2)[:, :, ::-1]
    suffix_min = np.where((j <= k)[None, :, :], suffix_min, -np.inf)  # [b, j, i]: only j <= i counts
    return suffix_min.max(axis=1)


def log_crossing(rate_a: float, value_a: float, rate_b: float, value_b: float, bound: float) -> float:
    """Where a curve through (rate_a, value_a) and (rate_b, value_b), linear in log(value), reaches
    `bound` (value_a <= bound < value_b); the midpoint when the values cannot be interpolated."""
    if not (0 < value_a < value_b) or not math.isfinite(value_b) or not value_a <= bound <= value_b:
        return (rate_a + rate_b) / 2.0
    share = (math.log(bound) - math.log(value_a)) / (math.log(value_b) - math.log(value_a))
    return rate_a + share * (rate_b - rate_a)
