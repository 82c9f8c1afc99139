"""Everything a locustfile needs to run a scenario: arguments, classes, checks, results.

A locustfile imports this, builds the classes for the scenario named on the command line, and
hands Locust's `init` event to `InferloadRun.on_init`. All state lives on the `InferloadRun`
object and the Locust environment (no module globals).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.errors import InferloadError, ModelMismatchError
from inferload.measure.request_log import RequestLog
from inferload.measure.run_record import RunRecorder
from inferload.observe.streaming import StreamingListener, add_streaming_arguments, sink_settings_from_options
from inferload.results.report import write_report
from inferload.results.slo import evaluate, format_checks, slo_section
from inferload.results.summary import build_summary, format_table, write_results
from inferload.run.model_check import check_target_against_triton, fetch_triton_model_info, triton_model_batches
from inferload.scenario.model import Scenario, Target, is_open_loop
from inferload.servermetrics import snapshots as server_stats
from inferload.servermetrics.windows import ServerWindowPoller
from inferload.traffic.arrivals import rate_timeline
from inferload.traffic.scheduler import SHARE_MESSAGE, ArrivalQueue, ArrivalScheduler, TargetArrivals
from inferload.traffic.shapes import ScenarioShape, shape_class_for
from inferload.users import InferenceUser, user_class_for
from inferload.users.base import expected_output_shapes

logger = logging.getLogger(__name__)

SCENARIO_ENV = "INFERLOAD_SCENARIO"

ModelInfo = tuple[dict[str, Any], dict[str, Any]]  # Triton model metadata and config


def scenario_path_from_argv(argv: list[str]) -> str | None:
    """The `--scenario` value (or $INFERLOAD_SCENARIO), read before Locust parses its options."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--scenario")
    known, _ = parser.parse_known_args(argv)
    return known.scenario or os.environ.get(SCENARIO_ENV)


def add_arguments(parser: Any) -> None:
    """Locust's `init_command_line_parser` hook: inferload's own options."""
    group = parser.add_argument_group("inferload")
    group.add_argument("--scenario", help="inferload scenario YAML file", env_var=SCENARIO_ENV)
    group.add_argument(
        "--results-dir",
        help="folder for summary.json and windows.csv (default results/<run id>)",
        env_var="INFERLOAD_RESULTS_DIR",
    )
    group.add_argument("--run-id", help="run identifier (default <scenario>-<UTC time>)", env_var="INFERLOAD_RUN_ID")
    group.add_argument(
        "--cold-starts",
        help="JSON file: target name -> cold start seconds, recorded in summary.json",
        env_var="INFERLOAD_COLD_STARTS",
    )
    group.add_argument(
        "--requests-csv",
        action="store_true",
        default=False,
        help="also write every request (time, target, latency, outcome, worker) to requests.csv in the results folder",
    )
    add_streaming_arguments(parser)


