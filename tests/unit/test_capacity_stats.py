"""The capacity search's statistics, without a server: the percentile over merged window histograms
(exactly the run's own), its interval (a bootstrap over windows with a binomial rank, widened for few
windows), the error rate's interval, and the isotonic fit. Every random draw has a fixed seed: these
tests give the same result on every run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from inferload.measure.hdr import LatencyStats
from inferload.tune.capacity_stats import (
    error_rate_replicates,
    histogram_of,
    interval,
    isotonic_increasing,
    isotonic_increasing_rows,
    log_crossing,
    missed_goodput,
    missed_goodput_replicates,
    percentile_interval,
    percentile_ms,
    percentile_replicates,
    spread_for_few_windows,
    window_histogram,
)


def lognormal_windows(rng: np.random.Generator, windows: int, per_window: int) -> list:
    return [histogram_of(rng.lognormal(math.log(10.0), 0.5, per_window)) for _ in range(windows)]


def test_the_merged_percentile_is_the_runs_own_figure():
    rng = np.random.default_rng(1)
    samples = [rng.lognormal(math.log(10.0), 0.6, 400) for _ in range(5)]
    merged = LatencyStats()
    for window in samples:
        for value in window:
            merged.record_success(float(value))
    windows = [histogram_of(window) for window in samples]
    for key, pct in (("p50", 50.0), ("p99", 99.0), ("p999", 99.9)):
        assert percentile_ms(windows, pct) == pytest.approx(merged.latency_ms()[key], rel=1e-9)


def test_a_window_read_from_its_wire_form_is_the_window_recorded():
    rng = np.random.default_rng(2)
    stats = LatencyStats()
    values = rng.lognormal(math.log(5.0), 0.4, 300)
    for value in values:
        stats.record_success(float(value))
    stats.record_failure()
    read = window_histogram(stats.to_wire())
    direct = histogram_of(values, failures=1)
    assert read.failures == 1 and read.successes == 300
    assert np.array_equal(read.values_us, direct.values_us) and np.array_equal(read.counts, direct.counts)
    assert window_histogram({"h": "", "s": 0, "f": 4}).requests == 4


def test_the_interval_covers_a_known_percentile_on_independent_latencies():
    """Lognormal latencies (median 10 ms, sigma 0.5): the true p99 is 10·exp(0.5·2.3263) ms. Over 40
    seeded runs of 4 windows of 250 requests, the 95 % interval holds it in at least 36."""
    truth = 10.0 * math.exp(0.5 * 2.326348)
    held = 0
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        estimate, replicates = percentile_interval(lognormal_windows(rng, 4, 250), 99.0, rng, 400)
        low, high = interval(replicates)
        assert estimate is not None and low <= estimate <= high
        held += low <= truth <= high
    assert held >= 36, held


def test_too_few_requests_leave_the_upper_end_open():
    """0.99^300 = 5 %: from 300 requests the p99's 97.5 % bound is unknown; from 1,000 it is not."""
    rng = np.random.default_rng(3)
    few = percentile_replicates(lognormal_windows(rng, 3, 100), 99.0, rng, 1000)
    assert interval(few)[1] == math.inf
    many = percentile_replicates(lognormal_windows(rng, 4, 250), 99.0, rng, 1000)
    assert math.isfinite(interval(many)[1])


def test_the_spread_of_few_windows_is_widened_like_students_t():
    assert spread_for_few_windows(4) == pytest.approx(3.182 / 1.96 * math.sqrt(4 / 3), rel=1e-3)
    assert spread_for_few_windows(10) == pytest.approx(2.262 / 1.96 * math.sqrt(10 / 9), rel=1e-3)
    assert spread_for_few_windows(4) > spread_for_few_windows(10) > spread_for_few_windows(1000) > 0.99


def test_more_windows_narrow_the_interval_and_the_same_data_give_the_same_interval():
    rng = np.random.default_rng(4)
    windows = lognormal_windows(rng, 16, 250)
    four = interval(percentile_interval(windows[:4], 99.0, np.random.default_rng(0), 1000)[1])
    sixteen = interval(percentile_interval(windows, 99.0, np.random.default_rng(0), 1000)[1])
    assert sixteen[1] / sixteen[0] < four[1] / four[0]
    again = interval(percentile_interval(windows, 99.0, np.random.default_rng(0), 1000)[1])
    assert again == sixteen


def test_a_stalled_window_widens_the_interval():
    """A stall moves a whole window: resampling the windows sees it, a binomial rank alone would not."""
    rng = np.random.default_rng(5)
    calm = lognormal_windows(rng, 5, 250)
    stalled = [*calm[:4], histogram_of(rng.lognormal(math.log(10.0), 0.5, 250) + 80.0)]
    calm_low, calm_high = interval(percentile_interval(calm, 99.0, np.random.default_rng(0), 1000)[1])
    low, high = interval(percentile_interval(stalled, 99.0, np.random.default_rng(0), 1000)[1])
    assert high / low > 2 * calm_high / calm_low


