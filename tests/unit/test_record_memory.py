"""A long run's record stays small: closed windows are compressed, and late figures still merge exactly."""

from __future__ import annotations

import math
import random
import tracemalloc

import pytest

from inferload.measure.hdr import ClosedStats, LatencyStats
from inferload.measure.run_record import Outage, RunRecord
from inferload.measure.windows import WindowStore
from inferload.results.summary import window_rows

START = 1_000_000.0


def fill_local(record: RunRecord, windows: int, targets: tuple[str, ...], per_window: int, seed: int = 1) -> dict:
    """Record `per_window` requests per window and target; the values, by (window, target)."""
    rng = random.Random(seed)
    values: dict[tuple[int, str], list[float]] = {}
    for w in range(windows):
        for i in range(per_window):
            now = START + w + i / per_window
            for target in targets:
                latency = rng.lognormvariate(1.5, 0.7)
                record.record(target, latency, False, now)
                values.setdefault((int(now // 1.0), target), []).append(latency)
    return values


def test_a_long_local_run_keeps_only_a_few_full_histograms():
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    horizon = math.ceil(record.close_after_s / record.window_s) + 1
    most_open = 0
    rng = random.Random(5)
    for w in range(400):
        for target in ("a", "b"):
            record.record(target, rng.uniform(1, 50), False, START + w + 0.5)
        most_open = max(most_open, record.open_histograms)
    assert most_open <= 2 * horizon  # two targets, each with the windows a report may still reach
    assert len(record.windows) == 800 and record.windows.closed_count >= 800 - 2 * horizon
    assert all(isinstance(record.windows[(int(START) + w, "a")], ClosedStats) for w in range(300))


def test_closed_windows_cost_a_small_fraction_of_full_histograms():
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
        fill_local(record, windows=300, targets=("a", "b"), per_window=5)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    full = LatencyStats().histogram.counts_len * 8  # one open window's counters
    assert used < 40 * full, f"{used / 1e6:.1f} MB for 600 windows"  # unbounded: 600 full histograms


def test_window_figures_are_the_same_whether_windows_were_closed_or_not():
    closing = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, stopped_at=START + 60)
    keeping = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, stopped_at=START + 60, close_after_s=math.inf)
    for record in (closing, keeping):
        fill_local(record, windows=60, targets=("a", "b"), per_window=30, seed=9)
        record.record("a", 7.0, True, START + 30.5)
    assert keeping.windows.closed_count == 0 and closing.windows.closed_count > 100
    assert window_rows(closing) == window_rows(keeping)


def worker_report(values: list[tuple[float, float]]) -> dict:
    worker = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    for now, latency in values:
        worker.record("t", latency, False, now)
    return worker.drain_to_wire()


def test_a_late_report_into_a_closed_window_merges_exactly():
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    rng = random.Random(2)
    on_time = [(START + 0.1 + i / 1000, rng.lognormvariate(1.0, 0.5)) for i in range(500)]
    late = [(START + 0.2 + i / 1000, rng.lognormvariate(2.0, 0.9)) for i in range(500)]
    master.merge_wire(worker_report(on_time), worker="w1")
    for w in range(1, 40):  # the other worker's reports move the newest window on
        master.merge_wire(worker_report([(START + w + 0.5, 3.0)]), worker="w1")
    window = (int(START), "t")
    assert isinstance(master.windows[window], ClosedStats)
    master.merge_wire(worker_report(late), worker="w2")  # a report that was held up
    assert isinstance(master.windows[window], ClosedStats)  # reopened, merged, closed again
    assert master.open_histograms <= 2 * (math.ceil(master.close_after_s) + 1)

    reference = LatencyStats()
    for _, latency in on_time + late:
        reference.record_success(latency)
    merged, expected = master.windows[window].latency_ms(), reference.latency_ms()
    assert merged.pop("mean") == pytest.approx(expected.pop("mean"), rel=1e-12)  # sums added in another order
    assert merged == expected  # percentiles and max: exactly those of all values together
    assert master.windows[window].requests == 1000
    assert master.worker_windows[(int(START), "t", "w2")].latency_ms() == worker_reference(late).latency_ms()


def worker_reference(values: list[tuple[float, float]]) -> LatencyStats:
    stats = LatencyStats()
    for _, latency in values:
        stats.record_success(latency)
    return stats


def test_a_closed_window_reopens_to_the_same_statistics_and_travels_on_the_wire():
    stats = worker_reference([(0.0, v) for v in (1.5, 2.25, 80.0, 0.9)])
    stats.record_failure()
    closed = stats.close()
    assert len(closed.encoded) < 2000
    assert closed.latency_ms() == stats.latency_ms()
    reopened = closed.reopen()
    assert reopened.latency_ms() == stats.latency_ms() and reopened.requests == 5
    assert LatencyStats.from_wire(closed.to_wire()).latency_ms() == stats.latency_ms()
    assert ClosedStats.empty().latency_ms() == LatencyStats().latency_ms()


def test_a_store_reopens_a_closed_window_for_late_data_only():
    store: WindowStore[tuple[int, str]] = WindowStore()
    for index in range(10):
        store.writable((index, "t")).record_success(float(index + 1))
    assert store.close_before(8) == 8 and store.open_count == 2
    store.writable((3, "t")).record_success(100.0)
    assert store.open_count == 3 and store[(3, "t")].latency_ms()["max"] == 100.0
    assert len(store) == 10 and (3, "t") in store and (11, "t") not in store


def test_refused_streaks_become_outages_and_travel_from_workers():
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    worker = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    worker.record("t", 5.0, False, START + 0.5)
    for now in (START + 1.2, START + 1.9, START + 2.1, START + 4.7):  # window 3: backing off, nothing at all
        worker.record("t", 0.3, True, now, refused=True)
    worker.record("t", 5.0, False, START + 5.5)
    worker.record("t", 0.3, True, START + 8.25, refused=True)
    master.merge_wire(worker.drain_to_wire(), worker="w1")
    assert master.outages("t") == [Outage(START + 1.2, START + 4.7, 4), Outage(START + 8.25, START + 8.25, 1)]
    assert master.outages("t")[0].as_dict()["failures"] == 4
    assert master.outages("t")[0].as_dict()["start"].startswith("1970-01-12T13:46:41.2")
    assert master.steady["t"].failures == 5
