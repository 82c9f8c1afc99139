"""The measuring core of every inferload run (`MeasuredRun`), and `inferload.attach`: that core on
any locustfile's own users (`AttachedRun`). The scenario run (`run.plugin.InferloadRun`) composes
the same core with its users, shape, start checks and web tab.

A locustfile that keeps its own users (plain Locust users, inferload users with tasks of their
own, or both) and Locust's own flags (``-u``, ``-t``, ``--processes``, ``--master``/``--worker``)
calls `attach` in Locust's ``init`` event and gets, for every request Locust's request event
reports:

- exact latency percentiles over all workers (HDR histograms merged on the master:
  `inferload.run.recorder.RunRecorder`, the recorder of every inferload run), per window and
  over the steady state (after ``warmup_s``);
- summary.json, windows.csv, histograms.jsonl and report.html when Locust quits (`run.finish`, the
  same writer as an inferload run's), and the console table;
- SLO checks and the exit code (`run.finish.exit_code`: 1 on a breached threshold or a target
  that never answered), from a scenario's targets' ``slo`` or the ``slo`` given;
- the per-window figures streamed to InfluxDB (`observe.influx_export.InfluxExport`) when an
  InfluxDB URL is given (``influx_url``, or the ``INFLUX_URL`` variable, with the other
  ``INFLUX_*`` variables).

attach only listens: it adds no users, no shape and no options, and it does not check servers.
What the requests are: a request named like a target (a scenario's, or an inferload user class's
``target`` in the locustfile) gets that target's entry (server, protocol, kind, model, and the
server's own figures where inferload can read them); every other request name gets an entry of
Locust's own (server ``"locust"``, protocol the request type: `results.summary.locust_entries`).

On a distributed run every process calls attach: workers send their figures with Locust's
reports, signed with the run key (``INFERLOAD_RUN_KEY``, the same on master and workers:
`measure.report_auth`), and the master writes the results.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gevent.hub import get_hub
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner
from pydantic import ValidationError

from inferload.errors import Problem, ScenarioError, StartCheckError, UsageError
from inferload.results.files import default_run_id
from inferload.run.recorder import RunRecorder
from inferload.run.results_dir import run_id_problem
from inferload.scenario.limits import MIN_WINDOW_S
from inferload.scenario.schema import RunOutline, Scenario
from inferload.scenario.targets import Slo, Target

# What only the master (or a local run) needs is imported there, when attach runs: a worker's
# Locust init waits on every import made in it, and a worker that does not answer the master's
# heartbeats for a few seconds is declared missing (seen: both workers of `--processes 2`).
if TYPE_CHECKING:
    from inferload.observe.influx_export import InfluxExport
    from inferload.observe.sink import SinkSettings
    from inferload.results.schema import RunSummary
    from inferload.run.server_side import ServerSideReadings

logger = logging.getLogger(__name__)

EXIT_USAGE = 2
#: a run's name when neither a scenario nor a locustfile names it
DEFAULT_NAME = "locust"


class RunAdditions(Protocol):
    """What a run adds to the core's results: the scenario run (`run.plugin.InferloadRun`) gives its
    workers' losses, cold starts, signal, calibration and trace tails, its request log's fallback,
    and writes a web UI run's results when that run ends."""

    def facts(self) -> dict[str, Any]:
        """`RunFacts` fields beside (or over) the core's, read as the results are written."""
        ...

    def fallback_dir(self) -> Path | None:
        """Where the results go when their folder cannot be written (`finish.write_with_fallback`)."""
        ...

    def written_at_end(self) -> RunSummary | None:
        """At quit: the results already written when the run ended (None: the quit writes them)."""
        ...


