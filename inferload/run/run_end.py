"""A web UI run's results written when the run ends, not when Locust quits.

With the web UI, Locust keeps serving after a run ends (the shape's end, or Stop in the UI) until
the user quits it, usually with Ctrl-C; the results were written only then, after the signal, so a
finished run looked like a stopped one to the user and to `inferload run` (exit 130). Here the run's
`test_stop` writes summary.json, windows.csv and report.html at once (on a master, once every worker
has sent a report after it stopped: its last requests), and `quitting` then only hands back that
summary for the exit code. A run stopped by a signal is left to the `quitting` path (results marked
interrupted), and a run started again from the UI is written again when it ends (and at the quit).
Headless runs are unchanged: they quit when the run ends and write then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner

from inferload.results.model import RunSummary

logger = logging.getLogger(__name__)

#: how long a master waits for its workers' reports after the run stopped (Locust reports every 3 s)
WORKER_REPORTS_WAIT_S = 10.0
POLL_S = 0.1


class ResultsAtRunEnd:
    """Writes a web UI run's results at its `test_stop` (see the module's docstring)."""

    def __init__(
        self,
        environment: Environment,
        write: Callable[[], RunSummary | None],
        interrupted: Callable[[], bool],
        worker_reports_wait_s: float = WORKER_REPORTS_WAIT_S,
    ) -> None:
        self.environment = environment
        self._write = write
        self._interrupted = interrupted
        self.worker_reports_wait_s = worker_reports_wait_s
        #: the summary written at the end of the latest run (None: not written since it started)
        self.summary: RunSummary | None = None
        self._writing: gevent.Greenlet | None = None
        self._reported_at: dict[str, float] = {}  # worker id -> when its latest report arrived
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.test_stop.add_listener(self._on_test_stop)
        events.worker_report.add_listener(self._on_worker_report)

    def web_ui_run(self) -> bool:
        options = self.environment.parsed_options
        return options is not None and not getattr(options, "headless", True) and self.environment.web_ui is not None

    def _on_test_start(self, **_: Any) -> None:
        self.summary = None

    def _on_worker_report(self, client_id: str, **_: Any) -> None:
        self._reported_at[client_id] = time.monotonic()

    def _on_test_stop(self, **_: Any) -> None:
        if not self.web_ui_run() or self._interrupted():
            return  # headless: written when Locust quits, right after; a signal: the quit path marks it interrupted
        # after the other test_stop listeners (the server read at the stop among them)
        self._writing = gevent.spawn(self._write_when_reported)

    def _write_when_reported(self) -> None:
        self._wait_for_workers()
        if self._interrupted():  # a signal came meanwhile: the quit path writes, marked
            return
        self.summary = self._write()

    def _wait_for_workers(self) -> None:
        """On a master: until each worker that took part stopped and reported since (bounded)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        deadline = time.monotonic() + self.worker_reports_wait_s
        waiting = {client.id for client in runner.clients.values() if client.state != STATE_MISSING}
        stopped_at: dict[str, float] = {}
        while waiting and time.monotonic() < deadline:
            for client_id in list(waiting):
                client = runner.clients.get(client_id)
                if client is None or client.state == STATE_MISSING:
                    waiting.discard(client_id)
                elif client.state not in (STATE_RUNNING, STATE_SPAWNING):
                    since = stopped_at.setdefault(client_id, time.monotonic())
                    if self._reported_at.get(client_id, float("-inf")) > since:
                        waiting.discard(client_id)
            gevent.sleep(POLL_S)
        if waiting:
            logger.warning(
                "%d worker(s) sent no report within %g s of the run's end; their last requests are missing: %s",
                len(waiting),
                self.worker_reports_wait_s,
                ", ".join(sorted(waiting)),
            )

    def written(self) -> RunSummary | None:
        """At quit: the summary written at the end of the latest run, once its writing is done (None:
        not written, so the quit path writes)."""
        if self._writing is not None:
            self._writing.join()
            self._writing = None
        return None if self._interrupted() else self.summary
