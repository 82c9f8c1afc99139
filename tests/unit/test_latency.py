"""Latency statistics merge exactly across workers and keep 3 significant digits."""

from __future__ import annotations

import random

import pytest

from inferload.measure.hdr import LatencyStats


def exact_percentile(values, pct):
    ordered = sorted(values)
    rank = max(0, round(pct / 100.0 * len(ordered) + 0.4999999) - 1)
    return ordered[rank]


def test_merged_percentiles_equal_those_of_all_requests_together():
    rng = random.Random(7)
    workers = [[rng.lognormvariate(1.0, 0.6) for _ in range(5000)] for _ in range(3)]
    merged = LatencyStats()
    for values in workers:
        stats = LatencyStats()
        for v in values:
            stats.record_success(v)
        merged.merge(LatencyStats.from_wire(stats.to_wire()))  # as a worker report travels
    everything = [v for values in workers for v in values]
    figures = merged.latency_ms()
    for key, pct in [("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)]:
        assert figures[key] == pytest.approx(exact_percentile(everything, pct), rel=1e-3)
    assert figures["max"] == max(everything)
    assert figures["mean"] == pytest.approx(sum(everything) / len(everything))
    assert merged.successes == 15000


def test_failures_are_counted_but_not_in_the_latency_figures():
    stats = LatencyStats()
    stats.record_success(10.0)
    stats.record_failure()
    stats.record_failure()
    assert stats.requests == 3
    assert stats.failures == 2
    assert stats.latency_ms()["p99"] == pytest.approx(10.0, rel=1e-3)


def test_nothing_measured_gives_no_figures_rather_than_zeros():
    assert LatencyStats().latency_ms()["p50"] is None