class MeasuredRun:
    """The measuring core of every inferload run, on a Locust environment's requests: the recorder
    (every process; a worker's figures go to the master with its reports), and on a master or a
    local run the servers' readings at the warm-up's end and at the stop, the per-window InfluxDB
    stream (``sink``), the results (`write`: summary.json, windows.csv, report.html, the console)
    and, when Locust quits, the exit code from them (a code someone else set, a signal's or a
    configuration error's, stands). ``outline``: the scenario, or what the figures know of a run no
    scenario shaped (`RunOutline`). The scenario run composes it (`run.plugin.InferloadRun`, with
    ``additions``); `attach` is it for any locustfile's users (`AttachedRun`)."""

    def __init__(
        self,
        environment: Environment,
        outline: Scenario | RunOutline,
        *,
        run_id: str | None,
        results_dir: Path | None,
        sink: SinkSettings | None,
        report: bool = True,
        additions: RunAdditions | None = None,
    ) -> None:
        self.environment = environment
        self.outline = outline
        self.recorder = RunRecorder(environment, outline.warmup, outline.window, tuple(t.name for t in outline.targets))
        self.run_id = run_id
        self.results_dir = results_dir
        self.report = report
        self.additions = additions
        #: the latest results written (None: none yet)
        self.summary: RunSummary | None = None
        self.influx_export: InfluxExport | None = None
        self.server_side: ServerSideReadings | None = None
        self._workers_seen: set[str] = set()
        if self.is_worker:  # a worker only records: its figures go to the master with its reports
            from inferload.run.workers import send_last_messages

            runner = environment.runner
            assert isinstance(runner, WorkerRunner)
            environment.events.quit.add_listener(lambda **_: send_last_messages(runner))
            return
        from inferload.observe.influx_export import InfluxExport
        from inferload.run.server_side import ServerSideReadings

        if sink is not None:
            self.influx_export = InfluxExport(environment, self.recorder.record, outline, sink, run_id=self.current_run_id)
        events = environment.events
        self.server_side = ServerSideReadings(outline)
        if outline.targets:
            events.test_start.add_listener(self.server_side.on_test_start)
            events.test_stop.add_listener(self.server_side.on_test_stop)
        if isinstance(environment.runner, MasterRunner):
            events.worker_report.add_listener(self._on_worker_report)
        events.quitting.add_listener(self._on_quitting)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    def current_run_id(self) -> str:
        """The run id given, else ``<name>-<UTC start>`` of the run as it stands."""
        return self.run_id or default_run_id(self.outline.name, self.recorder.record.started_at or time.time())

    def _on_worker_report(self, client_id: str, **_: Any) -> None:
        self._workers_seen.add(client_id)

    def _on_quitting(self, environment: Environment, **_: Any) -> None:
        summary = self.additions.written_at_end() if self.additions is not None else self.summary
        if summary is None:
            summary = self.write()
        if summary is None or environment.process_exit_code is not None:
            return  # a code set by someone else (a configuration error, a signal) stands
        from inferload.run import finish

        environment.process_exit_code = finish.exit_code(summary)  # the run's own figures decide

    def write(self, final: bool = True) -> RunSummary | None:
        """Write the results and return their summary (None: a worker, or a run that never started).
        ``final`` (at quit) closes the InfluxDB stream for its last figures; else (a web UI run's
        end) they are read as they stand and the stream stays open for another run."""
        if self.is_worker:
            return None
        from inferload.results.summary import RunFacts
        from inferload.run import finish

        record = self.recorder.record
        if record.started_at is None:
            logger.warning("inferload: the run never started: no results written")
            return None
        if record.stopped_at is None:
            record.stopped_at = time.time()
        run_id = self.current_run_id()
        export = self.influx_export
        facts = RunFacts(
            run_id=run_id,
            workers=max(1, len(self._workers_seen)) if isinstance(self.environment.runner, MasterRunner) else 1,
            server_side=self.server_side.figures if self.server_side is not None else {},
            streaming=None if export is None else export.close() if final else export.summary(),
            request_types=finish.request_types_by_name(self.environment.stats),
        )
        fallback = None
        if self.additions is not None:
            facts = replace(facts, **self.additions.facts())
            fallback = self.additions.fallback_dir()
        results_dir = self.results_dir or Path("results") / run_id
        self.summary = finish.finish_run(self.outline, record, facts, results_dir, report=self.report, fallback=fallback)
        return self.summary


