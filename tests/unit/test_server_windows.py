"""The per-window server poller (windows.csv's residual): one reader per target for the whole run,
closed at stop, and the window's figure is figures.server_figures' request_ms."""

from __future__ import annotations

import time

import gevent
import pytest

from inferload.measure.run_record import RunRecord
from inferload.run import server_side
from inferload.servermetrics.snapshot import ServerSnapshot
from tests.support.scenario_factory import scenario


class CountingReader:
    """A stand-in for ServerReader: every read books 10 more requests of 2 ms each."""

    def __init__(self) -> None:
        self.reads = 0
        self.closed = False

    def read(self) -> ServerSnapshot:
        self.reads += 1
        requests = 10.0 * self.reads
        return ServerSnapshot("triton", "tiny", float(self.reads), {"requests": requests, "request_us": requests * 2000})

    def close(self) -> None:
        self.closed = True


def test_the_poller_keeps_one_reader_per_target_and_closes_it_at_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[CountingReader] = []

    def make_reader(kind: str, address: str, model: str, version: str | None, metrics_url: str | None) -> CountingReader:
        made.append(CountingReader())
        return made[-1]

    monkeypatch.setattr(server_side, "ServerReader", make_reader)
    record = RunRecord(window_s=0.05, warmup_s=0.0)
    poller = server_side.ServerWindowPoller(scenario({"kind": "steady", "users": 1}), record)
    poller.start()
    deadline = time.monotonic() + 5.0
    while len(record.server_request_ms) < 3 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    poller.stop()
    [reader] = made
    assert reader.reads >= 4 and reader.closed
    assert len(record.server_request_ms) >= 3
    assert set(record.server_request_ms.values()) == {2.0}
