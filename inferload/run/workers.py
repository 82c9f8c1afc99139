"""On a distributed run's master: every worker that took part, and every one that went missing."""

from __future__ import annotations

import logging

import gevent
from locust.runners import MasterRunner

logger = logging.getLogger(__name__)

POLL_S = 0.5


class WorkerWatch:
    """Watches the master's clients from test start until the runner stops."""

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        self.seen: set[str] = set()
        self.lost: set[str] = set()

    def start(self) -> gevent.Greenlet:
        return gevent.spawn(self._watch)

    def _watch(self) -> None:
        while self.runner.state not in ("stopped", "quitting"):
            self.poll()
            gevent.sleep(POLL_S)

    def poll(self) -> None:
        for client in list(self.runner.clients.values()):
            self.seen.add(client.id)
            if client.state == "missing" and client.id not in self.lost:
                self.lost.add(client.id)
                logger.warning(
                    "worker %s went missing: its share of the load and its last unreported requests are lost", client.id
                )

    def count(self) -> int:
        """Workers that took part, the connected ones included."""
        self.seen.update(self.runner.clients.keys())
        return len(self.seen)
