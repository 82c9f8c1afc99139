"""The trace join of a run (``trace`` on Triton targets): Triton's tracing turned on for the run and
restored after, the client's request ids and times gathered, joined with the trace file, and the
tail anatomy handed to the summary (``targets.<t>.tail``).

Every process with users tags its requests (`inferload.measure.trace_join`); workers send what
they kept with their reports to the master, signed with the run key, so the join is done once, on
the master, with each worker's records (durations only: no clock is compared across machines).
The master (or a local run) changes and restores the settings and reads the trace file (the settings
found are written to the journal of server changes before they change, `inferload.run.server_changes`,
so a run killed before its end leaves what `inferload restore` and the next run put back): Triton
writes it on its own machine, so a remote Triton's file is read only when ``trace.file`` points at
a copy this machine can read; otherwise the summary says why there is no anatomy. With
``trace.source: influxdb`` the records come instead from the `triton_traces` points the collector
sidecar next to that Triton wrote under the run's id (`run.trace_from_influx`), read back once the
settings are restored; the summary's ``trace_source`` says which.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.errors import ScrapeError, ServerChangeError
from inferload.measure.report_auth import SignedReports
from inferload.measure.trace_join import ClientTiming, ClientTraceRecords, ServerTrace, drain, join, merge_message
from inferload.observe.influx_range import InfluxReader, influxql_string
from inferload.observe.points import TRACE_MEASUREMENT, trace_from_row
from inferload.observe.sink import SinkSettings
from inferload.results.files import ResultsError
from inferload.run.server_changes import JournalEntry, ServerJournal
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import Target, TritonTarget
from inferload.servermetrics.triton_trace import TraceSettingsClient, read_traces, restorable, run_settings, trace_files
from inferload.users import InferenceUser
from inferload.users.base import wiring_of

# A run's Triton trace records from InfluxDB (``trace.source: influxdb``): the `triton_traces`
# points the collector sidecar next to a remote Triton wrote (`observe.sources.triton_trace_file`).
#
# At the end of the run, once the trace settings are restored (Triton then writes the traces it
# held), the collector still has to read the last file and write its points: the count of the run's
# points is polled until it has not grown for `QUIET_S` (three of the collector's default 1 s
# intervals), at most `DEADLINE_S`. The records are the file join's own (`ServerTrace`), so the run
# joins them exactly as it joins the file's.
QUIET_S = 3.0
DEADLINE_S = 10.0
POLL_S = 0.5


def settled_count(
    count: Callable[[], int],
    quiet_s: float = QUIET_S,
    deadline_s: float = DEADLINE_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """`count()` once it is above 0 and has not changed for `quiet_s`, or whatever it is at `deadline_s`."""
    start = clock()
    last, since = -1, start
    while True:
        now_count, now = count(), clock()
        if now_count != last:
            last, since = now_count, now
        elif now_count > 0 and now - since >= quiet_s:
            return now_count
        if now - start >= deadline_s:
            return now_count
        sleep(poll_s)


def influx_traces(
    settings: SinkSettings,
    run_id: str,
    model: str,
    quiet_s: float = QUIET_S,
    deadline_s: float = DEADLINE_S,
) -> list[ServerTrace]:
    """The run's traced requests of `model` in InfluxDB, once the collector has written them all
    (ResultsError when InfluxDB cannot be queried)."""
    reader = InfluxReader(settings)
    where = f'"run_id" = {influxql_string(run_id)} AND "model" = {influxql_string(model)}'

    def count() -> int:
        rows = reader.rows(f'SELECT count("trace_id") FROM "{TRACE_MEASUREMENT}" WHERE {where}')
        return int(rows[0].get("count") or 0) if rows else 0

    try:
        if settled_count(count, quiet_s, deadline_s) == 0:
            return []
        rows = reader.rows(f'SELECT * FROM "{TRACE_MEASUREMENT}" WHERE {where}')
    finally:
        reader.close()
    return [trace_from_row(row) for row in rows]


logger = logging.getLogger(__name__)

REPORT_KEY = "inferload_trace"
#: how long the end of a run waits for Triton to finish writing its trace files
SETTLE_S = 3.0
TORCHSERVE_REASON = (
    "TorchServe gives no per-request timings with a request id: its queue and handler times are "
    "per-model counters (ts_queue_latency_microseconds, ts_inference_latency_microseconds) and "
    "gauges; its access log has no request id nor queue time, so no request's time can be split"
)


class TraceRun:
    """One run's trace join: settings, records, join, anatomy."""

    def __init__(
        self,
        environment: Environment,
        scenario: Scenario,
        user_classes: Mapping[str, type[InferenceUser]],
        influx: SinkSettings | None = None,
        run_id: str | None = None,
        journal: ServerJournal | None = None,
    ) -> None:
        self.environment = environment
        self.journal = journal
        self.scenario = scenario
        self.influx = influx  # where the run streams: `trace.source: influxdb` reads the collector's points there
        self.run_id = run_id
        self.targets = {t.name: t for t in scenario.targets if isinstance(t, TritonTarget) and t.trace is not None}
        self.records: dict[str, ClientTraceRecords] = {}
        for cls in user_classes.values():
            if cls.target.name in self.targets:
                records = ClientTraceRecords()
                wiring_of(environment, cls).trace_records = records
                self.records[cls.target.name] = records
        self.from_workers: dict[tuple[str, str], ClientTraceRecords] = {}  # (worker, target) -> records
        self.previous: dict[str, dict[str, Any]] = {}
        #: target -> the journal's entry of its model's trace settings (targets on one model share one)
        self.entries: dict[str, JournalEntry] = {}
        self.trace_file: dict[str, Path | None] = {}
        self.turned_on: set[str] = set()
        self.problems: dict[str, str] = {}
        self.started_at = 0.0
        runner = environment.runner
        self.is_worker = isinstance(runner, WorkerRunner)
        role = "worker" if self.is_worker else "master" if isinstance(runner, MasterRunner) else None
        self.reports = SignedReports.for_role(REPORT_KEY, role) if self.targets else None
        if not self.targets:
            return
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        if self.is_worker:
            events.report_to_master.add_listener(self._on_report_to_master)
        else:
            events.test_stop.add_listener(self._on_test_stop)
            if role == "master":
                events.worker_report.add_listener(self._on_worker_report)

    # -- every process with users ---------------------------------------------------------
    def _on_test_start(self, **_: Any) -> None:
        for records in self.records.values():
            records.start(self.scenario.warmup)
        if not self.is_worker:
            self.started_at = time.time() - 1.0  # file times have a coarse grain
            for target in self.targets.values():
                self._turn_on(target)

    def _on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        assert self.reports is not None
        batch = {name: message for name, records in self.records.items() if (message := drain(records)) is not None}
        if batch:
            data[REPORT_KEY] = self.reports.seal(client_id, batch)

    def _on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        sealed = data.get(REPORT_KEY)
        if not sealed or self.reports is None:
            return
        batch = self.reports.open(client_id, sealed)
        if not isinstance(batch, dict):
            return
        for name, message in batch.items():
            if name in self.targets and isinstance(message, dict):
                merge_message(self.from_workers.setdefault((client_id, name), ClientTraceRecords()), message)

    # -- the master or a local run --------------------------------------------------------
    def _client(self, target: Target) -> TraceSettingsClient:
        return TraceSettingsClient(target.address, target.protocol, min(target.timeout, 10.0), target.tls)

    def _turn_on(self, target: TritonTarget) -> None:
        assert target.trace is not None
        journal = self.journal if self.journal is not None else ServerJournal()
        try:
            previous = self._client(target).get(target.model)
            access = {"protocol": target.protocol, "tls": target.tls.model_dump() if target.tls else None}
            # written down before Triton's settings change: a killed run leaves what to put back
            self.entries[target.name] = journal.record(
                "triton-trace-settings", target.address, target.model, restorable(previous), access
            )
            self._client(target).update(target.model, run_settings(target.trace.every_nth))
        except (ScrapeError, ServerChangeError) as exc:
            self.problems[target.name] = f"tracing could not be turned on: {exc}"
            logger.warning("target %r: %s", target.name, self.problems[target.name])
            self._forget(target.name)
            return
        self.previous[target.name] = previous
        self.turned_on.add(target.name)
        if target.trace.source == "influxdb":  # the collector next to Triton reads the file
            return
        reported = str(previous.get("trace_file") or "")
        path = target.trace.file or reported
        self.trace_file[target.name] = Path(path) if path else None
        if not path:
            self.problems[target.name] = (
                "Triton has no trace file: start it with --trace-config triton,file=PATH (and level=OFF), or set trace.file"
            )

    def _on_test_stop(self, **_: Any) -> None:
        # in reverse order: two targets on one model, the second saw the first's settings as "previous"
        for name, previous in reversed(list(self.previous.items())):
            target = self.targets[name]
            try:  # restoring also makes Triton write the traces it holds
                self._client(target).update(target.model, restorable(previous))
            except ScrapeError as exc:
                logger.warning(
                    "target %r: Triton's trace settings not restored: %s; `inferload restore` puts them back", name, exc
                )
                self.entries.pop(name, None)  # the journal keeps them
            else:
                self._forget(name)
            del self.previous[name]

    def _forget(self, name: str) -> None:
        """Forget the journal's entry of `name`'s model once no other target of the run still traces it."""
        entry = self.entries.pop(name, None)
        if entry is not None and entry not in self.entries.values():
            (self.journal if self.journal is not None else ServerJournal()).forget(entry)

    def _client_timings(self, name: str) -> tuple[dict[str, ClientTiming], int]:
        timings: dict[str, ClientTiming] = {}
        dropped = 0
        stores = [self.records[name]] if name in self.records and not isinstance(self.environment.runner, MasterRunner) else []
        stores += [records for (_, target), records in self.from_workers.items() if target == name]
        for records in stores:
            timings.update(records.timings())
            dropped += records.dropped
        return timings, dropped

    def tails(self) -> dict[str, dict[str, Any]]:
        """``targets.<t>.tail`` of every traced target, and of TorchServe targets in such a run (why there is
        none), for the summary; empty when no target has ``trace``."""
        if not self.targets:
            return {}
        self._on_test_stop()
        out: dict[str, dict[str, Any]] = {}
        for target in self.scenario.targets:  # a run that asks for the anatomy: say what TorchServe cannot give
            if target.server == "torchserve":
                out[target.name] = {"available": False, "reason": TORCHSERVE_REASON}
        for name, target in self.targets.items():
            out[name] = self._tail(name, target)
        return out

    def _tail(self, name: str, target: TritonTarget) -> dict[str, Any]:
        assert target.trace is not None
        head: dict[str, Any] = {"rate": 1.0 / target.trace.every_nth, "every_nth": target.trace.every_nth}
        timings, dropped = self._client_timings(name)
        head.update(client_requests=len(timings), client_dropped=dropped, trace_source=target.trace.source)
        if name in self.problems:
            return {"available": False, "reason": self.problems[name], **head}
        if name not in self.turned_on:
            return {"available": False, "reason": "tracing was not turned on (the run did not start)", **head}
        traces = self._from_influx(target) if target.trace.source == "influxdb" else self._from_file(name, head)
        if isinstance(traces, str):
            return {"available": False, "reason": traces, **head}
        result = join(traces, timings, target.model)
        head.update(server_traces=result.server_traces, unmatched_traces=result.unmatched_traces)
        head["batch_size_exact"] = target.trace.every_nth == 1
        if not result.joined:
            return {"available": False, "reason": "no traced request of this run joined a client request", **head}
        # the anatomy needs the run's p99 and p50: `results.tail.tail_summary` adds it with the summary
        return {"available": True, "reason": None, **head, "requests": list(result.joined)}

    def _from_file(self, name: str, head: dict[str, Any]) -> list[ServerTrace] | str:
        """The run's traces from Triton's trace file here, or why there are none."""
        path = self.trace_file.get(name)
        if path is None:
            return "tracing was not turned on (the run did not start)"
        head["trace_file"] = str(path)
        try:
            return self._read(path)
        except ScrapeError as exc:
            return f"the trace file cannot be read here: {exc}"

    def _from_influx(self, target: Target) -> list[ServerTrace] | str:
        """The run's traces from the collector's `triton_traces` points in InfluxDB, or why there are none."""
        if self.influx is None or self.run_id is None:
            return "trace.source is influxdb but the run does not stream to InfluxDB: give --influx-url (or INFLUX_URL)"
        try:
            traces = influx_traces(self.influx, self.run_id, target.model)
        except ResultsError as exc:
            return f"the trace records cannot be read from InfluxDB: {exc}"
        if not traces:
            return (
                f"no {TRACE_MEASUREMENT} points of run {self.run_id!r} and model {target.model!r} in "
                f"{self.influx.describe()}: run the collector next to Triton with its trace file "
                f"(python -m collectors --scenario ... --run-id {self.run_id}, or a triton-trace source)"
            )
        return traces

    def _read(self, path: Path) -> list[Any]:
        """The run's traces, once Triton has written them: it writes the traces it held when the settings
        were restored a moment later, so wait (up to 3 s) until the files stop changing."""
        deadline = time.monotonic() + SETTLE_S
        seen: list[tuple[str, int]] | None = None
        while time.monotonic() < deadline:
            files = trace_files(path, self.started_at)
            now = [(str(f), f.stat().st_size) for f in files if f.exists()]
            if now and now == seen:
                break
            seen = now
            time.sleep(0.3)
        return read_traces(path, self.started_at)