class InferloadRun:
    """One scenario run inside Locust: its classes, its recorder, its results."""

    def __init__(self, scenario: Scenario, known_models: dict[str, ModelInfo] | None = None) -> None:
        self.scenario = scenario
        #: Triton targets' (metadata, config), when shipped with the locustfile (distributed runs)
        self.known_models: dict[str, ModelInfo] = dict(known_models or {})
        scenario_dir = Path(scenario.source_path).parent if scenario.source_path else Path.cwd()
        self.user_classes: dict[str, type[InferenceUser]] = {}
        for target in scenario.targets:
            cls = user_class_for(target, scenario_dir)
            self.user_classes[cls.__name__] = cls
        self.shape_class: type[ScenarioShape] = shape_class_for(scenario)
        self.recorder: RunRecorder | None = None
        self.streaming: StreamingListener | None = None
        self.request_log: RequestLog | None = None
        self.run_id: str | None = None
        self.results_dir: Path | None = None
        self.workers_seen: set[str] = set()
        self.workers_lost: set[str] = set()
        self.server_before: dict[str, server_stats.ServerSnapshot] = {}
        self.server_errors: dict[str, str] = {}
        self.server_side: dict[str, dict[str, Any] | None] = {}

    # -- Locust hooks ---------------------------------------------------------------------
    def on_init(self, environment: Environment, **_: Any) -> None:
        """Check the scenario against the served models, then start recording."""
        runner = environment.runner
        self.check_models(check=not isinstance(runner, WorkerRunner))  # the master checked already
        self.recorder = RunRecorder(environment, self.scenario.warmup, self.scenario.window)
        options = environment.parsed_options
        if not isinstance(runner, WorkerRunner):
            self.run_id = getattr(options, "run_id", None) or default_run_id(self.scenario.name, time.time())
            self.results_dir = Path(getattr(options, "results_dir", None) or Path("results") / self.run_id)
        if isinstance(runner, WorkerRunner):
            self.request_log = RequestLog(environment, None)
        elif getattr(options, "requests_csv", False):
            assert self.results_dir is not None
            self.request_log = RequestLog(environment, self.results_dir / "requests.csv")
        if isinstance(runner, MasterRunner):
            environment.events.test_start.add_listener(lambda **_: gevent.spawn(self._watch_workers, runner))
        settings = sink_settings_from_options(options)
        if settings is not None:
            self.streaming = StreamingListener(environment, self.recorder.record, self.scenario, settings)
        if is_open_loop(self.scenario.shape):
            self._setup_open_loop(environment)
        if not isinstance(runner, WorkerRunner):
            poller = ServerWindowPoller(self.scenario, self.recorder.record)
            environment.events.test_start.add_listener(lambda **_: poller.start())
            environment.events.test_stop.add_listener(lambda **_: poller.stop())
            environment.events.test_start.add_listener(self._on_test_start)
            environment.events.test_stop.add_listener(self._on_test_stop)
            environment.events.quitting.add_listener(self._on_quitting)

    def _setup_open_loop(self, environment: Environment) -> None:
        """Arrival queues for every target's users, and the scheduler that fills them."""
        assert self.recorder is not None
        shape = self.scenario.shape
        runner = environment.runner
        total_weight = sum(t.weight for t in self.scenario.targets)
        targets = []
        for cls in self.user_classes.values():
            queue = ArrivalQueue(max_queue=shape.max_queue)
            cls.arrivals = queue
            targets.append(TargetArrivals(cls.target.name, cls.target.weight / total_weight, queue, shape.seed))
        scheduler = ArrivalScheduler(rate_timeline(shape, self.scenario.duration), targets, self.recorder.record)
        record = self.recorder.record
        if isinstance(runner, MasterRunner):
            environment.events.test_start.add_listener(lambda **_: self._send_shares(runner))
            return  # the master runs no users
        if isinstance(runner, WorkerRunner):
            runner.register_message(
                SHARE_MESSAGE, lambda environment, msg, **_: scheduler.set_process_share(msg.data["workers"], msg.data["index"])
            )
        else:
            scheduler.set_process_share(1, 0)
        environment.events.test_start.add_listener(lambda **_: scheduler.start(record.started_at or time.time()))
        environment.events.test_stop.add_listener(lambda **_: scheduler.stop())

    def _watch_workers(self, runner: MasterRunner) -> None:
        """Remember every worker that took part, and every one that went missing (died)."""
        while runner.state not in ("stopped", "quitting"):
            for client in list(runner.clients.values()):
                self.workers_seen.add(client.id)
                if client.state == "missing" and client.id not in self.workers_lost:
                    self.workers_lost.add(client.id)
                    logger.warning(
                        "worker %s went missing: its share of the load and its last unreported requests are lost", client.id
                    )
            gevent.sleep(0.5)

    @staticmethod
    def _send_shares(runner: MasterRunner) -> None:
        clients = [c for c in runner.clients.values() if c.state != "missing"]
        for index, client in enumerate(clients):
            runner.send_message(SHARE_MESSAGE, {"workers": len(clients), "index": index}, client_id=client.id)

    def model_info(self, target: Target) -> ModelInfo | None:
        """A Triton target's model metadata and config: shipped with the locustfile, or read now."""
        if target.name in self.known_models:
            return self.known_models[target.name]
        try:
            info = fetch_triton_model_info(target)
        except InferloadError as exc:
            logger.warning("target %r: cannot read the model's metadata (%s); going on", target.name, exc)
            return None
        self.known_models[target.name] = info
        return info

    def check_models(self, check: bool = True) -> None:
        """Fit every Triton target's users to its model (batch dimension, output shapes) and,
        with `check`, raise ModelMismatchError when the scenario's tensors differ from the model's.

        An unreachable server is only a warning: the run goes on and counts its failures.
        """
        problems: list[str] = []
        for target in self.scenario.targets:
            if target.server != "triton":
                continue
            info = self.model_info(target)
            if info is None:
                continue
            metadata, config = info
            if check:
                problems.extend(check_target_against_triton(target, metadata, config))
            cls = next(c for c in self.user_classes.values() if c.target is target)
            cls.model_batches = triton_model_batches(config)
            model_config = config.get("config", config)  # gRPC's JSON wraps it
            max_batch = int(model_config.get("max_batch_size", 0) or 0) if cls.model_batches else 0
            cls.expected_outputs = expected_output_shapes(target, metadata, max_batch)
        if problems:
            raise ModelMismatchError("\n".join(problems))

    def _on_test_start(self, **_: Any) -> None:
        self.server_before.clear()
        self.server_errors.clear()
        gevent.spawn_later(self.scenario.warmup, self._snapshot_servers, self.server_before)

    def _on_test_stop(self, **_: Any) -> None:
        after: dict[str, server_stats.ServerSnapshot] = {}
        self._snapshot_servers(after)
        for target in self.scenario.targets:
            before = self.server_before.get(target.name)
            if before is None or target.name not in after:
                self.server_side[target.name] = None
                continue
            self.server_side[target.name] = server_stats.server_side(before, after[target.name])

    def _snapshot_servers(self, into: dict[str, server_stats.ServerSnapshot]) -> None:
        for target in self.scenario.targets:
            try:
                into[target.name] = server_stats.snapshot(
                    target.kind, target.address, target.model, target.version, target.metrics_url
                )
            except InferloadError as exc:
                self.server_errors[target.name] = str(exc)
                logger.warning("target %r: server-side figures unavailable: %s", target.name, exc)

    def _on_quitting(self, environment: Environment, **_: Any) -> None:
        summary = self.write_results(environment)
        if summary is not None:
            code = self.exit_code(summary)
            if code is not None:
                environment.process_exit_code = code

    # -- results --------------------------------------------------------------------------
    def write_results(self, environment: Environment) -> dict[str, Any] | None:
        if self.recorder is None or self.recorder.record.started_at is None:
            logger.warning("the run never started: no results written")
            return None
        record = self.recorder.record
        if record.stopped_at is None:
            record.stopped_at = time.time()
        options = environment.parsed_options
        run_id = self.run_id or default_run_id(self.scenario.name, record.started_at)
        results_dir = self.results_dir or Path("results") / run_id
        runner = environment.runner
        if isinstance(runner, MasterRunner):
            self.workers_seen.update(runner.clients.keys())
            workers = len(self.workers_seen)
        else:
            workers = 1
        if self.request_log is not None:
            self.request_log.close()
        summary = build_summary(
            run_id,
            self.scenario,
            record,
            workers,
            self.server_side,
            read_cold_starts(getattr(options, "cold_starts", None)),
            slo={},
        )
        checks = evaluate(self.scenario, summary["targets"])
        summary["slo"] = slo_section(checks)
        if isinstance(runner, MasterRunner):
            summary["workers_lost"] = sorted(self.workers_lost)
        if self.streaming is not None:
            summary["streaming"] = self.streaming.close()
        try:
            write_results(results_dir, summary, record)
        except OSError as exc:  # keep what was measured: write it somewhere that works
            fallback = Path(tempfile.mkdtemp(prefix=f"inferload-{run_id}-"))
            logger.error("cannot write results to %s (%s); writing them to %s instead", results_dir, exc, fallback)
            results_dir = fallback
            write_results(results_dir, summary, record)
        try:
            print(f"report: {write_report(results_dir)}")
        except (InferloadError, OSError) as exc:
            logger.warning("report.html not written: %s", exc)
        print(f"\ninferload results ({run_id}, steady state, warm-up of {self.scenario.warmup:g} s excluded):")
        print(format_table(summary))
        print(format_checks(checks))
        print(f"results written to {results_dir}", flush=True)
        return summary

    def exit_code(self, summary: dict[str, Any]) -> int | None:
        """1 on a breached SLO or a target that never answered; 0 when failures stayed within an
        error-rate SLO; None leaves Locust's own rule (1 when anything failed)."""
        if not summary["slo"]["passed"]:
            return 1
        silent = [n for n, t in summary["targets"].items() if t["requests"] and t["requests"] == t["failures"]]
        never_sent = [n for n, t in summary["targets"].items() if not t["requests"]]
        if silent or never_sent:
            for name in silent:
                logger.error("target %r: every request failed", name)
            return 1
        with_failures = {n for n, t in summary["targets"].items() if t["failures"]}
        covered = {c["target"] for c in summary["slo"]["checks"] if c["metric"] == "error_rate"}
        if with_failures and with_failures <= covered:
            return 0
        return None


def default_run_id(scenario_name: str, started_at: float) -> str:
    stamp = datetime.fromtimestamp(started_at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario_name}-{stamp}"


def read_cold_starts(path: str | None) -> dict[str, float | None]:
    if not path:
        return {}
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        logger.warning("cannot read cold starts from %s: %s", path, exc)
        return {}
    return {str(k): (None if v is None else float(v)) for k, v in data.items()}