class AttachedRun(MeasuredRun):
    """`attach`'s run: the measuring core on the requests of any locustfile's users, its outline from
    the arguments (a scenario, thresholds, warm-up, window) and the locustfile's inferload classes.

    Raises ``ScenarioError`` (a scenario file or ``slo`` that is not valid), ``StartCheckError``
    (a bad ``run_id``, ``warmup_s``, ``window_s`` or ``influx_url``) and ``RunKeyError`` (a
    distributed run without ``INFERLOAD_RUN_KEY``); `attach` turns them into exit code 2."""

    def __init__(
        self,
        environment: Environment,
        scenario: Scenario | str | Path | None = None,
        *,
        slo: Mapping[str, Slo | Mapping[str, Any]] | None = None,
        warmup_s: float | None = None,
        window_s: float | None = None,
        results_dir: str | Path | None = None,
        run_id: str | None = None,
        influx_url: str | None = None,
        report: bool = True,
    ) -> None:
        self.scenario = _load(scenario)
        on_worker = isinstance(environment.runner, WorkerRunner)
        outline = run_outline(environment, self.scenario, slo, warmup_s, window_s, on_worker)
        run_id = run_id or default_run_id(outline.name, time.time())
        # attach is called in Locust's init, often importing inferload's run modules there (seconds on a
        # busy machine) while the hub's loop does not run: its cached clock is then that far behind, and
        # every timer armed next (Locust's --run-time among them) would fire that much early
        get_hub().loop.update_now()
        sink = None
        if not on_worker:
            problem = run_id_problem(run_id)
            if problem is not None:
                raise StartCheckError([f"attach(run_id=...): {problem}"], skippable=False)
            sink = _sink_settings(influx_url)
        results = Path(results_dir) if results_dir is not None else Path("results") / run_id
        super().__init__(environment, outline, run_id=run_id, results_dir=results, sink=sink, report=report)
        get_hub().loop.update_now()  # after the imports of the master's path, as after those of the worker's

    def finish(self) -> RunSummary | None:
        """Write the results (once; Locust's ``quitting`` does it) and return the summary (None: a
        worker, or a run that never started)."""
        return self.summary if self.summary is not None else self.write()


def attach(
    environment: Environment,
    scenario: Scenario | str | Path | None = None,
    *,
    slo: Mapping[str, Slo | Mapping[str, Any]] | None = None,
    warmup_s: float | None = None,
    window_s: float | None = None,
    results_dir: str | Path | None = None,
    run_id: str | None = None,
    influx_url: str | None = None,
    report: bool = True,
) -> AttachedRun:
    """Measure every request of this Locust run the way an inferload run does (see the module docstring).

    Call it in Locust's ``init`` event, on every process of a distributed run (imported at the
    top of the locustfile, so that its modules load with it rather than inside ``init``)::

        from inferload import attach

        @events.init.add_listener
        def on_locust_init(environment, **_):
            attach(environment, slo={"tiny": {"p99_ms": 50}})

    - ``scenario``: a `Scenario` or a scenario file: its name, warm-up, window, targets (what the
      requests under their names are) and their ``slo``; its shape and users are not used;
    - ``slo``: thresholds by request name (a scenario's ``slo`` keys: ``p99_ms``, ``error_rate``,
      ``min_throughput_rps`` ...), for any request, a target's or Locust's own (given here, a
      name's thresholds replace the scenario's);
    - ``warmup_s``, ``window_s``: the warm-up left out of the steady-state figures (default: the
      scenario's, else 0) and the per-window series' window (default: the scenario's, else 1 s);
    - ``results_dir`` (default ``results/<run id>``), ``run_id`` (default ``<name>-<UTC start>``,
      the name the scenario's or the locustfile's), ``report`` (report.html too);
    - ``influx_url``: stream the per-window figures to this InfluxDB (default: ``INFLUX_URL``, if
      set; the other ``INFLUX_*`` variables give the API, database and credentials).

    An invalid argument, scenario or threshold, or a distributed run without a run key, ends the
    process with exit code 2 and one line per problem (this is a locustfile's edge);
    `AttachedRun` raises them instead."""
    try:
        return AttachedRun(
            environment,
            scenario,
            slo=slo,
            warmup_s=warmup_s,
            window_s=window_s,
            results_dir=results_dir,
            run_id=run_id,
            influx_url=influx_url,
            report=report,
        )
    except UsageError as error:  # ScenarioError, StartCheckError, RunKeyError ...: exit 2, as the CLI's
        sys.stderr.write(f"inferload.attach: {error}\n")
        sys.exit(EXIT_USAGE)


