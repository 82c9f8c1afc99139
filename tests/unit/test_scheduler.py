"""The open-loop arrival scheduler behind the clock: it keeps counting and never starves the senders."""

from __future__ import annotations

import time
from collections.abc import Iterator

import gevent
import gevent.monkey

from inferload.measure.run_record import RunRecord
from inferload.run.traffic import YIELD_EVERY, ArrivalScheduler
from inferload.traffic.arrivals import Arrival, RateLaw, RateTimeline
from inferload.users.base import ArrivalQueue


def arrivals_counted(record: RunRecord) -> int:
    return sum(intended for intended, _ in record.arrival_windows.values())


def test_a_scheduler_behind_the_clock_lets_other_greenlets_run() -> None:
    timeline = RateTimeline(duration=2.0, steps=((0.0, 10_000.0),), poisson=False)  # about 20,000 arrivals
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    queue = ArrivalQueue(max_queue=10)
    scheduler = ArrivalScheduler(RateLaw(timeline, [("t", 1.0)]), {"t": queue}, record)
    scheduler.set_process_share(1, 0, seed=0)
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


class RecordingFeed:
    """A stand-in for the native engine's feed (`inferload.users.engine.EngineFeed`): what it was handed."""

    def __init__(self) -> None:
        self.batches: list[list[float]] = []
        self.samples: list[list[int | None] | None] = []
        self.ended = False
        self.started_at: list[float] = []

    def feed(self, intended: list[float], samples: list[int | None] | None = None) -> None:
        self.batches.append(list(intended))
        self.samples.append(samples)

    def end(self) -> None:
        self.ended = True

    def starts(self, started_at: float) -> None:
        self.started_at.append(started_at)


def test_a_native_target_is_fed_its_share_ahead_in_batches_and_the_split_keeps_the_schedule() -> None:
    timeline = RateTimeline(duration=1.5, steps=((0.0, 200.0),), poisson=True)
    law = RateLaw(timeline, [("t", 1.0)])
    started_at = time.time()
    expected = [started_at + a.t_s for a in law.arrivals(5)]
    feeds = [RecordingFeed(), RecordingFeed()]
    schedulers = []
    for index, feed in enumerate(feeds):  # two workers of one run, each fed its own arrivals
        record = RunRecord(window_s=1.0, warmup_s=0.0)
        scheduler = ArrivalScheduler(law, {"t": ArrivalQueue(max_queue=10)}, record, {"t": feed})
        scheduler.set_process_share(2, index, seed=5, started_at=started_at)
        scheduler.start(started_at + 0.4)  # the worker's own test start, later than the master's
        schedulers.append(scheduler)
    deadline = time.monotonic() + 30.0
    while sum(len(b) for f in feeds for b in f.batches) < len(expected) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for scheduler in schedulers:
        scheduler.stop()
    handed = [[t for batch in feed.batches for t in batch] for feed in feeds]
    assert all(handed_part == sorted(handed_part) for handed_part in handed)
    assert sorted(handed[0] + handed[1]) == expected  # the whole schedule, every arrival once
    assert handed[0] == expected[0::2] and handed[1] == expected[1::2]
    assert all(len(feed.batches) < len(expected) / 4 for feed in feeds)  # batches, not one call per arrival
    assert all(feed.ended for feed in feeds)
    # the engine's warm-up counts from the master's start, as the worker's record does (CI: 0.4 s late
    # on both workers of a distributed replay, 24 steady arrivals of 283 counted as warm-up)
    assert all(feed.started_at == [started_at] for feed in feeds)
    assert all(not s.record.arrival_windows for s in schedulers)  # the engine counts a fed target's arrivals


def test_arrivals_due_while_the_scheduler_was_starved_are_counted_unsent_at_the_stop() -> None:
    """A process that cannot run its scheduler (a busy machine) does not lose arrivals silently:
    those due before the stop that it never reached are arrivals, unsent."""
    timeline = RateTimeline(duration=10.0, steps=((0.0, 100.0),), poisson=False)
    law = RateLaw(timeline, [("t", 1.0)])
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    scheduler = ArrivalScheduler(law, {"t": ArrivalQueue(max_queue=10_000)}, record)
    scheduler.set_process_share(1, 0, seed=0)
    started_at = time.time()
    scheduler.start(started_at)
    gevent.sleep(0.2)  # the scheduler offers arrivals on time
    offered = arrivals_counted(record)
    time.sleep(0.5)  # the hub is blocked: the scheduler cannot run
    stopped_at = time.time()
    scheduler.stop()
    due = sum(1 for arrival in law.arrivals(0) if started_at + arrival.t_s <= stopped_at)
    assert 10 <= offered < due - 30  # most of the blocked half second was never reached ...
    assert abs(arrivals_counted(record) - due) <= 1  # ... and is counted all the same
    unsent = sum(counts[1] for counts in record.arrival_windows.values())
    assert unsent == arrivals_counted(record)  # no sender took any: all unsent, none lost


def test_a_fed_targets_due_arrivals_the_engine_never_got_are_counted_unsent_at_the_stop() -> None:
    """A native target's share as the Python path counts it: what was handed to the engine the
    engine counts; the arrivals due before the stop that the starved scheduler never handed over
    are counted here, unsent, each once; none due is lost, none counted twice."""
    timeline = RateTimeline(duration=10.0, steps=((0.0, 100.0),), poisson=False)
    law = RateLaw(timeline, [("t", 1.0)])
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    feed = RecordingFeed()
    scheduler = ArrivalScheduler(law, {"t": ArrivalQueue(max_queue=10)}, record, {"t": feed})
    scheduler.set_process_share(1, 0, seed=0)
    started_at = time.time()
    scheduler.start(started_at)
    gevent.sleep(0.2)  # the scheduler feeds on time (half a second ahead)
    gevent.monkey.get_original("time", "sleep")(1.0)  # the hub is blocked past the feed's horizon
    stopped_at = time.time()
    scheduler.stop()
    handed = {t for batch in feed.batches for t in batch}
    due = [started_at + a.t_s for a in law.arrivals(0) if started_at + a.t_s <= stopped_at]
    never_handed = [t for t in due if t not in handed]
    assert len(never_handed) >= 30  # the blocked second outran what was fed ahead
    assert arrivals_counted(record) == len(never_handed)
    assert sum(counts[1] for counts in record.arrival_windows.values()) == len(never_handed)
    assert feed.ended


class SampledLaw:
    """A replay's law in miniature: arrivals every 10 ms, each naming its data-set sample (every third
    names none: the target's own rotation)."""

    def arrivals(self, seed: int) -> Iterator[Arrival]:
        for i in range(60):
            yield Arrival(t_s=0.01 * i, target="t", sample=None if i % 3 == 2 else i % 5)


def test_a_fed_target_is_handed_each_arrival_s_sample_with_its_time() -> None:
    feed = RecordingFeed()
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    scheduler = ArrivalScheduler(SampledLaw(), {"t": ArrivalQueue(max_queue=10)}, record, {"t": feed})
    scheduler.set_process_share(1, 0, seed=0)
    scheduler.start(time.time())
    deadline = time.monotonic() + 30.0
    while sum(len(b) for b in feed.batches) < 60 and time.monotonic() < deadline:
        gevent.sleep(0.05)
    scheduler.stop()
    handed = [s for batch, samples in zip(feed.batches, feed.samples, strict=True) for s in (samples or [None] * len(batch))]
    assert handed == [None if i % 3 == 2 else i % 5 for i in range(60)]
