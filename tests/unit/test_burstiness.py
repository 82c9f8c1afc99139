"""The burstiness a run sent: gaps between actual sends, every worker's merged on the master."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from inferload.measure.run_record import GapStats, RunRecord, gap_cv
from inferload.results.figures import format_burstiness


def test_gap_stats_match_the_textbook_cv() -> None:
    rng = random.Random(1)
    times = sorted(rng.uniform(0, 100) for _ in range(5000))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    stats = GapStats()
    for t in times:
        stats.add(t)
    assert stats.gaps == 4999 and stats.times == 5000
    assert stats.cv == pytest.approx(statistics.stdev(gaps) / statistics.mean(gaps), rel=1e-9)
    assert GapStats.from_wire(stats.to_wire()) == stats
    assert GapStats().cv is None and gap_cv([1.0, 2.0]) is None  # one gap: no spread to speak of


def test_two_workers_sends_merge_into_the_whole_runs_gaps() -> None:
    """Each worker sends every other arrival; the run's burstiness is the union's, not either half's."""
    rng = random.Random(7)
    t, times = 1000.0, []
    for _ in range(3000):
        t += rng.expovariate(100.0) if rng.random() < 0.7 else rng.expovariate(5.0)  # bursty
        times.append(t)
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    workers = [RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0) for _ in range(2)]
    for i, sent in enumerate(times):
        workers[i % 2].record_send("t", sent)
        if i % 400 == 0:  # a report now and then, as Locust's (every ~3 s)
            for worker in workers:
                master.merge_wire(worker.drain_to_wire())
    for worker in workers:
        master.merge_wire(worker.drain_to_wire())
    whole = master.send_times.figures("t", 1000.0)
    assert whole.gaps == len(times) - 1 and master.send_times.late == 0
    assert whole.cv == pytest.approx(gap_cv(times), rel=1e-9)
    assert gap_cv(times[::2]) != pytest.approx(gap_cv(times), rel=0.05)  # a half alone says something else


def test_a_time_reported_after_its_window_closed_is_counted_late() -> None:
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=0.0)
    worker = RunRecord(window_s=1.0, warmup_s=0.0, started_at=0.0)
    master.record("t", 1.0, False, now=100.0)  # the master has seen window 100: windows before ~94 are closed
    worker.record_send("t", 50.5)
    master.merge_wire(worker.drain_to_wire())
    assert master.send_times.late == 1 and master.send_times.figures("t", 0.0).times == 0


def test_the_steady_state_alone_counts() -> None:
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=10.0)
    for t in (10.5, 11.0, 12.0, 12.5, 13.5):
        record.record_send("t", t)
        record.record_scheduled("t", t)
    assert record.send_times.figures("t", record.warmup_ends_at).times == 3
    assert record.schedule_gaps["t"].times == 3


def test_the_console_line_names_each_open_loop_target() -> None:
    targets = {
        "a": {"open_loop": {"burstiness": {"sent_cv": 2.951, "scheduled_cv": 3.02, "sent_gaps": 9}}},
        "b": {"open_loop": {"configured_rps": 5}},  # a summary from before the burstiness figures
        "c": {"requests": 3},  # closed loop
    }
    line = format_burstiness(targets)
    assert line is not None and line.endswith("a 2.95 (scheduled 3.02), b n/a (scheduled n/a)"), line
    assert format_burstiness({"c": {"requests": 3}}) is None
