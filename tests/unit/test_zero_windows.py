"""A stall shows as windows with zero requests, in windows.csv and in the InfluxDB stream, not as a gap."""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from inferload.measure.run_record import RunRecord
from inferload.observe.influx_export import InfluxExport
from inferload.observe.sink import SinkSettings
from inferload.results.summary import window_rows
from tests.support.scenario_factory import scenario, tiny_target

START = 2_000_000.0


def stalled_record() -> RunRecord:
    """Busy in windows 0 and 4, nothing finished in 1..3, stopped 0.5 s into window 6."""
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START + 0.3, stopped_at=START + 6.5, targets=("a", "b"))
    for now in (START + 0.4, START + 0.9, START + 4.1):
        record.record("a", 4.0, False, now)
    return record


def test_window_rows_include_the_zero_request_windows_between_busy_ones():
    rows = [r for r in window_rows(stalled_record()) if r["target"] == "a"]
    assert [r["requests"] for r in rows] == [2, 0, 0, 0, 1, 0, 0]  # start's window to stop's window
    stalled = rows[2]
    assert stalled["rps"] == 0 and stalled["failures"] == 0
    assert stalled["p99_ms"] is None and stalled["max_ms"] is None and stalled["mean_ms"] is None


def test_a_target_that_never_answered_still_has_a_row_per_window():
    rows = [r for r in window_rows(stalled_record()) if r["target"] == "b"]
    assert len(rows) == 7 and all(r["requests"] == 0 for r in rows)


def test_a_stop_on_a_window_boundary_adds_no_window_after_it():
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START, stopped_at=START + 3.0)
    record.record("a", 4.0, False, START + 0.5)
    assert [r["elapsed_s"] for r in window_rows(record)] == [0.0, 1.0, 2.0]


class NullWriter:
    def write(self, body: bytes, timeout_s: float | None = None) -> None:
        raise AssertionError("nothing is written through the real sink in this test")

    def close(self) -> None:
        pass


class CapturingSink:
    def __init__(self) -> None:
        self.points: list[Any] = []

    def submit(self, points: list[Any]) -> None:
        self.points.extend(points)


def test_streaming_writes_zero_request_windows_once_and_rewrites_them_when_late_figures_arrive():
    record = stalled_record()
    record.stopped_at = None  # still running
    scn = scenario({"kind": "steady", "users": 1}, targets=[tiny_target("a", "triton-grpc", "127.0.0.1:1")])
    settings = SinkSettings(url="http://127.0.0.1:1")
    listener = InfluxExport(Environment(), record, scn, settings, run_id=lambda: "r1", writer=NullWriter())
    assert listener.sink is not None
    listener.sink.close(1.0)  # its writer thread: not needed, the points are caught below
    sink = CapturingSink()
    listener.sink = sink

    listener.emit(now=START + 5.5)  # windows 0..4 have closed
    requests = [p for p in sink.points if p.measurement == "requests"]  # windows also stream histograms
    written = {(p.time_ns // 1_000_000_000, p.tags["target"]): p.fields for p in requests}
    assert sorted(i - int(START) for i, t in written if t == "a") == [0, 1, 2, 3, 4]
    stalled = written[(int(START) + 2, "a")]
    assert stalled["count"] == 0 and stalled["p99_ms"] is None
    assert written[(int(START) + 4, "a")]["count"] == 1

    sink.points.clear()
    record.record("a", 9.0, False, START + 2.5)  # late figures for window 2
    listener.emit(now=START + 5.6)
    requests = [p for p in sink.points if p.measurement == "requests"]
    assert [(p.time_ns // 1_000_000_000 - int(START), p.fields["count"]) for p in requests] == [(2, 1)]
