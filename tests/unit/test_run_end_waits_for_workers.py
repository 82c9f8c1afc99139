"""A master that ends its run tells its workers to quit and waits for each (`run.workers.quit_workers`):
a worker sends its last report before it quits, and Locust's own quit waits only 0.5 s for it. The
master's runner is a stand-in with what `quit_workers` uses of Locust's (`clients`, `send_message`);
tests/integration/test_replay.py holds a real distributed run's end to both workers' reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.runners import STATE_MISSING, STATE_RUNNING

from inferload.run.workers import quit_workers


@dataclass
class Worker:
    id: str
    state: str = STATE_RUNNING


class Clients(dict[str, Worker]):
    @property
    def all(self) -> list[Worker]:
        return list(self.values())


@dataclass
class Master:
    """Each worker told to quit leaves `stops_after_s` later (its last report sent), or never when None."""

    workers: list[Worker]
    stops_after_s: dict[str, float | None]
    told: list[str] = field(default_factory=list)
    clients: Clients = field(default_factory=Clients)

    def __post_init__(self) -> None:
        self.clients.update({worker.id: worker for worker in self.workers})

    def send_message(self, kind: str, data: Any = None, client_id: str | None = None) -> None:
        assert kind == "quit" and client_id is not None
        self.told.append(client_id)
        delay = self.stops_after_s[client_id]
        if delay is not None:
            gevent.get_hub().loop.update_now()  # the loop's clock, stale in a test whose hub sat idle
            gevent.spawn_later(delay, self.clients.pop, client_id)


def test_the_master_waits_for_a_worker_slower_than_locusts_half_second() -> None:
    master = Master([Worker("a"), Worker("b")], {"a": 0.1, "b": 0.8})
    began = time.monotonic()
    assert quit_workers(master, wait_s=5.0) == []  # type: ignore[arg-type]
    assert master.told == ["a", "b"] and not master.clients
    assert 0.8 <= time.monotonic() - began < 5.0  # waited for the slower one, not for the whole wait


def test_a_missing_worker_is_not_told_and_one_that_never_quits_is_named_after_the_wait() -> None:
    master = Master([Worker("gone", STATE_MISSING), Worker("stuck"), Worker("quick")], {"stuck": None, "quick": 0.0})
    began = time.monotonic()
    assert quit_workers(master, wait_s=0.3) == ["stuck"]  # type: ignore[arg-type]
    assert master.told == ["stuck", "quick"] and "quick" not in master.clients
    assert time.monotonic() - began >= 0.3  # the whole wait, for the one that never quits
