"""summary.json's `server_side`: each target's server read when the warm-up ends and when the run
stops, and the difference (`inferload.servermetrics.snapshots`).

On the master or a local run only. A server that cannot be read (or restarted in between) gets
`server_side: null` and a warning; the run goes on.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent

from inferload.errors import InferloadError
from inferload.scenario.model import Scenario
from inferload.servermetrics import snapshots as server_stats

logger = logging.getLogger(__name__)


class ServerSideReadings:
    """Reads every target's server at the warm-up's end and at the stop; `figures` then holds
    target name -> `server_side` (None where it could not be read)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.before: dict[str, server_stats.ServerSnapshot] = {}
        self.errors: dict[str, str] = {}
        self.figures: dict[str, dict[str, Any] | None] = {}

    def on_test_start(self, **_: Any) -> None:
        self.before.clear()
        self.errors.clear()
        gevent.spawn_later(self.scenario.warmup, self.read_all, self.before)

    def on_test_stop(self, **_: Any) -> None:
        after: dict[str, server_stats.ServerSnapshot] = {}
        self.read_all(after)
        for target in self.scenario.targets:
            before = self.before.get(target.name)
            if before is None or target.name not in after:
                self.figures[target.name] = None
                continue
            try:
                self.figures[target.name] = server_stats.server_side(before, after[target.name])
            except InferloadError as exc:
                self.figures[target.name] = None
                self.errors[target.name] = str(exc)
                logger.warning("target %r: server-side figures unavailable: %s", target.name, exc)

    def read_all(self, into: dict[str, server_stats.ServerSnapshot]) -> None:
        for target in self.scenario.targets:
            try:
                into[target.name] = server_stats.snapshot(
                    target.kind, target.address, target.model, target.version, target.metrics_url
                )
            except InferloadError as exc:
                self.errors[target.name] = str(exc)
                logger.warning("target %r: server-side figures unavailable: %s", target.name, exc)
