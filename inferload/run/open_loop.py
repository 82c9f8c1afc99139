"""Open-loop wiring: an arrival queue per target's user class, and the scheduler that fills them.

Every process that runs users (a local run, or each worker) draws the whole run's arrivals from
the scenario's law with the run's seed and sends its part (`inferload.run.traffic`). On a
distributed run the master picks the seed (the shape's, or a random one), runs no users, and
tells each worker its split (index, number of workers), the seed and the run's start at test
start, and the live workers their new split whenever a worker goes missing (or comes back), so
that together they keep the whole schedule (`inferload.run.workers.WorkerWatch.on_workers_changed`).
With `--ramp-hold` the rate of a constant-rate or Poisson shape is an `AdjustableTimeline` that the
ramp changes while the run goes (a worker's from the master's `RATE_MESSAGE`): the rate law reads it
as it draws.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.measure.run_record import RunRecord
from inferload.run.traffic import SHARE_MESSAGE, ArrivalFeed, ArrivalScheduler
from inferload.run.workers import WorkerWatch
from inferload.scenario.schema import Scenario
from inferload.traffic.arrivals import AdjustableTimeline, Timeline, law_for
from inferload.traffic.ramp_hold import RATE_MESSAGE
from inferload.users import InferenceUser
from inferload.users.base import ArrivalQueue, wiring_of
from inferload.users.engine import arrival_feed

#: a run seed drawn when the shape has none (the same on every process of the run)
SEED_BOUND = 2**32


def send_shares(runner: MasterRunner, seed: int, started_at: float | None) -> None:
    """Tell each live worker its index, the number of workers, the run's seed and start."""
    clients = [c for c in runner.clients.values() if c.state != "missing"]
    for index, client in enumerate(clients):
        message = {"workers": len(clients), "index": index, "seed": seed, "started_at": started_at}
        runner.send_message(SHARE_MESSAGE, message, client_id=client.id)


def setup_open_loop(
    environment: Environment,
    scenario: Scenario,
    user_classes: Iterable[type[InferenceUser]],
    record: RunRecord,
    workers: WorkerWatch | None = None,
    timeline: Timeline | None = None,
) -> None:
    """Give every user class its arrival queue and start the scheduler with the test; on a
    distributed run's master, send the splits at test start and again when `workers` change.
    `timeline`: the rate over the run (default: the shape's); a worker of a constant-rate or Poisson
    run takes an `AdjustableTimeline`, which a master's `--ramp-hold` changes."""
    shape: Any = scenario.shape  # an open-loop shape (is_open_loop)
    runner = environment.runner
    queues: dict[str, ArrivalQueue] = {}
    feeds: dict[str, ArrivalFeed] = {}
    for cls in user_classes:
        queue = ArrivalQueue(max_queue=shape.max_queue)
        wiring = wiring_of(environment, cls)
        wiring.arrivals = queue
        queues[cls.target.name] = queue
        feed = arrival_feed(environment, cls)  # (a master has no engine: its workers send)
        if feed is not None:  # the engine paces these: the scheduler feeds it ahead
            feeds[cls.target.name] = feed
    seed = shape.seed if shape.seed is not None else random.SystemRandom().randrange(SEED_BOUND)
    if isinstance(runner, MasterRunner):
        environment.events.test_start.add_listener(lambda **_: send_shares(runner, seed, record.started_at))
        if workers is not None:
            workers.on_workers_changed.append(lambda: send_shares(runner, seed, record.started_at))
        return  # the master runs no users
    if timeline is None and isinstance(runner, WorkerRunner) and shape.kind in ("constant-rate", "poisson"):
        # a worker learns its options (--ramp-hold on the master) only after its init: adjustable from the start
        timeline = AdjustableTimeline(scenario.duration, float(shape.rate), shape.kind == "poisson")
    # a replay's reader lets the hub run every few thousand rows (skipping to a window, counting it for rate)
    law = law_for(scenario, pause=lambda: gevent.sleep(0), timeline=timeline)
    scheduler = ArrivalScheduler(law, queues, record, feeds)
    if isinstance(runner, WorkerRunner):
        scheduler.from_master = True
        adjustable = timeline if isinstance(timeline, AdjustableTimeline) else None

        def on_rate(environment: Environment, msg: Any, **_: Any) -> None:
            """A master's `--ramp-hold` changed the rate from a wall-clock instant on."""
            if adjustable is None:
                return  # the master refuses --ramp-hold on other shapes before any load
            started = scheduler.run_started_at or record.started_at or time.time()
            adjustable.change(float(msg.data["at"]) - started, float(msg.data["rate"]))

        runner.register_message(RATE_MESSAGE, on_rate)

        def on_share(environment: Environment, msg: Any, **_: Any) -> None:
            data = msg.data
            scheduler.set_process_share(data["workers"], data["index"], data["seed"], data.get("started_at"))

        runner.register_message(SHARE_MESSAGE, on_share)
    else:
        scheduler.set_process_share(1, 0, seed)
    environment.events.test_start.add_listener(lambda **_: scheduler.start(record.started_at or time.time()))
    # stop drawing arrivals before Locust stops the users (test_stopping), not after (test_stop):
    # arrivals drawn while the senders are being stopped could only be counted unsent
    environment.events.test_stopping.add_listener(lambda **_: scheduler.stop())
    environment.events.test_stop.add_listener(lambda **_: scheduler.stop())