def run_outline(
    environment: Environment,
    scenario: Scenario | None,
    slo: Mapping[str, Slo | Mapping[str, Any]] | None,
    warmup_s: float | None,
    window_s: float | None,
    on_worker: bool = False,
) -> RunOutline:
    """The run as its figures see it: name, warm-up, window, the known targets, the thresholds by name
    (``on_worker``: the locustfile's inferload classes are not looked at, only the master uses them)."""
    warmup = _seconds("warmup_s", warmup_s, scenario.warmup if scenario is not None else 0.0, minimum=0.0)
    window = _seconds("window_s", window_s, scenario.window if scenario is not None else 1.0, minimum=MIN_WINDOW_S)
    targets: dict[str, Target] = {t.name: t for t in scenario.targets} if scenario is not None else {}
    for target in [] if on_worker else class_targets(environment):
        targets.setdefault(target.name, target)  # a scenario's target of the same name describes it
    thresholds = {name: target.slo for name, target in targets.items() if target.slo is not None}
    thresholds.update(_thresholds(slo))
    name = scenario.name if scenario is not None else _locustfile_name(environment)
    return RunOutline(name=name, warmup=warmup, window=window, targets=tuple(targets.values()), slo=thresholds)


def class_targets(environment: Environment) -> list[Target]:
    """The targets of the inferload user classes this run may spawn (a target written without an
    address: its address from the run's host; skipped when there is none, the first user says so)."""
    from inferload.users.base import InferenceUser

    found = []
    for cls in environment.user_classes:
        if not (isinstance(cls, type) and issubclass(cls, InferenceUser)) or cls.abstract:
            continue
        try:
            found.append(cls.target_for_host(environment.host or cls.host))
        except TypeError:
            continue
    return found


def _load(scenario: Scenario | str | Path | None) -> Scenario | None:
    if scenario is None or isinstance(scenario, Scenario):
        return scenario
    from inferload.scenario.loader import load_scenario

    return load_scenario(scenario)


def _seconds(name: str, given: float | None, default: float, minimum: float) -> float:
    if given is None:
        return default
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given) or given < minimum:
        raise StartCheckError(
            [f"attach({name}=...): expected a number of seconds of at least {minimum:g}; got {given!r}"], skippable=False
        )
    return float(given)


def _thresholds(slo: Mapping[str, Slo | Mapping[str, Any]] | None) -> dict[str, Slo]:
    """``slo`` checked: a Slo per request name (ScenarioError: every problem at its key)."""
    if slo is None:
        return {}
    from inferload.scenario.loader import problems_from_validation_error

    label = "attach(slo=...)"
    if not isinstance(slo, Mapping):
        raise ScenarioError([Problem(label, "", f"expected a mapping of request name -> thresholds; got {type(slo).__name__}")])
    checked: dict[str, Slo] = {}
    problems: list[Problem] = []
    for name, thresholds in slo.items():
        where = f"slo[{name!r}]"
        if isinstance(thresholds, Slo):
            checked[str(name)] = thresholds
            continue
        try:
            checked[str(name)] = Slo.model_validate(thresholds)
        except ValidationError as error:
            found = problems_from_validation_error(error, label, {"slo": thresholds}, prefix=("slo",))
            problems += [Problem(label, where + p.key_path.removeprefix("slo"), p.message) for p in found]
    if problems:
        raise ScenarioError(problems)
    return checked


def _sink_settings(influx_url: str | None) -> SinkSettings | None:
    from inferload.observe.sink import SinkSettingsError, settings_from_mapping

    try:
        return settings_from_mapping({"url": influx_url})
    except SinkSettingsError as error:
        messages = "; ".join(f"{key}: {message}" for key, message in error.problems)
        raise StartCheckError([f"attach(influx_url=...) or the INFLUX_* variables: {messages}"], skippable=False) from None


def _locustfile_name(environment: Environment) -> str:
    """The locustfile's name (``my_locustfile`` for my_locustfile.py), the run's name without a scenario."""
    options = environment.parsed_options
    locustfile = getattr(options, "locustfile", None) if options is not None else None
    if isinstance(locustfile, str) and locustfile and locustfile != "-":
        stem = Path(locustfile.split(",")[0]).stem
        if stem and run_id_problem(stem) is None:
            return stem
    return DEFAULT_NAME
