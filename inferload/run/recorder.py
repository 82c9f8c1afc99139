"""The Locust listeners that fill a run's measurements, on every Locust process.

``RunRecorder`` subscribes a ``RunRecord`` (inferload.measure.run_record) to the environment's
events: every request into its windows, a worker's figures to the master with each report, the
user count sampled per window on the master.

``RequestLog``: every request as one CSV row (time, target, latency, outcome, worker), on request,
so anyone can recompute the percentiles independently. Workers send their rows to the master
with each Locust report, signed with the run key (`inferload.measure.report_auth`: rows from
anyone else are refused and counted in `rejected_reports`); the master (or a local run) appends
them to `requests.csv` in the results folder, a batch at a time, never from inside a request.
Text cells (target, outcome, worker) are written so spreadsheets never run them as formulas.

A results folder that fails mid-run (turned read-only, the disk full) loses no row: the log goes on
in a fallback folder (a new temporary folder, named in the log), with a copy of what was written
before, and the rest of the run's results follow it there (`fallback_dir`, read by `run.finish`).
Should the fallback fail too, rows are dropped (counted in `dropped_rows`, logged once), never kept
without bound; a write never raises into the writer greenlet or the master's message handling.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.errors import ConnectionRefused
from inferload.measure.decoupled_record import STREAM_CONTEXT_KEY
from inferload.measure.report_auth import SignedReports
from inferload.measure.run_record import RunRecord
from inferload.results.summary import safe_cell

logger = logging.getLogger(__name__)

#: what a worker's report carries: the request log's rows, and the run record's figures
ROWS_REPORT_KEY = "inferload_requests"
RECORD_REPORT_KEY = "inferload_latency"
COLUMNS = ["time", "target", "latency_ms", "outcome", "worker"]
FLUSH_EVERY_S = 1.0


#: what requests.csv is called while the run writes it (renamed to its own name when the run ends)
PARTIAL_SUFFIX = ".partial"


class RequestLog:
    """Collects rows on every process; writes them where the results are (master or local).

    The rows go to ``requests.csv.partial`` while the run goes on, renamed ``requests.csv`` once the
    last row is written: a folder that failed, or a process killed outright, leaves a file whose name
    says it is not whole, never a requests.csv that looks complete.

    A worker learns whether the master asked for the log only with the first spawn message (Locust
    sends the master's options then), so workers always attach one, and `enabled` reads the options
    when asked (a listener that asks at test start, as the native engine's does, sees the master's
    answer whichever listener Locust calls first).
    """

    def __init__(self, environment: Environment, path: Path | None) -> None:
        self.environment = environment
        #: where the rows are written now (``requests.csv.partial`` until `close()`, then requests.csv)
        self.path = None if path is None else partial_path(path)
        self._rows: list[tuple[float, str, float, str]] = []
        self._writer: gevent.Greenlet | None = None
        self._is_worker = isinstance(environment.runner, WorkerRunner)
        #: where requests.csv went on after the results folder failed (None: it did not)
        self.fallback_dir: Path | None = None
        #: rows that could be written nowhere (the results folder and its fallback both failed)
        self.dropped_rows = 0
        runner = environment.runner
        role = "worker" if isinstance(runner, WorkerRunner) else "master" if isinstance(runner, MasterRunner) else None
        self.reports = SignedReports.for_role(ROWS_REPORT_KEY, role)  # RunKeyError on a master or worker without a run key
        events = environment.events
        events.request.add_listener(self._on_request)
        if isinstance(runner, WorkerRunner):
            events.report_to_master.add_listener(self._on_report_to_master)
        else:
            if self.path is None:
                raise ValueError("the master or a local run needs a path for requests.csv")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(self.path, "w", newline="") as handle:
                    csv.writer(handle).writerow(COLUMNS)
            except OSError as error:  # a full disk at the start: no row yet, the file goes on elsewhere
                with contextlib.suppress(OSError):
                    self.path.unlink()  # never a partial file left in the results folder
                self._fail_over(error, rows_written=False)
            if isinstance(runner, MasterRunner):
                events.worker_report.add_listener(self._on_worker_report)
            else:
                self._writer = gevent.spawn(self._flush_forever)

    @property
    def enabled(self) -> bool:
        """Whether rows are kept: always where requests.csv is written; on a worker, when its master asked."""
        if not self._is_worker:
            return self.path is not None
        return bool(getattr(self.environment.parsed_options, "requests_csv", False))

    def _on_request(self, name: str, response_time: float, exception: BaseException | None = None, **_: Any) -> None:
        if self.enabled:
            self._rows.append((time.time(), name, response_time, "failure" if exception else "ok"))

    def add_rows(self, rows: list[Any]) -> None:
        """Rows recorded elsewhere (the native engine's batches: time, target, latency_ms, outcome)."""
        if self.enabled:
            self._rows.extend((float(t), str(target), float(latency), str(outcome)) for t, target, latency, outcome in rows)

    @property
    def rejected_reports(self) -> int:
        """Batches of rows refused on the master: unsigned, wrongly signed or replayed (not written)."""
        return self.reports.rejected

    def _on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            data[ROWS_REPORT_KEY] = self.reports.seal(client_id, rows)

    def _on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        sealed = data.get(ROWS_REPORT_KEY)
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
        """The last rows written, and the file given its own name (requests.csv)."""
        if self._writer is not None:
            self._writer.kill(block=False)
            self._writer = None
        self.flush()
        if self.path is None or self.path.suffix != PARTIAL_SUFFIX:
            return
        whole = self.path.with_suffix("")
        try:
            self.path.replace(whole)
        except OSError as error:
            logger.error("cannot rename %s to %s (%s): its rows are all there", self.path, whole.name, error.strerror or error)
            return
        self.path = whole  # a web UI's next run appends to it

    def _append(self, rows: list, worker: str) -> None:
        assert self.path is not None
        try:
            self._write(self.path, rows, worker)
            return
        except OSError as error:
            if self.fallback_dir is not None or not self._fail_over(error):
                self._drop(rows, error)
                return
        try:
            self._write(self.path, rows, worker)
        except OSError as error:
            self._drop(rows, error)

    @staticmethod
    def _write(path: Path, rows: list, worker: str) -> None:
        worker_cell = safe_cell(worker)
        with open(path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for t, target, latency, outcome in rows:
                writer.writerow((f"{t:.6f}", safe_cell(target), f"{latency:.3f}", safe_cell(outcome), worker_cell))

    def _fail_over(self, error: OSError, rows_written: bool = True) -> bool:
        """The results folder failed: go on in a new temporary folder, with what was written so far
        (``rows_written`` False: nothing was, not even the header)."""
        assert self.path is not None
        try:
            folder = Path(tempfile.mkdtemp(prefix="inferload-results-"))
            fallback = folder / self.path.name
            copied = False
            if rows_written:
                with contextlib.suppress(OSError):  # the rows written before, when the old file can still be read
                    shutil.copyfile(self.path, fallback)
                    copied = True
            if not copied:
                with open(fallback, "w", newline="") as handle:
                    csv.writer(handle).writerow(COLUMNS)
        except OSError as again:
            logger.error("cannot write %s (%s), nor a fallback folder (%s)", self.path, error.strerror or error, again)
            return False
        logger.error(
            "cannot write %s (%s); requests.csv goes on in %s (with the rows written before), and the run's other"
            " results follow it there",
            self.path,
            error.strerror or error,
            fallback,
        )
        if rows_written:
            with contextlib.suppress(OSError):  # a folder that went read-only keeps it, named .partial
                self.path.unlink()
        self.path, self.fallback_dir = fallback, folder
        return True

    def _drop(self, rows: list, error: OSError) -> None:
        if not self.dropped_rows:
            logger.error("cannot write %s (%s): request rows are dropped from now on (counted)", self.path, error)
        self.dropped_rows += len(rows)


def partial_path(path: Path) -> Path:
    """requests.csv's name while it is written: ``requests.csv.partial``."""
    return path.with_name(path.name + PARTIAL_SUFFIX)


class RunRecorder:
    """Subscribes a RunRecord to a Locust environment's events (a listener class, no globals)."""

    def __init__(self, environment: Environment, warmup_s: float, window_s: float, targets: tuple[str, ...] = ()) -> None:
        self.environment = environment
        self.record = RunRecord(window_s=window_s, warmup_s=warmup_s, targets=targets)
        self._sampler: gevent.Greenlet | None = None
        #: reports signed with the run key (see inferload.measure.report_auth); RunKeyError on a master or worker without one
        self.reports = SignedReports.for_role(
            RECORD_REPORT_KEY, "worker" if self.is_worker else "master" if self.is_master else None
        )
        events = environment.events
        events.request.add_listener(self._on_request)
        events.test_start.add_listener(self._on_test_start)
        events.test_stop.add_listener(self._on_test_stop)
        events.report_to_master.add_listener(self._on_report_to_master)
        events.worker_report.add_listener(self._on_worker_report)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def is_master(self) -> bool:
        return isinstance(self.environment.runner, MasterRunner)

    def _on_request(
        self,
        name: str,
        response_time: float,
        exception: BaseException | None = None,
        context: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        now = time.time()
        self.record.record(name, response_time, exception is not None, now, refused=isinstance(exception, ConnectionRefused))
        if context:
            lag = context.get("send_lag_ms")
            if lag is not None:  # open loop: latency counts from the intended time, so sent = now - latency + lag
                self.record.record_send_lag(name, lag, now)
                self.record.record_send(name, now - (response_time - lag) / 1000.0)
            timing = context.get(STREAM_CONTEXT_KEY)
            if timing is not None and exception is None:
                self.record.record_stream(name, timing, now)

    def _on_test_start(self, **_: Any) -> None:
        self.record.started_at = time.time()
        self.record.stopped_at = None
        if not self.is_worker and self._sampler is None:
            self._sampler = gevent.spawn(self._sample_users)

    def _on_test_stop(self, **_: Any) -> None:
        self.record.stopped_at = time.time()
        if self._sampler is not None:
            self._sampler.kill(block=False)
            self._sampler = None

    def _sample_users(self) -> None:
        window = self.record.window_s
        while True:
            runner = self.environment.runner
            if runner is not None:
                self.record.users_by_window[int(time.time() // window)] = runner.user_count
            gevent.sleep(window / 2)

    @property
    def rejected_reports(self) -> int:
        """Worker reports refused on the master: unsigned, wrongly signed or replayed (their figures left out)."""
        return self.reports.rejected

    def _on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        data[RECORD_REPORT_KEY] = self.reports.seal(client_id, self.record.drain_to_wire())

    def _on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        sealed = data.get(RECORD_REPORT_KEY)
        if sealed:
            wire = self.reports.open(client_id, sealed)
            if wire is not None:
                self.record.merge_wire(wire, worker=client_id)
