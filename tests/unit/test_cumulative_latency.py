"""Exact figures since the end of the warm-up (`requests_cumulative`), without any server: the
running merge of steady windows equals the percentiles of all their requests together, closed
(compressed) windows count like open ones, and a late report into a counted window redoes the
merge and rewrites the points from that window on."""

from __future__ import annotations

import random

import pytest

from inferload.measure.hdr import LatencyStats
from inferload.measure.run_record import RunRecord
from inferload.observe.influx_export import CumulativeLatency, cumulative_point, first_steady_index
from inferload.results.tail import nearest_rank

START = 4_000_000.0


def exact(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (rank ceil(q % of n)) of every value, the definition summary.json uses."""
    return nearest_rank(sorted(values), q)


def test_the_first_steady_window_starts_at_or_after_the_warm_up_end():
    assert first_steady_index(START + 2.0, 1.0) == START + 2
    assert first_steady_index(START + 2.3, 1.0) == START + 3
    assert first_steady_index(10.0, 0.5) == 20 and first_steady_index(10.1, 0.5) == 21


def test_each_window_gets_the_exact_percentiles_of_every_steady_request_so_far():
    rng = random.Random(3)
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("a", "b"))
    steady: dict[str, list[float]] = {"a": [], "b": []}
    for i in range(800):
        now = START + i / 100  # 8 windows, 100 requests each per target
        for target, mu in (("a", 2.0), ("b", 3.5)):
            ms = rng.lognormvariate(mu, 0.7)
            record.record(target, ms, False, now)
            if now >= START + 2.0:
                steady[target].append(ms)
    record.record("a", 0.0, True, START + 7.5)  # one failure in the last window
    cumulative = CumulativeLatency()
    first = first_steady_index(START + 2.0, 1.0)
    figures = cumulative.update(record.all_windows(), first)
    assert [(f.index - int(START), f.target) for f in figures] == [(i, t) for t in ("a", "b") for i in range(2, 8)]
    for target in ("a", "b"):
        last = [f for f in figures if f.target == target][-1]
        assert last.windows == 6 and last.requests == len(steady[target]) + (target == "a")
        assert last.failures == (1 if target == "a" else 0)
        for q, key in ((50, "p50"), (95, "p95"), (99, "p99")):
            assert last.latency_ms[key] == pytest.approx(exact(steady[target], q), rel=0.001)
    after_two = [f for f in figures if f.target == "a"][1]  # windows 2 and 3
    assert after_two.requests == 200
    assert cumulative.update(record.all_windows(), first) == []  # nothing new, nothing written


def test_closed_windows_count_like_open_ones():
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START, close_after_s=1.0, targets=("a",))
    latencies = [float(1 + i % 50) for i in range(1000)]
    for i, ms in enumerate(latencies):
        record.record("a", ms, False, START + i / 100)
    assert record.windows.open_count < 10  # most windows were compressed
    (last,) = CumulativeLatency().update(record.all_windows(), int(START))[-1:]
    assert last.requests == 1000 and last.latency_ms["p99"] == pytest.approx(exact(latencies, 99), rel=0.001)


def test_a_late_report_into_a_counted_window_rewrites_the_points_from_it_on():
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START, targets=("a",))
    for i in range(5):
        record.record("a", 10.0, False, START + i + 0.5)
    cumulative = CumulativeLatency()
    first = int(START)
    assert len(cumulative.update(record.all_windows(), first)) == 5
    record.record("a", 500.0, False, START + 2.5)  # late: window 2 again
    rewritten = cumulative.update(record.all_windows(), first)
    assert [f.index - first for f in rewritten] == [2, 3, 4]
    assert [f.requests for f in rewritten] == [4, 5, 6] and rewritten[-1].latency_ms["max"] == 500.0
    record.record("a", 20.0, False, START + 5.5)  # a new window: only its point
    (new,) = cumulative.update(record.all_windows(), first)
    assert new.index - first == 5 and new.requests == 7


def test_the_cumulative_point_carries_the_figures_under_the_target_tags():
    stats = LatencyStats()
    stats.record_success(5.0)
    (figures,) = CumulativeLatency().update([((100, "a"), stats)], 100)
    point = cumulative_point("r1", {"target": "a", "model": "m"}, 1.0, figures)
    assert point.measurement == "requests_cumulative" and point.time_ns == 100 * 10**9
    assert point.tags == {"run_id": "r1", "worker": "all", "target": "a", "model": "m"}
    assert point.fields["count"] == 1 and point.fields["windows"] == 1 and point.fields["p99_ms"] == 5.0
