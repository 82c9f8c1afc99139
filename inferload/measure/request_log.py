"""Every request as one CSV row (time, target, latency, outcome, worker), on request.

So anyone can recompute the percentiles independently. Workers send their rows to the master
with each Locust report, signed with the run key (`inferload.measure.report_auth`: rows from
anyone else are refused and counted in `rejected_reports`); the master (or a local run) appends
them to `requests.csv` in the results folder, a batch at a time, never from inside a request.
Text cells (target, outcome, worker) are written so spreadsheets never run them as formulas.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.measure.csv_safe import safe_cell
from inferload.measure.report_auth import SignedReports

REPORT_KEY = "inferload_requests"
COLUMNS = ["time", "target", "latency_ms", "outcome", "worker"]
FLUSH_EVERY_S = 1.0


class RequestLog:
    """Collects rows on every process; writes them where the results are (master or local).

    A worker learns whether the master asked for the log only with the first spawn message (Locust
    sends the master's options then), so workers always attach one and switch it on at test start.
    """

    def __init__(self, environment: Environment, path: Path | None) -> None:
        self.environment = environment
        self.path = path
        self._rows: list[tuple[float, str, float, str]] = []
        self._writer: gevent.Greenlet | None = None
        self.enabled = path is not None
        runner = environment.runner
        role = "worker" if isinstance(runner, WorkerRunner) else "master" if isinstance(runner, MasterRunner) else None
        self.reports = SignedReports.for_role(REPORT_KEY, role)  # RunKeyError on a master or worker without a run key
        events = environment.events
        events.request.add_listener(self._on_request)
        if isinstance(runner, WorkerRunner):
            events.test_start.add_listener(self._on_worker_test_start)
            events.report_to_master.add_listener(self._on_report_to_master)
        else:
            if path is None:
                raise ValueError("the master or a local run needs a path for requests.csv")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="") as handle:
                csv.writer(handle).writerow(COLUMNS)
            if isinstance(runner, MasterRunner):
                events.worker_report.add_listener(self._on_worker_report)
            else:
                self._writer = gevent.spawn(self._flush_forever)

    def _on_worker_test_start(self, **_: Any) -> None:
        self.enabled = bool(getattr(self.environment.parsed_options, "requests_csv", False))

    def _on_request(self, name: str, response_time: float, exception: BaseException | None = None, **_: Any) -> None:
        if self.enabled:
            self._rows.append((time.time(), name, response_time, "failure" if exception else "ok"))

    @property
    def rejected_reports(self) -> int:
        """Batches of rows refused on the master: unsigned, wrongly signed or replayed (not written)."""
        return self.reports.rejected

    def _on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            data[REPORT_KEY] = self.reports.seal(client_id, rows)

    def _on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        sealed = data.get(REPORT_KEY)
        if sealed:
            rows = self.reports.open(client_id, sealed)
            if rows:
                self._append(rows, client_id)

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(FLUSH_EVERY_S)
            self.flush()

    def flush(self) -> None:
        """Write what this process gathered itself (a local run)."""
        if self.path is not None and self._rows:
            rows, self._rows = self._rows, []
            self._append(rows, "local")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.kill(block=False)
            self._writer = None
        self.flush()

    def _append(self, rows: list, worker: str) -> None:
        assert self.path is not None
        worker_cell = safe_cell(worker)
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for t, target, latency, outcome in rows:
                writer.writerow((f"{t:.6f}", safe_cell(target), f"{latency:.3f}", safe_cell(outcome), worker_cell))
