"""summary.json's `server_side`: each target's server read when the warm-up ends and when the run
stops, and the difference (`inferload.servermetrics.readers`).

Targets that read the same counters (one model on one server: `servermetrics.sharing`) are read
once, together, and each gets the same figures marked `scope: "model"` and `shared_with` (the
other targets): the server cannot split them per target.

On the master or a local run only. A server that cannot be read (or restarted in between) gets
`server_side: null`, the reason in `errors` and a warning; the run goes on. A TorchServe target
with no metrics page to read is said so at the start (a warning naming the target and the fix).
"""

from __future__ import annotations

import logging
from typing import Any

import gevent

from inferload.errors import InferloadError
from inferload.scenario.model import RunOutline, Scenario
from inferload.scenario.targets import Target
from inferload.scenario.tls import tls_of
from inferload.servermetrics import readers as server_stats
from inferload.servermetrics.kserve import kserve_metrics_url
from inferload.servermetrics.kserve import no_metrics_url_reason as kserve_no_metrics_url
from inferload.servermetrics.sharing import reading_groups, reading_version
from inferload.servermetrics.torchserve import no_metrics_url_reason, torchserve_metrics_url

logger = logging.getLogger(__name__)


def shared_marks(group: tuple[Target, ...], target: Target) -> dict[str, Any]:
    """The keys that mark a shared reading in `server_side` (none for a target read alone)."""
    others = [other.name for other in group if other.name != target.name]
    return {"scope": "model", "shared_with": others} if others else {}


def unreadable_reason(target: Target) -> str | None:
    """Why a target's server cannot be read at all, known before the run (else None)."""
    if target.server == "torchserve" and torchserve_metrics_url(target.address, target.metrics_url) is None:
        return no_metrics_url_reason(target.address)
    if target.server == "kserve" and kserve_metrics_url(target.kind, target.address, target.metrics_url) is None:
        return kserve_no_metrics_url(target.address)
    return None


class ServerSideReadings:
    """Reads every target's server at the warm-up's end and at the stop; `figures` then holds
    target name -> `server_side` (None where it could not be read, the reason in `errors`)."""

    def __init__(self, scenario: Scenario | RunOutline) -> None:
        self.scenario = scenario
        self.groups = reading_groups(scenario.targets)
        self.before: dict[str, server_stats.ServerSnapshot] = {}  # by the name of each group's first target
        self.errors: dict[str, str] = {}
        self.figures: dict[str, dict[str, Any] | None] = {}

    def on_test_start(self, **_: Any) -> None:
        self.before.clear()
        self.errors.clear()
        self.warn_unreadable()
        gevent.spawn_later(self.scenario.warmup, self.read_all, self.before)

    def warn_unreadable(self) -> None:
        """Say at the start which targets will have no server-side figures, and why."""
        for target in self.scenario.targets:
            reason = unreadable_reason(target)
            if reason is not None:
                logger.warning("target %r: no server-side figures: %s", target.name, reason)

    def on_test_stop(self, **_: Any) -> None:
        after: dict[str, server_stats.ServerSnapshot] = {}
        self.read_all(after)
        for group in self.groups:
            read = group[0].name
            figures: dict[str, Any] | None = None
            if read in self.before and read in after:
                try:
                    figures = server_stats.server_side(self.before[read], after[read])
                except InferloadError as exc:
                    self._failed(group, str(exc))
            elif read not in self.errors:  # read fine, but the run stopped before the warm-up ended
                self._failed(group, "the run stopped before the warm-up ended: no steady state to read the server over")
            for target in group:
                self.figures[target.name] = None if figures is None else {**figures, **shared_marks(group, target)}

    def _failed(self, group: tuple[Target, ...], reason: str) -> None:
        for target in group:
            self.errors[target.name] = reason
        logger.warning("target %r: server-side figures unavailable: %s", group[0].name, reason)

    def read_all(self, into: dict[str, server_stats.ServerSnapshot]) -> None:
        """One reading per group, under the name of the group's first target."""
        for group in self.groups:
            target = group[0]
            reason = unreadable_reason(target)
            if reason is not None:
                for member in group:
                    self.errors[member.name] = reason
                continue
            try:
                into[target.name] = server_stats.snapshot(
                    target.kind, target.address, target.model, reading_version(group), target.metrics_url, **tls_of(target)
                )
            except InferloadError as exc:
                for member in group:
                    self.errors[member.name] = str(exc)
                logger.warning("target %r: server-side figures unavailable: %s", target.name, exc)
