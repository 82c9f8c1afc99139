"""The servers' own mean request duration per window, next to the client's (the residual).

On the master (or a local run), one greenlet reads every target's server statistics at each
window boundary and keeps the per-window mean request duration; windows.csv then shows the
client mean minus it: network, serialisation and client cost, apart from the model.
"""

from __future__ import annotations

import logging
import time

import gevent

from inferload.errors import InferloadError
from inferload.measure.run_record import RunRecord
from inferload.scenario.model import Scenario
from inferload.servermetrics import snapshots as server_stats

logger = logging.getLogger(__name__)

#: read a little after the boundary, so the window's last requests are in the counters
AFTER_BOUNDARY_S = 0.05


class ServerWindowPoller:
    def __init__(self, scenario: Scenario, record: RunRecord) -> None:
        self.scenario = scenario
        self.record = record
        self._greenlet: gevent.Greenlet | None = None
        self._warned: set[str] = set()

    def start(self) -> None:
        self.stop()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _snapshot(self, target) -> server_stats.ServerSnapshot | None:
        try:
            return server_stats.snapshot(target.kind, target.address, target.model, target.version, target.metrics_url)
        except InferloadError as exc:
            if target.name not in self._warned:
                self._warned.add(target.name)
                logger.warning("target %r: no per-window server figures: %s", target.name, exc)
            return None

    def _run(self) -> None:
        window = self.record.window_s
        previous = {t.name: self._snapshot(t) for t in self.scenario.targets}
        while True:
            now = time.time()
            boundary = (now // window + 1) * window
            gevent.sleep(boundary + AFTER_BOUNDARY_S - now)
            index = int(boundary // window) - 1  # the window that just closed
            for target in self.scenario.targets:
                current = self._snapshot(target)
                before = previous.get(target.name)
                previous[target.name] = current
                if before is None or current is None:
                    continue
                try:
                    side = server_stats.server_side(before, current)
                except InferloadError:  # counters went backwards: the server restarted
                    continue
                if side.get("request_ms_avg") is not None:
                    self.record.server_request_ms[(index, target.name)] = side["request_ms_avg"]
