"""One scenario run inside Locust: the parts, wired to Locust's events.

A locustfile builds an `InferloadRun` for its scenario (user and shape classes) and hands
Locust's `init` event to `InferloadRun.on_init` (see `inferload.run.locust_classes`). The measuring core
(recorder, the servers' readings, InfluxDB, results, exit code) is `run.attached_run.MeasuredRun`,
the same as `inferload.attach`'s; the run adds its facts to it (`RunAdditions`). Each other part does
one job in a module of its own: options (`run.options`), fitting users to the served model
(`inferload.startchecks.fit`), open-loop arrivals (`run.open_loop`), the workers of a distributed run
(`run.workers`), the servers' own figures (`run.server_side`), results, console and exit code
(`run.finish`). All state lives on the `InferloadRun` object and the Locust environment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from inferload.errors import StartCheckError
from inferload.measure.windows import StabilityRule
from inferload.observe.influx_export import sink_settings_from_options
from inferload.observe.sink import SinkSettingsError
from inferload.results.files import default_run_id
from inferload.results.schema import RunSummary
from inferload.run import finish
from inferload.run.attached_run import MeasuredRun
from inferload.run.open_loop import setup_open_loop
from inferload.run.options import RunOptions, add_arguments, read_cold_starts, scenario_path_from_argv
from inferload.run.ramp_hold import RampHold
from inferload.run.recorder import RequestLog
from inferload.run.results_dir import check_results_dir
from inferload.run.server_changes import ServerJournal, same_host
from inferload.run.server_side import ServerWindowPoller
from inferload.run.trace_run import TraceRun
from inferload.run.traffic import ScenarioShape, StableStop, parse_stop_when_stable, shape_class_for
from inferload.run.workers import WorkerWatch
from inferload.scenario.replay_file import ReplayFileError
from inferload.scenario.schema import Scenario, idle_targets_problem, is_open_loop, targets_given_batches
from inferload.scenario.shapes import ReplayShape
from inferload.startchecks.fit import ModelInfo, ModelInfos, fit_to_models
from inferload.startchecks.triton import fetch_triton_model_info
from inferload.traffic.arrivals import AdjustableTimeline
from inferload.traffic.ramp_hold import RampHoldPlan, RampHoldRule, parse_ramp_hold, ramp_problem, ramp_timeline
from inferload.users import InferenceUser, user_class_for
from inferload.users.base import wiring_of
from inferload.users.engine import assign_engine, attach_engine, engine_needed
from inferload.webui.live import ServerReadings
from inferload.webui.tab import attach_inference_tab

# A web UI run's results written when the run ends, not when Locust quits.
#
# With the web UI, Locust keeps serving after a run ends (the shape's end, or Stop in the UI) until
# the user quits it, usually with Ctrl-C; the results were written only then, after the signal, so a
# finished run looked like a stopped one to the user and to `inferload run` (exit 130). Here the run's
# `test_stop` writes summary.json, windows.csv and report.html at once (on a master, once every worker
# has sent a report after it stopped: its last requests), and `quitting` then only hands back that
# summary for the exit code. A run stopped by a signal is left to the `quitting` path (results marked
# interrupted), and a run started again from the UI is written again when it ends (and at the quit).
# Headless runs are unchanged: they quit when the run ends and write then.
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


# `add_arguments` and `scenario_path_from_argv` live in run.options; locustfiles import them from here too
__all__ = ["InferloadRun", "add_arguments", "scenario_path_from_argv"]

logger = logging.getLogger(__name__)


class InferloadRun:
    """One scenario run inside Locust: its classes, its recorder, its results."""

    def __init__(self, scenario: Scenario, known_models: dict[str, ModelInfo] | None = None) -> None:
        self.scenario = scenario
        #: Triton targets' (metadata, config): shipped with the locustfile (distributed runs) or read once
        self.models = ModelInfos(known_models, fetch_triton_model_info)
        scenario_dir = Path(scenario.source_path).parent if scenario.source_path else Path.cwd()
        self.user_classes: dict[str, type[InferenceUser]] = {}
        for target in scenario.targets:
            cls = user_class_for(target, scenario_dir)
            self.user_classes[cls.__name__] = cls
        self.shape_class: type[ScenarioShape] = shape_class_for(scenario)
        self.options = RunOptions()
        #: the measuring core (recorder, server readings, InfluxDB, results, exit code): made at init
        self.measured: MeasuredRun | None = None
        self.request_log: RequestLog | None = None
        self.run_id: str | None = None
        self.results_dir: Path | None = None
        self.workers: WorkerWatch | None = None  # on a distributed run's master
        self.trace: TraceRun | None = None  # the trace join (targets with ``trace``)
        #: set by the SIGINT/SIGTERM handler: the run was stopped early (summary.json "interrupted")
        self.interrupted: bool = False
        #: where changes to the servers (Triton's trace settings) are written before they are made
        self.journal = ServerJournal()
        #: a web UI run's results, written when the run ends (on a master or local run)
        self.run_end: ResultsAtRunEnd | None = None
        #: the calibration certificate that applied (summary.json "calibration"; None: none)
        self.calibration: dict[str, Any] | None = None

    @property
    def known_models(self) -> dict[str, ModelInfo]:
        return self.models.known

    # -- Locust hooks ---------------------------------------------------------------------
    def on_init(self, environment: Environment, **_: Any) -> None:
        """Check the scenario against the served models, then wire every part to the events."""
        runner = environment.runner
        is_worker = isinstance(runner, WorkerRunner)
        self.options = RunOptions.from_parsed(environment.parsed_options)
        try:  # (its secrets are taken out of the options the master sends to its workers)
            settings = sink_settings_from_options(environment.parsed_options)
        except SinkSettingsError as error:
            raise StartCheckError([f"InfluxDB: {error}"], skippable=False) from None
        if not is_worker:
            self.calibration = self.calibration_at_start(environment)
            self.run_id = self.options.run_id or default_run_id(self.scenario.name, time.time())
            self.results_dir = self.options.results_dir or Path("results") / self.run_id
            check_results_dir(self.run_id, self.results_dir, self.options.requests_csv)
            self.stable_stop_rule()  # a bad --stop-when-stable ends the run before any load
            idle = idle_targets_problem(self.scenario)
            if idle is not None:
                raise StartCheckError([idle], skippable=False)
            self.restore_leftovers()
        # on a distributed run the master checked already
        self.check_models(environment, check=not is_worker and not self.options.skip_start_checks)
        self.mark_replay_batches(environment)
        # the engine's listeners come before the recorder's: a worker's report carries what it just drained
        if not isinstance(runner, MasterRunner):  # the master sends nothing
            classes = list(self.user_classes.values())
            assign_engine(environment, classes, self.scenario.window)
            problems = engine_needed(environment, classes)
            if problems:
                raise StartCheckError(problems, skippable=False)
        self.measured = MeasuredRun(
            environment,
            self.scenario,
            run_id=self.run_id,
            results_dir=self.results_dir,
            sink=settings,
            report=not self.options.no_report,
            additions=self,
        )
        record = self.measured.recorder.record
        if is_worker:
            self.request_log = RequestLog(environment, None)
        elif self.options.requests_csv:
            assert self.results_dir is not None
            self.request_log = RequestLog(environment, self.results_dir / "requests.csv")
        attach_engine(environment, record, self.request_log, self.scenario.warmup)
        if isinstance(runner, MasterRunner):
            self.workers = WorkerWatch(runner)
            watch = self.workers
            environment.events.test_start.add_listener(lambda **_: watch.start())
        self.trace = TraceRun(environment, self.scenario, self.user_classes, settings, self.run_id, self.journal)
        ramp = self.ramp_hold_rule()  # a bad --ramp-hold ends the run before any load
        timeline = ramp_timeline(self.scenario) if ramp is not None else None
        if is_open_loop(self.scenario.shape):
            setup_open_loop(environment, self.scenario, self.user_classes.values(), record, self.workers, timeline)
        if not is_worker:
            poller = ServerWindowPoller(self.scenario, record)
            events = environment.events
            events.test_start.add_listener(lambda **_: poller.start())
            events.test_stop.add_listener(lambda **_: poller.stop())
            side = self.measured.server_side
            assert side is not None  # a master's or a local run's
            attach_inference_tab(  # the web UI's Inference tab (docs/web-ui.md); nothing without a web UI
                environment,
                self.scenario,
                record,
                lambda: ServerReadings(side.before, poller.latest, side.figures, side.errors),
                lambda: self.workers.count() if self.workers is not None else 1,
                settings,
            )
            if ramp is not None:
                self.watch_ramp_hold(environment, record, ramp, timeline)
            rule = self.stable_stop_rule()
            if rule is not None:
                stop = StableStop(environment, record, rule, tuple(t.name for t in self.scenario.targets))
                watcher: list[gevent.Greenlet] = []
                events.test_start.add_listener(lambda **_: watcher.append(gevent.spawn(stop.watch)))
                events.test_stop.add_listener(lambda **_: [g.kill(block=False) for g in watcher])
            # last: its test_stop writes a web UI run's results after every other part's test_stop
            measured = self.measured
            self.run_end = ResultsAtRunEnd(environment, lambda: measured.write(final=False), lambda: self.interrupted)

    def calibration_at_start(self, environment: Environment) -> dict[str, Any] | None:
        """The latest calibration certificate, with a warning when the load exceeds its roofline."""
        from inferload.results.calibration import calibration_at_start
        from inferload.users.engine import transport_in_use

        processes = (
            int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
            if isinstance(environment.runner, MasterRunner)
            else 1
        )
        return calibration_at_start(self.scenario, processes, transport_in_use())

    def ramp_hold_rule(self) -> RampHoldRule | None:
        """``--ramp-hold`` as a rule (None: not given); StartCheckError when it cannot be read or the
        scenario cannot ramp (not one target under a constant-rate or poisson shape)."""
        if self.options.ramp_hold is None:
            return None
        try:
            rule = parse_ramp_hold(self.options.ramp_hold)
        except ValueError as error:
            raise StartCheckError([str(error)], skippable=False) from None
        problem = ramp_problem(self.scenario)
        if problem:
            raise StartCheckError([problem], skippable=False)
        return rule

    def watch_ramp_hold(
        self, environment: Environment, record: Any, rule: RampHoldRule, timeline: AdjustableTimeline | None
    ) -> None:
        shape: Any = self.scenario.shape
        plan = RampHoldPlan(rule, float(shape.rate), self.scenario.window)
        target = self.scenario.targets[0].name
        local = None if isinstance(environment.runner, MasterRunner) else timeline
        ramp = RampHold(environment, record, plan, target, local, self.results_dir, float(shape.rate))
        events = environment.events
        watcher: list[gevent.Greenlet] = []
        events.test_start.add_listener(lambda **_: watcher.append(gevent.spawn(ramp.watch)))

        def stop(**_: Any) -> None:
            for greenlet in watcher:
                greenlet.kill(block=False)
            ramp.save()

        events.test_stop.add_listener(stop)

    def restore_leftovers(self) -> None:
        """Put back what a killed inferload left changed on this run's servers (tune's configs, trace
        settings: the journal of server changes), before the start checks read them."""
        addresses = [target.address for target in self.scenario.targets]
        self.journal.restore_leftovers(
            lambda entry: any(same_host(entry.server, address) for address in addresses), logger.warning
        )

    def stable_stop_rule(self) -> StabilityRule | None:
        """``--stop-when-stable`` as a rule (None: not given); StartCheckError when it cannot be read."""
        if self.options.stop_when_stable is None:
            return None
        try:
            return parse_stop_when_stable(self.options.stop_when_stable)
        except ValueError as error:
            raise StartCheckError([str(error)], skippable=False) from None

    def check_models(self, environment: Environment, check: bool = True) -> None:
        """Fit every Triton target's users to its model (batch dimension, output shapes) and, with
        `check`, run the start checks (`inferload.startchecks.fit`): StartCheckError, one line per problem, when
        a server cannot be reached, does not serve the model, or the tensors differ from the model's.
        Without `check`, an unreadable model is only a warning: the run goes on and counts its failures."""
        fit_to_models(environment, self.scenario, self.user_classes.values(), self.models, check)

    def mark_replay_batches(self, environment: Environment) -> None:
        """The targets a replay's rows give batch sizes of their own go through the Python transport
        (their requests are made when first asked for); StartCheckError for one whose model does not batch."""
        shape = self.scenario.shape
        if not isinstance(shape, ReplayShape):
            return
        try:
            given = {target.name for target in targets_given_batches(shape, self.scenario.targets)}
        except ReplayFileError as error:
            raise StartCheckError([f"shape.file: {error}"], skippable=False) from None
        problems = []
        for cls in self.user_classes.values():
            if cls.target.name not in given:
                continue
            if not wiring_of(environment, cls).fit.model_batches:
                problems.append(
                    f"shape.file: {Path(shape.file).name} gives target {cls.target.name!r} batch sizes other than its"
                    f" batch_size {cls.target.batch_size}, but its model takes no batch dimension (max_batch_size 0)"
                )
            wiring_of(environment, cls).replay_batches = True
        if problems:
            raise StartCheckError(problems, skippable=False)

    # -- what the run adds to the core's results (`MeasuredRun`'s additions) ---------------------
    def facts(self) -> dict[str, Any]:
        """Its workers (count, losses, refused reports), cold starts, signal, calibration and trace tails;
        the request log closed first (its rows are whole when the results are written)."""
        if self.request_log is not None:
            self.request_log.close()
        workers = self.workers
        return {
            "workers": workers.count() if workers is not None else 1,
            "cold_starts": read_cold_starts(self.options.cold_starts),
            "workers_lost": sorted(workers.lost) if workers is not None else None,
            "worker_losses": workers.loss_records() if workers is not None else None,
            "rejected_reports": self._rejected_reports() if workers is not None else None,
            "interrupted": self.interrupted,
            "calibration": self.calibration,
            "tails": self.trace.tails() if self.trace is not None else {},
        }

    def fallback_dir(self) -> Path | None:
        return self.request_log.fallback_dir if self.request_log is not None else None

    def written_at_end(self) -> RunSummary | None:
        return self.run_end.written() if self.run_end is not None else None

    def _rejected_reports(self) -> int:
        """Worker reports refused on a master (unsigned, wrong key, replayed): figures and rows."""
        refused = self.measured.recorder.rejected_reports if self.measured is not None else 0
        return refused + (self.request_log.rejected_reports if self.request_log is not None else 0)

    def exit_code(self, summary: RunSummary | Mapping[str, Any]) -> int:
        """See `inferload.run.finish.exit_code`."""
        return finish.exit_code(summary)
