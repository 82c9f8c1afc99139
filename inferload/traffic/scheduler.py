"""Open-loop traffic inside Locust: arrivals on the clock, sent by a bounded pool of users.

On every Locust process that runs users, one scheduler greenlet per target draws intended send
times (`inferload.traffic.arrivals`) for its share of the run's rate and offers each arrival to that
target's `ArrivalQueue`. The target's users are the senders: each takes the next arrival, sends
it, and reports latency from the *intended* send time, so a slow server cannot hide its queue
(coordinated omission). An arrival that finds every sender busy waits; one that finds the
waiting queue full (`max_queue`) is counted as unsent, as are arrivals still waiting when the
run stops. Nothing is lost silently.

The rate is split across targets by weight and across worker processes evenly: the master
tells every worker how many workers share the run (`SHARE_MESSAGE`), at test start and again
when the live workers change (a worker went missing); a new share applies from the next arrival.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

import gevent
from gevent.queue import Queue

from inferload.measure.run_record import RunRecord
from inferload.traffic.arrivals import INFINITY, RateTimeline, next_arrival

logger = logging.getLogger(__name__)

SHARE_MESSAGE = "inferload_open_loop_share"
#: arrivals a scheduler offers in a row while behind before it lets the senders (and Locust) run
YIELD_EVERY = 100


@dataclass
class ArrivalQueue:
    """Arrivals (intended wall-clock send times) waiting for a free sender."""

    max_queue: int
    queue: Queue = field(default_factory=Queue)
    idle_senders: int = 0

    def offer(self, intended: float) -> bool:
        """Queue an arrival; False (unsent) when every sender is busy and the queue is full."""
        if self.queue.qsize() >= self.max_queue + self.idle_senders:
            return False
        self.queue.put(intended)
        return True

    def take(self) -> float:
        """Block until an arrival is due for this sender; return its intended send time."""
        self.idle_senders += 1
        try:
            return self.queue.get()
        finally:
            self.idle_senders -= 1

    def drain(self) -> list[float]:
        left = []
        while not self.queue.empty():
            left.append(self.queue.get_nowait())
        return left


@dataclass
class TargetArrivals:
    """One target's part of the open-loop run on this process."""

    name: str
    weight_share: float  # this target's part of the whole run's rate
    queue: ArrivalQueue
    seed: int | None


class ArrivalScheduler:
    """Draws and offers arrivals for every target on this process, from test start to stop."""

    def __init__(self, timeline: RateTimeline, targets: list[TargetArrivals], record: RunRecord) -> None:
        self.timeline = timeline
        self.targets = targets
        self.record = record
        self.process_share: float | None = None  # 1 / number of worker processes; None: not known yet
        self.process_index = 0
        self._greenlets: list[gevent.Greenlet] = []

    def set_process_share(self, workers: int, index: int) -> None:
        """This process is one of `workers` sharing the rate; may change mid-run (from the next arrival on)."""
        self.process_share = 1.0 / max(1, workers)
        self.process_index = index

    def start(self, started_at: float) -> None:
        self.stop()
        self._greenlets = [gevent.spawn(self._run_target, target, started_at) for target in self.targets]

    def stop(self) -> None:
        """Stop drawing; arrivals still waiting for a sender are counted as unsent."""
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._greenlets = []
        for target in self.targets:
            for intended in target.queue.drain():
                self.record.record_unsent(target.name, intended)

    def _run_target(self, target: TargetArrivals, started_at: float) -> None:
        while self.process_share is None:  # a worker waits for the master's word on its share
            gevent.sleep(0.01)
        seed = None if target.seed is None else target.seed * 1_000_003 + self.process_index
        rng = random.Random(seed)
        t = 0.0
        behind = 0  # arrivals offered in a row without sleeping
        while True:
            share = target.weight_share * (self.process_share or 0.0)  # read each time: the master may re-send it
            t = next_arrival(self.timeline, t, share, rng)
            if t == INFINITY:
                return
            intended = started_at + t
            delay = intended - time.time()
            if delay > 0:
                gevent.sleep(delay)
                behind = 0
            else:
                behind += 1
                if behind >= YIELD_EVERY:  # behind the clock: never starve the senders and Locust
                    gevent.sleep(0)
                    behind = 0
            self.record.record_arrival(target.name, intended)
            if not target.queue.offer(intended):
                self.record.record_unsent(target.name, intended)
