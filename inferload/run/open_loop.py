"""Open-loop wiring: an arrival queue per target's user class, and the scheduler that fills them.

Every process that runs users (a local run, or each worker) schedules its share of the arrivals;
on a distributed run the master tells each worker its share at test start and runs no users, and
tells the live workers their new shares whenever a worker goes missing (or comes back), so that
together they keep the whole rate (`inferload.run.workers.WorkerWatch.on_workers_changed`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.measure.run_record import RunRecord
from inferload.run.workers import WorkerWatch
from inferload.scenario.model import Scenario
from inferload.traffic.arrivals import rate_timeline
from inferload.traffic.scheduler import SHARE_MESSAGE, ArrivalQueue, ArrivalScheduler, TargetArrivals
from inferload.users import InferenceUser


def send_shares(runner: MasterRunner) -> None:
    """Tell each live worker its index and the number of workers."""
    clients = [c for c in runner.clients.values() if c.state != "missing"]
    for index, client in enumerate(clients):
        runner.send_message(SHARE_MESSAGE, {"workers": len(clients), "index": index}, client_id=client.id)


def setup_open_loop(
    environment: Environment,
    scenario: Scenario,
    user_classes: Iterable[type[InferenceUser]],
    record: RunRecord,
    workers: WorkerWatch | None = None,
) -> None:
    """Give every user class its arrival queue and start the scheduler with the test; on a
    distributed run's master, send the shares at test start and again when `workers` change."""
    shape: Any = scenario.shape  # an open-loop shape (is_open_loop)
    runner = environment.runner
    classes = list(user_classes)
    total_weight = sum(t.weight for t in scenario.targets)
    targets = []
    for cls in classes:
        queue = ArrivalQueue(max_queue=shape.max_queue)
        cls.arrivals = queue
        targets.append(TargetArrivals(cls.target.name, cls.target.weight / total_weight, queue, shape.seed))
    scheduler = ArrivalScheduler(rate_timeline(shape, scenario.duration), targets, record)
    if isinstance(runner, MasterRunner):
        environment.events.test_start.add_listener(lambda **_: send_shares(runner))
        if workers is not None:
            workers.on_workers_changed.append(lambda: send_shares(runner))
        return  # the master runs no users
    if isinstance(runner, WorkerRunner):

        def on_share(environment: Environment, msg: Any, **_: Any) -> None:
            scheduler.set_process_share(msg.data["workers"], msg.data["index"])

        runner.register_message(SHARE_MESSAGE, on_share)
    else:
        scheduler.set_process_share(1, 0)
    environment.events.test_start.add_listener(lambda **_: scheduler.start(record.started_at or time.time()))
    # stop drawing arrivals before Locust stops the users (test_stopping), not after (test_stop):
    # arrivals drawn while the senders are being stopped could only be counted unsent
    environment.events.test_stopping.add_listener(lambda **_: scheduler.stop())
    environment.events.test_stop.add_listener(lambda **_: scheduler.stop())
