"""The open-loop arrival scheduler behind the clock: it keeps counting and never starves the senders."""

from __future__ import annotations

import time

import gevent

from inferload.measure.run_record import RunRecord
from inferload.traffic.arrivals import RateTimeline
from inferload.traffic.scheduler import YIELD_EVERY, ArrivalQueue, ArrivalScheduler, TargetArrivals


def arrivals_counted(record: RunRecord) -> int:
    return sum(intended for intended, _ in record.arrival_windows.values())


def test_a_scheduler_behind_the_clock_lets_other_greenlets_run() -> None:
    timeline = RateTimeline(duration=2.0, steps=((0.0, 10_000.0),), poisson=False)  # about 20,000 arrivals
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    queue = ArrivalQueue(max_queue=10)
    scheduler = ArrivalScheduler(timeline, [TargetArrivals("t", 1.0, queue, seed=None)], record)
    scheduler.set_process_share(1, 0)
    seen: list[int] = []

    scheduler.start(started_at=time.time() - 60.0)  # the whole run is already due: always behind
    gevent.spawn(lambda: seen.append(arrivals_counted(record)))  # runs when the scheduler first yields
    deadline = time.monotonic() + 30.0
    while arrivals_counted(record) < 19_999 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    scheduler.stop()

    assert len(seen) == 1 and 0 < seen[0] <= YIELD_EVERY < 1_000, seen  # not after all ~20,000 arrivals
    total = arrivals_counted(record)
    assert total >= 19_999
    unsent = sum(unsent for _, unsent in record.arrival_windows.values())
    assert unsent == total  # no sender took any: every arrival is counted unsent, none lost