def test_two_runs_that_disagree_are_resampled_as_runs_and_the_interval_holds_both():
    """A cliff: one run's p99 near 12 ms, the next one's near 60 ms, at one rate. Pooled window by window
    the slow run's windows are only half of each replicate's; drawn as runs, a replicate is sometimes all
    one run or all the other, and the interval reaches both runs' own p99."""
    rng = np.random.default_rng(8)
    fast = lognormal_windows(rng, 4, 250)
    slow = [histogram_of(rng.lognormal(math.log(10.0), 0.5, 250) + 40.0) for _ in range(4)]
    windows = [*fast, *slow]
    pooled = interval(percentile_interval(windows, 99.0, np.random.default_rng(0), 1000)[1])
    as_runs = interval(percentile_interval(windows, 99.0, np.random.default_rng(0), 1000, run_sizes=[4, 4])[1])
    assert as_runs[0] <= percentile_ms(fast, 99.0) < percentile_ms(slow, 99.0) <= as_runs[1], as_runs
    assert pooled[0] > percentile_ms(fast, 99.0)  # pooled, the fast run's p99 is left out
    one_run = interval(percentile_interval(fast, 99.0, np.random.default_rng(0), 1000, run_sizes=[4])[1])
    assert one_run == interval(percentile_interval(fast, 99.0, np.random.default_rng(0), 1000)[1])  # one run: as before
    with pytest.raises(ValueError, match="do not split"):
        percentile_replicates(windows, 99.0, np.random.default_rng(0), 10, run_sizes=[4, 3])


def test_the_error_rate_interval_keeps_a_zero_honest():
    rng = np.random.default_rng(6)
    clean = [histogram_of(rng.lognormal(2.0, 0.3, 500)) for _ in range(4)]
    low, high = interval(error_rate_replicates(clean, rng, 1000))
    assert low >= 0 and 0 < high < 0.005  # no failure in 2,000 requests: about 1/1,000 is still possible
    failing = [histogram_of(rng.lognormal(2.0, 0.3, 450), failures=50) for _ in range(4)]
    low, high = interval(error_rate_replicates(failing, rng, 1000))
    assert low < 0.1 < high and low > 0.05


def test_a_windows_good_requests_are_read_from_its_line_and_their_missed_share_has_an_interval():
    rng = np.random.default_rng(7)
    stats = LatencyStats()
    for value in rng.lognormal(2.0, 0.3, 200):
        stats.record_success(float(value))
    line = {**stats.to_wire(), "good": 150, "judged": 200}
    assert window_histogram(line).good == 150 and window_histogram(stats.to_wire()).good is None
    assert window_histogram({"h": "", "s": 0, "f": 3, "good": 0, "judged": 0}).good is None  # none judged
    windows = [histogram_of(rng.lognormal(2.0, 0.3, 200)) for _ in range(4)]
    judged = [dataclasses.replace(w, good=180) for w in windows]  # 10 % missed in each
    assert missed_goodput(judged) == pytest.approx(0.1)
    low, high = interval(missed_goodput_replicates(judged, rng, 1000))
    assert 0.05 < low < 0.1 < high < 0.15
    assert missed_goodput(windows) == 1.0  # windows that judged nothing: every request missed


def test_the_isotonic_fit_pools_adjacent_violators_by_weight():
    assert isotonic_increasing([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic_increasing([1.0, 3.0, 2.0], [1, 1, 3]) == [1.0, 2.25, 2.25]
    assert isotonic_increasing([5.0, 1.0, 1.0], [1, 1, 1]) == pytest.approx([7 / 3] * 3)
    assert isotonic_increasing([1.0, 2.0, 3.0], [1, 1, 1]) == [1.0, 2.0, 3.0]


def test_the_isotonic_fit_of_many_rows_at_once_is_each_rows_fit():
    rng = np.random.default_rng(7)
    values = rng.normal(0.0, 1.0, (50, 7)) + np.linspace(0.0, 2.0, 7)
    weights = rng.uniform(1.0, 5.0, 7)
    fitted = isotonic_increasing_rows(values, weights)
    for row in range(50):
        assert fitted[row] == pytest.approx(isotonic_increasing(values[row], weights))


def test_the_crossing_is_interpolated_in_log_latency():
    assert log_crossing(100.0, 10.0, 200.0, 40.0, 20.0) == pytest.approx(150.0)
    assert log_crossing(100.0, 10.0, 200.0, math.inf, 20.0) == 150.0  # not interpolable: the midpoint
