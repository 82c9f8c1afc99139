"""Percentiles stay within the latencies actually seen: HDR's bucket rounding is clamped to min and max."""

from __future__ import annotations

import math
import random

import pytest

from inferload.measure.hdr import PERCENTILES, LatencyStats, percentile_values_us


def percentiles(stats: LatencyStats) -> list[float]:
    figures = stats.latency_ms()
    values = [figures[key] for key in PERCENTILES]
    assert all(v is not None for v in values)
    return [v for v in values if v is not None]


def test_a_percentile_never_exceeds_the_max_where_the_bucket_rounds_up():
    stats = LatencyStats()
    for _ in range(1000):
        stats.record_success(10.001)  # 10,001 µs: its HDR bucket (8 µs wide) reports 10,007 µs
    assert stats.histogram.get_value_at_percentile(99.9) / 1000.0 > 10.001  # the rounding is there
    assert percentiles(stats) == [10.001] * len(PERCENTILES)
    assert stats.latency_ms()["max"] == 10.001


def test_a_percentile_never_falls_below_the_min_where_the_microsecond_rounds_down():
    stats = LatencyStats()
    for _ in range(100):
        stats.record_success(1.0004)  # recorded as 1,000 µs
    assert stats.histogram.get_value_at_percentile(50) / 1000.0 < 1.0004
    assert percentiles(stats) == [1.0004] * len(PERCENTILES)


def test_sub_microsecond_latencies_stay_within_min_and_max():
    stats = LatencyStats()
    for value in (0.0002, 0.0004):
        stats.record_success(value)  # both recorded as the lowest trackable 1 µs
    assert all(0.0002 <= v <= 0.0004 for v in percentiles(stats))


def test_min_and_max_survive_merging_and_the_wire():
    a, b = LatencyStats(), LatencyStats()
    a.record_success(5.0)
    b.record_success(20.0009)
    b.record_success(3.0004)
    merged = LatencyStats()
    for part in (a, b):
        merged.merge(LatencyStats.from_wire(part.to_wire()))
    assert merged.min_ms == 3.0004 and merged.max_ms == 20.0009
    assert all(3.0004 <= v <= 20.0009 for v in percentiles(merged))
    assert merged.latency_ms()["p999"] == 20.0009


def test_random_latencies_keep_every_percentile_within_min_and_max():
    rng = random.Random(11)
    for _ in range(20):
        stats = LatencyStats()
        for _ in range(rng.randint(1, 300)):
            stats.record_success(rng.lognormvariate(2.0, 1.5))
        values = percentiles(stats)
        assert all(stats.min_ms <= v <= stats.max_ms for v in values)
        assert values == sorted(values)


def test_percentiles_are_nearest_rank_where_hdrs_own_lookup_rounds_the_rank_down():
    stats = LatencyStats()
    for ms in range(1, 161):  # 160 latencies: p99's rank is 158.4, nearest-rank takes the 159th
        stats.record_success(float(ms))
    assert stats.histogram.get_value_at_percentile(99) // 1000 == 158  # HDR rounds 158.4 to 158
    assert round(stats.latency_ms()["p99"] or 0) == 159
    assert round(stats.latency_ms()["p50"] or 0) == 80


def test_the_one_pass_percentiles_are_the_nearest_rank_latency_to_the_histograms_resolution():
    rng = random.Random(3)
    for size in (1, 2, 7, 100, 160, 5000):
        latencies = sorted(round(rng.lognormvariate(1.0, 1.2), 3) for _ in range(size))
        stats = LatencyStats()
        for latency in latencies:
            stats.record_success(latency)
        values_us = percentile_values_us(stats.histogram, PERCENTILES.values())
        for pct, value_us in zip(PERCENTILES.values(), values_us, strict=True):
            exact_ms = latencies[math.ceil(pct * size / 100 - 1e-9) - 1]
            assert value_us / 1000 == pytest.approx(exact_ms, rel=0.002, abs=0.002), (size, pct)
