"""The master's store of a worker's trace records is capped like a local one."""

from __future__ import annotations

import pytest

from inferload.measure import trace_join
from inferload.measure.trace_join import ClientTraceRecords, drain, merge_message


def test_master_store_keeps_at_most_max_records_and_counts_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_join, "MAX_RECORDS", 5)
    worker = ClientTraceRecords(steady_from_ns=0)
    master = ClientTraceRecords()
    for _report in range(3):  # the worker drains at every report, so its own cap never binds
        for _ in range(3):
            number, _id = worker.next_id()
            worker.add(number, 10 * number, 10 * number + 1)
        message = drain(worker)
        assert message is not None
        merge_message(master, message)
    assert master.numbers == [1, 2, 3, 4, 5]
    assert master.sent == [10, 20, 30, 40, 50] and master.received == [11, 21, 31, 41, 51]
    assert master.dropped == 4
    assert len(master.timings()) == 5


def test_merge_adds_the_workers_own_dropped_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_join, "MAX_RECORDS", 2)
    master = ClientTraceRecords()
    merge_message(master, {"prefix": "ab", "numbers": [1, 2, 3], "sent": [1, 2, 3], "received": [2, 3, 4], "dropped": 7})
    assert master.numbers == [1, 2] and master.dropped == 8 and master.prefix == "ab"
