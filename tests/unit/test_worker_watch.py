"""The master's worker watch: a worker that goes missing is recorded, its users are asked back onto
the live workers once the runner is running, open-loop shares are re-sent, and the gap is reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import gevent
from locust.runners import MasterRunner

from inferload.run.workers import WorkerWatch


@dataclass
class Client:
    id: str
    state: str = "running"
    users: int = 0


@dataclass
class FakeMaster:
    """What the watch reads of Locust's MasterRunner; `start` puts the target on the live clients."""

    clients: dict[str, Client]
    target_user_count: int
    state: str = "running"
    spawning_completed: bool = True
    spawn_rate: float = 10.0
    starts: list[tuple[int, float]] = field(default_factory=list)

    @property
    def user_count(self) -> int:
        return sum(c.users for c in self.clients.values())

    def start(self, user_count: int, spawn_rate: float) -> None:
        self.starts.append((user_count, spawn_rate))
        live = [c for c in self.clients.values() if c.state != "missing"]
        for index, client in enumerate(live):
            client.users = user_count // len(live) + (1 if index < user_count % len(live) else 0)


def watch_over(master: FakeMaster) -> WorkerWatch:
    return WorkerWatch(cast(MasterRunner, master))


def lose(master: FakeMaster, worker: str) -> None:
    """What Locust's heartbeat check does to a worker it declares missing."""
    master.clients[worker].state = "missing"
    master.clients[worker].users = 0


def test_a_missing_worker_is_recorded_and_its_users_go_to_the_live_worker() -> None:
    master = FakeMaster({"a": Client("a", users=2), "b": Client("b", users=2)}, target_user_count=4)
    watch = watch_over(master)
    changes: list[int] = []
    watch.on_workers_changed.append(lambda: changes.append(1))
    watch.poll()
    assert watch.losses == [] and changes == []

    lose(master, "b")
    watch.poll()  # the loss is seen and the re-spread asked for
    gevent.sleep(0)  # the re-dispatch greenlet runs
    assert master.starts == [(4, 10.0)]
    assert master.clients["a"].users == 4
    assert changes == [1]  # open-loop shares are re-sent
    assert watch.lost == {"b"} and watch.losses[0].respread_at is None

    watch.poll()  # the live worker now reports the whole count
    loss = watch.loss_records()[0]
    assert loss["worker"] == "b" and loss["lost_at"].endswith("+00:00")
    assert loss["respread_after_s"] is not None and 0 <= loss["respread_after_s"] < 5
    assert watch.count() == 2


def test_no_re_spread_while_the_runner_is_spawning_and_none_without_live_workers() -> None:
    master = FakeMaster({"a": Client("a", users=1), "b": Client("b", users=1)}, target_user_count=2, state="spawning")
    watch = watch_over(master)
    watch.poll()
    lose(master, "b")
    watch.poll()
    gevent.sleep(0)
    assert master.starts == []  # the dispatch under way spreads over the live workers itself

    lose(master, "a")
    master.state = "running"
    watch.poll()
    gevent.sleep(0)
    assert master.starts == []
    assert [loss["respread_after_s"] for loss in watch.loss_records()] == [None, None]


def test_a_loss_already_re_spread_by_locust_is_not_asked_again() -> None:
    master = FakeMaster({"a": Client("a", users=3), "b": Client("b", users=3)}, target_user_count=6)
    watch = watch_over(master)
    watch.poll()
    lose(master, "b")
    master.clients["a"].users = 6  # Locust's --enable-rebalancing moved them already
    watch.poll()
    gevent.sleep(0)
    assert master.starts == []
    assert watch.loss_records()[0]["respread_after_s"] == 0.0
