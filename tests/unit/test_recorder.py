"""The run record: windows aligned on the clock, warm-up kept apart, worker reports merged."""

from __future__ import annotations

from inferload.measure.run_record import RunRecord
from inferload.results.summary import window_rows


def test_warmup_requests_are_kept_out_of_the_steady_totals():
    record = RunRecord(window_s=1.0, warmup_s=5.0, started_at=1000.0)
    record.record("t", 50.0, False, now=1002.0)  # warm-up: slow first calls
    record.record("t", 5.0, False, now=1006.0)
    record.record("t", 6.0, True, now=1007.0)
    assert record.warmup["t"].requests == 1
    assert record.steady["t"].requests == 2 and record.steady["t"].failures == 1
    assert record.steady["t"].latency_ms()["max"] == 5.0


def test_worker_reports_merge_into_the_masters_record_window_by_window():
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    for worker_latency in (2.0, 4.0):
        worker = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
        worker.record("t", worker_latency, False, now=1000.2)
        worker.record("t", worker_latency, False, now=1001.5)
        master.merge_wire(worker.drain_to_wire())
        assert not worker.windows and not worker.steady  # a report sends each request once
    assert master.steady["t"].requests == 4
    rows = window_rows(master)
    assert [r["requests"] for r in rows] == [2, 2]
    assert rows[0]["max_ms"] == 4.0 and rows[0]["phase"] == "steady"


def test_the_master_keeps_each_workers_windows_apart_as_well_as_merged():
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    for worker, latency in (("w1", 2.0), ("w2", 4.0)):
        report = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
        report.record("t", latency, False, now=1000.5)
        master.merge_wire(report.drain_to_wire(), worker=worker)
    assert master.windows[(1000, "t")].requests == 2
    assert master.worker_windows[(1000, "t", "w1")].latency_ms()["max"] == 2.0
    assert master.worker_windows[(1000, "t", "w2")].latency_ms()["max"] == 4.0
