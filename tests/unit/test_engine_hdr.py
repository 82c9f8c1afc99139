"""The engine's HDR encodings against Python's ``hdrh``: what a drained window carries decodes in
``HdrHistogram.decode`` and gives the percentiles ``hdrh`` gives for the same latencies, and a
`LatencyStats` made from it (`RunRecord.merge_wire`'s path) has the same figures as one that
recorded the values itself."""

from __future__ import annotations

import random

import pytest
from hdrh.histogram import HdrHistogram

from inferload.measure.hdr import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS, LatencyStats, percentile_values_us

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

PERCENTILES = [1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]


def samples() -> list[list[float]]:
    rng = random.Random(20)
    return [
        [1.0],
        [0.0004, 0.0005, 0.0015, 0.0025, 0.001],  # sub-microsecond: rounded half to even, clamped to 1 µs
        [rng.lognormvariate(0.0, 0.8) for _ in range(5000)],  # around 1 ms
        [rng.expovariate(1 / 250.0) for _ in range(2000)] + [30_000.0, 4_000_000.0],  # a long tail, and past the hour
        [round(rng.uniform(0.1, 3.0), 3) for _ in range(1000)],
    ]


@pytest.mark.parametrize("latencies", samples(), ids=["one", "sub-us", "lognormal", "tail", "uniform"])
def test_engine_histograms_decode_in_hdrh_with_the_same_percentiles(latencies: list[float]) -> None:
    wire = native.latency_wire(latencies, failures=3)
    python = LatencyStats()
    for latency in latencies:
        python.record_success(latency)
    for _ in range(3):
        python.record_failure()
    decoded = HdrHistogram.decode(wire["h"])
    assert (decoded.lowest_trackable_value, decoded.highest_trackable_value) == (LOWEST_US, HIGHEST_US)
    assert decoded.significant_figures == SIGNIFICANT_DIGITS
    assert decoded.get_total_count() == python.histogram.get_total_count() == len(latencies)
    assert percentile_values_us(decoded, PERCENTILES) == percentile_values_us(python.histogram, PERCENTILES)
    assert [decoded.get_count_at_value(v) for v in (1, 2, 1000, 1500, HIGHEST_US)] == [
        python.histogram.get_count_at_value(v) for v in (1, 2, 1000, 1500, HIGHEST_US)
    ]
    reference = python.to_wire()
    assert {k: wire[k] for k in ("s", "f", "max", "min")} == {k: reference[k] for k in ("s", "f", "max", "min")}
    assert wire["sum"] == pytest.approx(reference["sum"], rel=1e-12)
    merged = LatencyStats.from_wire(wire)
    assert merged.latency_ms() == pytest.approx(python.latency_ms(), rel=1e-12)


def test_no_successes_is_an_empty_encoding() -> None:
    assert native.latency_wire([], failures=2) == {"h": "", "s": 0, "f": 2, "sum": 0.0, "max": 0.0, "min": 0.0}
