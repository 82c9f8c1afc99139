"""summary.json's `server_side`: each target's server read when the warm-up ends (without a warm-up:
as the run starts, before its first request) and when the run stops, and the difference
(`inferload.servermetrics.readers`).

Targets that read the same counters (one model on one server: `servermetrics.sharing`) are read
once, together, and each gets the same figures marked `scope: "model"` and `shared_with` (the
other targets): the server cannot split them per target.

On the master or a local run only. A server that cannot be read (or restarted in between) gets
`server_side: null`, the reason in `errors` and a warning; the run goes on. A TorchServe target
with no metrics page to read is said so at the start (a warning naming the target and the fix).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gevent

from inferload.errors import InferloadError
from inferload.measure.run_record import RunRecord
from inferload.scenario.kinds import has_role
from inferload.scenario.schema import RunOutline, Scenario
from inferload.scenario.targets import Target
from inferload.scenario.tls import tls_of
from inferload.servermetrics import readers as server_stats
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.kserve import kserve_metrics_url
from inferload.servermetrics.kserve import no_metrics_url_reason as kserve_no_metrics_url
from inferload.servermetrics.openai import NO_METRICS_URL as OPENAI_NO_METRICS_URL
from inferload.servermetrics.readers import NO_COUNTERS, ServerReader, reading_groups, reading_version
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.servermetrics.torchserve import no_metrics_url_reason, torchserve_metrics_url

# The servers' own mean request duration per window, next to the client's (the residual).
#
# On the master (or a local run), one greenlet reads every target's server statistics at each
# window boundary and keeps the per-window mean request duration; windows.csv then shows the
# client mean minus it: network, serialisation and client cost, apart from the model. One
# ``ServerReader`` per target, kept open for the whole run; the figure is ``figures.server_figures``'
# ``request_ms``, as in summary.json. Targets on one model of one server (``servermetrics.readers``) are read
# once and each gets the same figure: the model's, as their summary's ``server_side`` says.
#: read a little after the boundary, so the window's last requests are in the counters
AFTER_BOUNDARY_S = 0.05


class ServerWindowPoller:
    def __init__(self, scenario: Scenario, record: RunRecord) -> None:
        self.scenario = scenario
        self.record = record
        self._greenlet: gevent.Greenlet | None = None
        self._warned: set[str] = set()
        self._readers: dict[str, ServerReader] = {}
        #: the newest reading of each reading group, by the name of the group's first target (the web UI's live figures)
        self.latest: dict[str, ServerSnapshot] = {}

    def start(self) -> None:
        self.stop()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=1.0)  # out of any read before its reader closes
            self._greenlet = None
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def _snapshot(self, group: tuple[Target, ...]) -> ServerSnapshot | None:
        target = group[0]
        try:
            reader = self._readers.get(target.name)
            if reader is None:
                reader = ServerReader(
                    target.kind, target.address, target.model, reading_version(group), target.metrics_url, **tls_of(target)
                )
                self._readers[target.name] = reader
            return reader.read()
        except InferloadError as exc:
            if target.name not in self._warned:
                self._warned.add(target.name)
                logger.warning("target %r: no per-window server figures: %s", target.name, exc)
            return None

    def _run(self) -> None:
        window = self.record.window_s
        # a server that cannot be read is said once, in the summary's reason (`unreadable_reason`)
        groups = [group for group in reading_groups(self.scenario.targets) if unreadable_reason(group[0]) is None]
        previous = {group[0].name: self._snapshot(group) for group in groups}
        while True:
            now = time.time()
            boundary = (now // window + 1) * window
            gevent.sleep(boundary + AFTER_BOUNDARY_S - now)
            index = int(boundary // window) - 1  # the window that just closed
            for group in groups:
                target = group[0]
                current = self._snapshot(group)
                before = previous.get(target.name)
                previous[target.name] = current
                if current is not None:
                    self.latest[target.name] = current
                    gauges = (current.pending, current.running, current.kv_cache_used)
                    if any(gauge is not None for gauge in gauges):
                        for member in group:
                            self.record.server_gauges[(index, member.name)] = gauges
                if before is None or current is None:
                    continue
                try:
                    request_ms = server_figures(before, current).request_ms
                except InferloadError:  # counters went backwards: the server restarted
                    continue
                if request_ms is not None:
                    for member in group:
                        self.record.server_request_ms[(index, member.name)] = request_ms


logger = logging.getLogger(__name__)


def shared_marks(group: tuple[Target, ...], target: Target) -> dict[str, Any]:
    """The keys that mark a shared reading in `server_side` (none for a target read alone)."""
    others = [other.name for other in group if other.name != target.name]
    return {"scope": "model", "shared_with": others} if others else {}


def unreadable_reason(target: Target) -> str | None:
    """Why a target's server cannot be read at all, known before the run (else None)."""
    if not has_role(target.server, "counters"):
        return NO_COUNTERS.format(kind=target.kind)
    if target.server == "torchserve" and torchserve_metrics_url(target.address, target.metrics_url) is None:
        return no_metrics_url_reason(target.address)
    if target.server == "kserve" and kserve_metrics_url(target.kind, target.address, target.metrics_url) is None:
        return kserve_no_metrics_url(target.address)
    if target.server == "openai" and target.metrics_url is None:
        return OPENAI_NO_METRICS_URL
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
        if self.scenario.warmup > 0:
            gevent.spawn_later(self.scenario.warmup, self.read_all, self.before)
        else:  # before the first user starts (Locust fires test_start first): no request precedes the reading
            self.read_all(self.before)

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
        """One reading per group, under the name of the group's first target; the groups read side by
        side (a server that does not answer delays the run's end by one timeout, not one per target)."""

        def read(group: tuple[Target, ...]) -> server_stats.ServerSnapshot | str:
            target = group[0]
            reason = unreadable_reason(target)
            if reason is not None:
                return reason
            try:
                return server_stats.snapshot(
                    target.kind, target.address, target.model, reading_version(group), target.metrics_url, **tls_of(target)
                )
            except InferloadError as exc:
                logger.warning("target %r: server-side figures unavailable: %s", target.name, exc)
                return str(exc)

        with ThreadPoolExecutor(max_workers=max(1, len(self.groups)), thread_name_prefix="server-reading") as pool:
            readings = list(pool.map(read, self.groups))
        for group, reading in zip(self.groups, readings, strict=True):
            if isinstance(reading, str):
                for member in group:
                    self.errors[member.name] = reading
            else:
                into[group[0].name] = reading
