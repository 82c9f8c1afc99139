"""The servers' own mean request duration per window, next to the client's (the residual).

On the master (or a local run), one greenlet reads every target's server statistics at each
window boundary and keeps the per-window mean request duration; windows.csv then shows the
client mean minus it: network, serialisation and client cost, apart from the model. One
``ServerReader`` per target, kept open for the whole run; the figure is ``figures.server_figures``'
``request_ms``, as in summary.json. Targets on one model of one server (``sharing.py``) are read
once and each gets the same figure: the model's, as their summary's ``server_side`` says.
"""

from __future__ import annotations

import logging
import time

import gevent

from inferload.errors import InferloadError
from inferload.measure.run_record import RunRecord
from inferload.scenario.model import Scenario
from inferload.scenario.targets import Target
from inferload.scenario.tls import tls_of
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.readers import ServerReader
from inferload.servermetrics.reading import ServerSnapshot
from inferload.servermetrics.sharing import reading_groups, reading_version

logger = logging.getLogger(__name__)

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
        groups = reading_groups(self.scenario.targets)
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
                if before is None or current is None:
                    continue
                try:
                    request_ms = server_figures(before, current).request_ms
                except InferloadError:  # counters went backwards: the server restarted
                    continue
                if request_ms is not None:
                    for member in group:
                        self.record.server_request_ms[(index, member.name)] = request_ms
