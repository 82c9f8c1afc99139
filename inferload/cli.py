"""The `inferload` command: demo, run, validate, servers, sweep, tune, trace-to-replay, ...

Exit codes (docs/operations.md): 0 passed; 1 an SLO breach, failed requests or another error;
2 every usage error (a bad option, argument or input file, found before anything starts: argparse's
own errors, and every `inferload.errors.UsageError`); 128 + N when signal N cut the command short.
`main` is the one place an error becomes an exit code: each error class carries its own
(`InferloadError.exit_code`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Container, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from inferload.errors import EXIT_USAGE, InferloadError, ScenarioError, StoppedBeforeStart, UsageError
from inferload.launch.child_processes import ChildProcesses, locust_arguments
from inferload.run import cli_values, early_signals
from inferload.scenario.limits import DEMO_CAPACITY_RUNS, MAX_USERS

#: `inferload run --worker-wait`: how long a headless master waits for all its workers to join
DEFAULT_WORKER_WAIT_S = 120.0
#: `inferload run --repeat`: the most repetitions
MAX_REPEAT = 1_000
#: Locust options after `--` that the scenario or the CLI decides: Locust would ignore them, or
#: they would break the run (option -> where its setting lives)
REFUSED_LOCUST_OPTIONS = {
    "-u": "the scenario's shape (shape.users, ...)",
    "--users": "the scenario's shape (shape.users, ...)",
    "-r": "the scenario's shape (spawn_rate)",
    "--spawn-rate": "the scenario's shape (spawn_rate)",
    "-t": "the scenario's duration",
    "--run-time": "the scenario's duration",
    "-i": "the scenario's duration",
    "--iterations": "the scenario's duration",
    "-f": "inferload run (its own locustfile)",
    "--locustfile": "inferload run (its own locustfile)",
    "--scenario": "inferload run's SCENARIO argument",
    "--master": "inferload run --workers / --remote-workers",
    "--worker": "inferload worker",
    "--results-dir": "inferload run --out",
}


class CommandParser(argparse.ArgumentParser):
    """argparse that answers a mistake with one line naming it, and exit code 2; an option the named
    command does not take is named by that command (``inferload calibrate: unrecognized arguments``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    #: each command's own parser (`build_parser` fills it)
    commands: Mapping[str, argparse.ArgumentParser]

    def parse_command_line(self, argv: list[str]) -> argparse.Namespace:
        args, unknown = self.parse_known_args(argv)
        if unknown:
            named = self.commands.get(getattr(args, "command", None) or "", self)
            named.error(f"unrecognized arguments: {' '.join(unknown)}")
        return args


#: commands whose options live in modules slow to import (numpy, the pydantic schemas: a second of CPU
#: together): each is listed by its help here, and its options are read only when the command line
#: names it (command -> module, the function that adds its parser, its help)
SLOW_TO_IMPORT_COMMANDS: dict[str, tuple[str, str, str]] = {
    "sweep": (
        "inferload.tune.sweep_cli",
        "add_sweep_parser",
        "step the load (users or req/s) until the SLO breaks, errors start, throughput plateaus or the generator"
        " is the limit; or --find-max-rps: the highest rate that meets the SLO",
    ),
    "tune": (
        "inferload.tune.tune_cli",
        "add_tune_parser",
        "the seeds' tuning loop on Triton and TorchServe: baseline, batching, more instances/workers, each scored by"
        " its capacity under --slo; names each server's best config",
    ),
    "trace-to-replay": (
        "inferload.observe.recording",
        "add_trace_to_replay_parser",
        "turn Triton's trace files or a JSON-lines access log into a replay file (shape kind: replay),"
        " with the recording's rate over time and burstiness",
    ),
    "calibrate": (
        "inferload.calibrate.command",
        "add_calibrate_parser",
        "certify inferload's own figures on this machine against the reference server (docs/calibration.md)",
    ),
}


def named_command(argv: list[str]) -> str | None:
    """The command the arguments name (the first that is not an option), if any."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(named: Container[str] | None = None) -> CommandParser:
    """Every command's parser; with ``named`` (the command line's command, or none), the commands of
    SLOW_TO_IMPORT_COMMANDS not in it know just their help."""
    parser = CommandParser(
        prog="inferload",
        description="Load testing for ML inference servers (Triton, TorchServe, KServe, BentoML and OpenAI-compatible LLM servers) on Locust.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices  # the same dict: the commands added below are in it

    demo = sub.add_parser(
        "demo",
        help="compare Triton and TorchServe on the sample model (--llm: the built-in LLM on llama.cpp, Triton and KServe),"
        " on local servers, offline",
    )
    demo.add_argument("--out", type=Path, help="results folder (default results/demo-<UTC time>)")
    demo.add_argument(
        "--llm",
        action="store_true",
        help="the generative demo: the built-in LLM served by llama.cpp, Triton (generate_stream) and KServe (OpenAI routes),"
        " side by side, and each server's max goodput rate (docs/llm.md)",
    )
    demo.add_argument(
        "--users",
        type=cli_values.whole_number(1, MAX_USERS),
        default=None,
        help="concurrent users in the steady phase (default 8; --llm: 4)",
    )
    seconds = cli_values.finite_number(0.0, above=True, high=cli_values.MAX_WAIT_S)
    demo.add_argument("--steady", type=seconds, default=None, help="seconds of steady load per server (default 20; --llm: 15)")
    demo.add_argument("--burst", type=seconds, default=None, help="seconds of bursty load per server (default 20; not --llm)")
    demo.add_argument(
        "--warmup",
        type=cli_values.wait_seconds,
        default=None,
        help="seconds of warm-up before each phase, excluded (default 5; --llm: 3)",
    )
    demo.add_argument("--model", default=None, choices=["cnn", "tiny"], help="sample model (default cnn; not --llm)")
    demo.add_argument(
        "--capacity-p99",
        type=cli_values.finite_number(0.0),
        default=None,
        metavar="MS",
        help="close with each server's capacity under p99 <= MS, as configured (default 100; 0 skips it; not --llm)",
    )
    demo.add_argument(
        "--max-tokens",
        type=cli_values.whole_number(1, 4096),
        default=None,
        metavar="N",
        help="--llm: tokens an answer (default 32)",
    )
    demo.add_argument(
        "--ttft",
        type=cli_values.finite_number(0.0, above=True),
        default=None,
        metavar="MS",
        help="--llm: a good request's first token within MS (default 250)",
    )
    demo.add_argument(
        "--tpot",
        type=cli_values.finite_number(0.0, above=True),
        default=None,
        metavar="MS",
        help="--llm: a good request's time per output token within MS (default 25)",
    )
    demo.add_argument(
        "--goodput",
        type=cli_values.finite_number(0.0, high=100.0),
        default=None,
        metavar="PCT",
        help="--llm: close with each server's highest rate with at least PCT %% good requests (default 90; 0 skips it)",
    )
    demo.add_argument(
        "--capacity-runs",
        type=cli_values.whole_number(1, 50),
        default=None,
        metavar="N",
        help=f"the most runs of each server's capacity search (default {DEMO_CAPACITY_RUNS}; --llm: 5; fewer: a rougher answer"
        " sooner)",
    )
    demo.add_argument(
        "--servers",
        default=None,
        metavar="LIST",
        help="comma list of the servers compared, one at a time: triton, torchserve, kserve, bentoml (default triton,torchserve;"
        " see docs/comparing-servers.md); --llm: llamacpp, triton, kserve (default all three)",
    )

    run = sub.add_parser("run", help="run a scenario with Locust (web UI, or --headless)")
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument("--headless", action="store_true", help="no web UI: run, print the figures, exit")
    run.add_argument("--out", type=Path, help="results folder (default results/<run id>)")
    run.add_argument("--run-id", help="run identifier (default <scenario>-<UTC time>)")
    run.add_argument(
        "--workers",
        type=cli_values.local_workers,
        default=0,
        metavar="N",
        help="run Locust's master and N local worker processes (default 0: one process; at most 4 per CPU core)",
    )
    run.add_argument(
        "--remote-workers",
        type=cli_values.remote_workers,
        default=0,
        metavar="M",
        help="also wait for M workers started on other machines with `inferload worker`",
    )
    run.add_argument(
        "--master-bind-host",
        type=cli_values.listen_host,
        default="127.0.0.1",
        help="address the master listens on for workers (default 127.0.0.1; 0.0.0.0 for other machines)",
    )
    run.add_argument(
        "--master-port",
        type=cli_values.port,
        default=None,
        help="master port for workers (default: a free port; 5557 is Locust's)",
    )
    run.add_argument("--requests-csv", action="store_true", help="also write every request to requests.csv")
    run.add_argument(
        "--skip-start-checks",
        action="store_true",
        help="send load without checking first that every target's server answers and serves its model as the scenario"
        " sends it (by default a problem there exits 2 before any load)",
    )
    run.add_argument(
        "--web-host",
        type=cli_values.listen_host,
        default="127.0.0.1",
        help="address Locust's web UI listens on (default 127.0.0.1, this machine only; 0.0.0.0 exposes it: "
        "add Locust's --web-login after --)",
    )
    run.add_argument(
        "--worker-wait",
        type=cli_values.wait_seconds,
        default=DEFAULT_WORKER_WAIT_S,
        metavar="SECONDS",
        help=f"headless master: exit 2 when not every worker joined after SECONDS (default {DEFAULT_WORKER_WAIT_S:g})",
    )
    run.add_argument(
        "--repeat",
        type=cli_values.whole_number(1, MAX_REPEAT),
        default=1,
        metavar="N",
        help="headless: run N times (repeat-01/ ...) and write repeat.json, each figure's mean with its 95 %% interval;"
        " `inferload compare A B --fail-on p99:+10%%` then tells a change from the noise",
    )
    run.add_argument(
        "--calibration",
        metavar="FILE",
        help="the calibration certificate to apply (default: the latest `inferload calibrate` wrote, if any; `none`: no"
        " certificate); a load above its roofline is warned about at start (docs/calibration.md)",
    )
    run.epilog = "Options after -- go to Locust unchanged, e.g. inferload run s.yaml --headless -- --loglevel WARNING"

    for name, (module, adder, help_text) in SLOW_TO_IMPORT_COMMANDS.items():
        if named is None or name in named:
            getattr(importlib.import_module(module), adder)(sub, help_text)
        else:
            sub.add_parser(name, help=help_text)

    validate = sub.add_parser("validate", help="check scenario files; exit 2 with one line per problem")
    validate.add_argument("scenarios", type=Path, nargs="+", metavar="SCENARIO")

    compare = sub.add_parser("compare", help="two runs side by side: each figure in A and B, B - A and the change in %%")
    compare.add_argument("a", type=Path, metavar="A", help="results folder or summary.json (before)")
    compare.add_argument("b", type=Path, metavar="B", help="results folder or summary.json (after)")
    compare.add_argument("--json", action="store_true", dest="as_json", help="print JSON instead of a table")
    compare.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="FIGURE:±P%",
        help="exit 1 when FIGURE changed by more than P %% beyond the noise (its whole 95 %% interval), e.g."
        " p99:+10%% or throughput:-5%%; figures p50 p90 p95 p99 p999 mean throughput error_rate (exit 2 when the"
        " runs have no target in common: nothing would be gated)",
    )
    compare.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="A_NAME=B_NAME",
        help="compare (and gate) target A_NAME of run A with target B_NAME of run B (a renamed target); repeatable",
    )

    report = sub.add_parser(
        "report",
        help="(re)write report.html in a results folder; with --from/--to/--workers: exact percentiles over that range",
    )
    report.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", nargs="?", help="a results folder")
    report.add_argument("--from", dest="t_from", metavar="T", help="range start: seconds after the run's start, or ISO-8601")
    report.add_argument("--to", dest="t_to", metavar="T", help="range end: seconds after the run's start, or ISO-8601")
    report.add_argument("--workers", dest="range_workers", metavar="W,...", help="only these workers (requests.csv's ids)")
    report.add_argument("--json", action="store_true", dest="as_json", help="with a range: print JSON")
    report.add_argument(
        "--influx-url",
        help="read the range's window histograms from this InfluxDB (v1 /query; INFLUX_TOKEN or INFLUX_USER/"
        "INFLUX_PASSWORD from the environment) instead of RESULTS_DIR",
    )
    report.add_argument("--influx-db", help="with --influx-url: the database (default inferload)")
    report.add_argument("--run-id", help="with --influx-url: the run (default: RESULTS_DIR's summary.json run_id)")

    worker = sub.add_parser(
        "worker",
        help="a Locust worker for a master started with `inferload run --remote-workers`; needs INFERLOAD_RUN_KEY "
        "(the master's run key) and runs the master's locustfile only when it is signed with it",
    )
    worker.add_argument("--master-host", required=True, type=cli_values.connect_host, help="the master's address")
    worker.add_argument("--master-port", type=cli_values.port, default=5557, help="the master's port (default 5557)")

    restore = sub.add_parser(
        "restore",
        help="put back what an inferload that was killed left changed on a server (tune's model configs, a run's Triton"
        " trace settings), from the journal of server changes",
    )
    restore.add_argument(
        "--journal",
        type=Path,
        help="the journal's folder (default $INFERLOAD_JOURNAL_DIR, else $XDG_STATE_HOME/inferload/server-changes,"
        " else ~/.local/state/inferload/server-changes)",
    )
    restore.add_argument("--list", action="store_true", dest="list_only", help="list the journal's entries, change nothing")

    servers = sub.add_parser(
        "servers",
        help="the local servers (up, down, status): Triton and TorchServe of the embedded default; KServe, BentoML, llama.cpp",
    )
    servers.add_argument("action", choices=["up", "down", "status"])
    servers.add_argument(
        "--state-dir", type=Path, default=None, help="where pids, logs and state.json live (default .inferload/servers)"
    )
    servers.add_argument("--ports", default=None, help="comma list name=port, e.g. triton_grpc=9001,ts_inference=9080")
    servers.add_argument(
        "--only", choices=["triton", "torchserve", "bentoml", "kserve", "llamacpp"], help="start only this server"
    )
    servers.add_argument(
        "--servers",
        default=None,
        metavar="LIST",
        help="comma list of the servers `up` starts: triton, torchserve, kserve, bentoml, llamacpp (default"
        " triton,torchserve; kserve and bentoml make their own virtual environment on first use; llamacpp serves the"
        " built-in LLM on port 8085, scenarios/llm-chat.yaml's)",
    )
    servers.add_argument(
        "--host",
        type=cli_values.listen_host,
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else exposes the servers beyond this machine)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    # a stop signal from here until the command's own handlers is held for them (early_signals):
    # building the parser imports the named command's modules (up to a second)
    release = early_signals.hold()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), release)
    finally:
        release()


def _main(argv: list[str], release: Callable[[], None]) -> int:
    locust_args: list[str] = []
    if "--" in argv:  # everything after -- is for Locust
        argv, locust_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    command = named_command(argv)
    parser = build_parser(named=() if command is None else (command,))
    args = parser.parse_command_line(argv)  # a bad option: one line and exit 2 (CommandParser.error)
    args.locust_args = locust_args
    if args.command not in COMMANDS_WITH_CHILDREN:  # Python's own handlers from now on; a signal held so far stops it
        release()
        held = early_signals.take()
        if held:
            print(f"inferload: {StoppedBeforeStart(held[0])}", file=sys.stderr)
            return 128 + held[0]
    try:
        return run_command(parser, args)
    except ScenarioError as exc:  # one line per problem, each naming the file and the key path
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return exc.exit_code
    except InferloadError as exc:  # the one place an error becomes an exit code
        print(f"{error_prefix(args.command)}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("inferload: interrupted", file=sys.stderr)
        return 130


#: the commands whose Locust processes (or steps) take the stop signals soon after they start (`ChildProcesses`,
#: `StopSignals`); not demo: its servers start first, and a Ctrl-C meanwhile stops it at once
COMMANDS_WITH_CHILDREN = frozenset({"run", "sweep", "tune", "worker"})


def error_prefix(command: str) -> str:
    """How an error line starts: ``inferload sweep:`` for the commands that run long, else ``inferload:``."""
    return f"inferload {command}" if command in ("sweep", "tune", "worker", "restore") else "inferload"


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the parsed command; errors are raised (`main` turns them into exit codes)."""
    if args.command != "run" and args.locust_args:
        raise UsageError(f"options after -- go to Locust and only `inferload run` takes them; got {args.locust_args}")
    if args.command == "validate":
        return cmd_validate(args.scenarios)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "sweep":
        from inferload.tune.sweep_cli import cmd_sweep

        return cmd_sweep(args)
    if args.command == "tune":
        from inferload.tune.tune_cli import cmd_tune

        return cmd_tune(args)
    if args.command == "trace-to-replay":
        from inferload.observe.recording import cmd_trace_to_replay

        return cmd_trace_to_replay(args)
    if args.command == "calibrate":
        from inferload.calibrate.command import cmd_calibrate

        return cmd_calibrate(args)
    if args.command == "servers":
        return cmd_servers(args)
    if args.command == "worker":
        return cmd_worker(args)
    if args.command == "restore":
        return cmd_restore(args.journal, args.list_only)
    if args.command == "compare":
        from inferload.results.compare import main_compare

        return main_compare(args.a, args.b, args.as_json, args.fail_on, args.rename)
    if args.command == "report":
        if args.influx_url is not None:
            from inferload.observe.influx_range import cmd_report_influx

            return cmd_report_influx(args)
        if args.results_dir is None:
            parser.error("report: give RESULTS_DIR, or --influx-url with --run-id")
        if args.as_json and not (args.t_from or args.t_to or args.range_workers):
            parser.error("report: --json prints a range's figures: give --from, --to or --workers")
        if args.t_from or args.t_to or args.range_workers:
            from inferload.results.histograms import main_range

            return main_range(args.results_dir, args.t_from, args.t_to, args.range_workers, args.as_json)
        from inferload.results.report import main_report

        return main_report(args.results_dir)
    if args.command == "demo":
        return cmd_demo(args)
    parser.error(f"unknown command {args.command!r}")


#: the demo's options that only one of its two parts takes (the other refuses them, naming them)
TENSOR_DEMO_ONLY = {"burst": "--burst", "model": "--model", "capacity_p99": "--capacity-p99"}
LLM_DEMO_ONLY = {"max_tokens": "--max-tokens", "ttft": "--ttft", "tpot": "--tpot", "goodput": "--goodput"}


def cmd_demo(args: argparse.Namespace) -> int:
    from inferload.run.results_dir import unwritable_problem

    foreign = TENSOR_DEMO_ONLY if args.llm else LLM_DEMO_ONLY
    given = [flag for key, flag in foreign.items() if getattr(args, key) is not None]
    if given:
        part = "the LLM demo (--llm)" if args.llm else "the sample model's demo (without --llm)"
        raise UsageError(f"{', '.join(given)}: not an option of {part}")
    if args.out is not None and (problem := unwritable_problem(args.out)):
        raise UsageError(f"--out: {problem}")
    if args.llm:
        return llm_demo(args)
    from inferload.local.demo import DemoSettings, demo_server, run_demo
    from inferload.local.models.build import ensure_models

    try:
        compared = parse_servers(args.servers, "--servers")
        for name in compared:
            demo_server(name)
    except ValueError as exc:
        raise UsageError(f"--servers: {exc}") from None
    model = args.model or "cnn"
    ensure_models((model,))  # first use: build the sample model
    capacity_p99 = 100.0 if args.capacity_p99 is None else args.capacity_p99
    return run_demo(
        DemoSettings(
            out=args.out,
            users=args.users or 8,
            steady_s=args.steady or 20.0,
            burst_s=args.burst or 20.0,
            warmup_s=5.0 if args.warmup is None else args.warmup,
            model=model,
            capacity_p99_ms=capacity_p99 if capacity_p99 > 0 else None,
            capacity_runs=args.capacity_runs or DEMO_CAPACITY_RUNS,
            servers=compared,
        )
    )


def llm_demo(args: argparse.Namespace) -> int:
    """`inferload demo --llm`: its settings from the options (the defaults of `LlmDemoSettings`)."""
    from inferload.local.demo_llm import DEFAULT_LLM_SERVERS, LlmDemoSettings, llm_server, run_llm_demo

    names = (
        DEFAULT_LLM_SERVERS
        if args.servers is None
        else tuple(dict.fromkeys(n.strip() for n in args.servers.split(",") if n.strip()))
    )
    try:
        if not names:
            raise ValueError("no server named")
        for name in names:
            llm_server(name)
    except ValueError as exc:
        raise UsageError(f"--servers: {exc}") from None
    given = {
        "capacity_runs": args.capacity_runs,
        "users": args.users,
        "steady_s": args.steady,
        "warmup_s": args.warmup,
        "max_tokens": args.max_tokens,
        "ttft_ms": args.ttft,
        "tpot_ms": args.tpot,
    }
    settings = LlmDemoSettings(
        out=args.out,
        servers=names,
        **{key: value for key, value in given.items() if value is not None},
    )
    if args.goodput is not None:
        settings = replace(settings, goodput_pct=args.goodput if args.goodput > 0 else None)
    return run_llm_demo(settings)


def cmd_validate(paths: list[Path]) -> int:
    from inferload.scenario.loader import load_scenario

    failed = False
    for path in paths:
        try:
            load_scenario(path)
        except ScenarioError as exc:
            failed = True
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        print(f"{path}: ok")
    return EXIT_USAGE if failed else 0


def refused_locust_option(locust_args: list[str]) -> str | None:
    """Why a Locust option after `--` is refused (the scenario or the CLI sets it), or None."""
    for arg in locust_args:
        name = arg.split("=", 1)[0]
        short = name[:2] if len(name) > 2 and name.startswith("-") and not name.startswith("--") else name
        where = REFUSED_LOCUST_OPTIONS.get(name) or REFUSED_LOCUST_OPTIONS.get(short)
        if where is not None:
            return f"{name} after --: inferload sets it from {where}; Locust's own would be ignored or break the run"
    return None


def influx_problem(locust_args: list[str]) -> str | None:
    """What is wrong with the InfluxDB settings of a run (its `--influx-*` options after `--` and the
    INFLUX_* variables), or None: found before Locust starts."""
    from inferload.observe.sink import OPTIONS, SinkSettingsError, settings_from_mapping

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for key, option in OPTIONS.items():
        parser.add_argument(option, dest=key)
    given, _ = parser.parse_known_args(locust_args)
    try:
        settings_from_mapping(vars(given))
    except SinkSettingsError as error:
        return f"InfluxDB: {error}"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from inferload.scenario.loader import load_scenario

    refused_option = refused_locust_option(args.locust_args) or influx_problem(args.locust_args)
    if refused_option:
        raise UsageError(refused_option)
    if args.master_port is not None and not (args.workers or args.remote_workers):
        raise UsageError("--master-port: only with --workers or --remote-workers (a distributed run)")
    scenario = load_scenario(args.scenario)
    if args.calibration:
        from inferload.results.calibration import CALIBRATION_ENV, NO_CALIBRATION

        if args.calibration != NO_CALIBRATION and not Path(args.calibration).is_file():
            raise UsageError(f"--calibration {args.calibration}: no such file")
        # the run's Locust processes read it (`inferload.results.calibration.latest_calibration`)
        os.environ[CALIBRATION_ENV] = (
            NO_CALIBRATION if args.calibration == NO_CALIBRATION else str(Path(args.calibration).resolve())
        )
    refused = results_problem(args, scenario.name)
    if refused:
        raise UsageError(refused)
    if args.repeat != 1:
        from inferload.tune.tune_cli import cmd_run_repeated

        return cmd_run_repeated(args, scenario.name, run_once)
    return run_once(args, scenario)


def run_once(args: argparse.Namespace, scenario: Any) -> int:
    """One run of a validated scenario as the options say (local or distributed)."""
    extra = list(args.locust_args) + (["--requests-csv"] if args.requests_csv else [])
    extra += ["--skip-start-checks"] if args.skip_start_checks else []
    if not args.workers and not args.remote_workers:
        web = [] if args.headless else ["--web-host", args.web_host]  # before `extra`: a --web-host after -- wins
        # signals go to Locust, which writes the results before it exits (a web UI run's at its end: Ctrl-C quits)
        with ChildProcesses(signal_is_quit=not args.headless) as children:
            children.start_locust(locust_arguments(args.scenario, args.headless, args.out, args.run_id, web + extra))
            return children.wait()

    from datetime import datetime, timezone

    from inferload.launch.distributed import DistributedRun, run_distributed

    run_id = args.run_id or f"{scenario.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    return run_distributed(  # RunKeyError (exit 2): workers on other machines and no key to give them
        DistributedRun(
            scenario=scenario,
            results_dir=args.out or Path("results") / run_id,
            run_id=run_id,
            local_workers=args.workers,
            remote_workers=args.remote_workers,
            headless=args.headless,
            master_bind_host=args.master_bind_host,
            master_port=args.master_port,
            locust_args=extra,
            worker_wait_s=args.worker_wait,
            web_host=args.web_host,
        )
    )


def cmd_worker(args: argparse.Namespace) -> int:
    """Download the master's locustfile, run it only when it is signed with this machine's run key."""
    import tempfile

    from inferload.launch.distributed import fetch_verified_locustfile, worker_command
    from inferload.run.run_key import require_run_key

    key = require_run_key("a worker")  # RunKeyError: exit 2
    with tempfile.TemporaryDirectory(prefix="inferload-worker-") as folder:
        # LocustfileNotTrusted (exit 2): the master's locustfile is not signed with this machine's key
        locustfile = fetch_verified_locustfile(args.master_host, args.master_port, key, Path(folder))
        with ChildProcesses() as children:  # Ctrl-C: the worker sends its last report, then quits
            children.start(worker_command(args.master_host, args.master_port, str(locustfile)), lead=True)
            return children.wait()


def cmd_restore(folder: Path | None, list_only: bool) -> int:
    """Put back every change the journal holds whose process is gone (newest first); 1 when one could not be."""
    from inferload.run.server_changes import JournalEntry, ServerJournal

    if folder is not None and folder.exists() and not folder.is_dir():
        raise UsageError(f"--journal: expected the journal's folder; got a file: {folder}")
    journal = ServerJournal(folder.absolute() if folder is not None else None)
    entries = journal.entries()
    if not entries:
        print(f"inferload restore: nothing to put back (journal: {journal.folder})")
        return 0
    failed = 0
    for entry in entries:
        if not isinstance(entry, JournalEntry):
            failed += 1
            print(f"inferload restore: {entry}", file=sys.stderr)
        elif entry.owner.state() == "running":
            print(f"inferload restore: {entry.describe()}: in use by `{entry.owner.command}` (pid {entry.owner.pid}); left alone")
        elif entry.owner.state() == "elsewhere":
            print(f"inferload restore: {entry.describe()}: changed from host {entry.owner.host}; run `inferload restore` there")
        elif list_only:
            print(f"inferload restore: {entry.describe()}: {entry.left_by()}; to put back")
    if not list_only:
        failed += journal.restore_leftovers(None, print)
    return 1 if failed else 0


def results_problem(args: argparse.Namespace, scenario_name: str) -> str | None:
    """A `--run-id` that names no folder, or (when the run writes there from its start: `--workers`,
    `--requests-csv`) a results folder that cannot be written: found before any load is sent."""
    from inferload.run.results_dir import not_a_folder_problem, run_id_problem, unwritable_problem

    if args.run_id is not None and run_id_problem(args.run_id):
        return f"--run-id: {run_id_problem(args.run_id)}"
    if not (args.workers or args.remote_workers or args.requests_csv):
        # the results are written at the end, to a temporary folder if --out fails then; a file in
        # the way of --out can never be one, so it is refused before anything starts
        in_the_way = not_a_folder_problem(args.out) if args.out else None
        return f"--out: {in_the_way}" if in_the_way else None
    folder = args.out or Path("results") / (args.run_id or scenario_name)
    problem = unwritable_problem(folder if args.out else folder.parent)
    return f"{'--out' if args.out else 'results'}: {problem}" if problem else None


def parse_ports(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    ports: dict[str, int] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not value.isdigit() or not 0 < int(value) < 65536:
            raise UsageError(f"--ports: expected name=port with a port in 1..65535; got {item!r}")
        if name.strip() in ports:
            raise UsageError(f"--ports: {name.strip()} is given twice; expected each name once")
        ports[name.strip()] = int(value)
    return ports


def shared_ports(ports: dict[str, int]) -> str | None:
    """Which names share a port (``triton_grpc and triton_http both 9001``); None when every port is its own."""
    by_port: dict[int, list[str]] = {}
    for name, port in ports.items():
        by_port.setdefault(port, []).append(name)
    shared = [f"{' and '.join(names)} both {port}" for port, names in by_port.items() if len(names) > 1]
    return "; ".join(shared) or None


def parse_servers(text: str | None, flag: str) -> tuple[str, ...]:
    """``triton,kserve`` → ('triton', 'kserve'); None → the default pair; an unknown name is an InferloadError."""
    from inferload.local.servers.manager import KNOWN_SERVERS, SERVERS

    if text is None:
        return SERVERS
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in KNOWN_SERVERS]
    if not names:
        raise UsageError(f"{flag}: expected a comma list of {', '.join(KNOWN_SERVERS)}; got {text!r}")
    if unknown:
        raise UsageError(f"{flag}: unknown server(s) {unknown}; expected a comma list of {', '.join(KNOWN_SERVERS)}")
    return names


def cmd_servers(args: argparse.Namespace) -> int:
    from inferload.local.servers.manager import LocalServers, state_dir_problem
    from inferload.local.servers.ports import ServerPorts
    from inferload.paths import DEFAULT_STATE_DIR

    defaults = ServerPorts().to_dict()
    overrides = parse_ports(args.ports)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise UsageError(f"--ports: unknown name(s) {unknown}; expected some of {sorted(defaults)}")
    clash = shared_ports({**defaults, **overrides})
    if clash:
        raise UsageError(f"--ports: one port per server endpoint; {clash}")
    if args.only and args.servers is not None:
        raise UsageError(f"--only {args.only} and --servers {args.servers}: give one (--only X is --servers X)")
    which = (args.only,) if args.only else parse_servers(args.servers, "--servers")  # before anything is made
    state_dir = (args.state_dir or DEFAULT_STATE_DIR).absolute()  # the servers start in other folders
    problem = state_dir_problem(state_dir)
    if problem is None and args.action == "up":  # `up` writes there: pids, logs, state.json
        from inferload.run.results_dir import unwritable_problem

        problem = unwritable_problem(state_dir, "the servers' state")
    if problem:
        raise UsageError(f"--state-dir: {problem}")
    servers = LocalServers(state_dir, ServerPorts.from_dict({**defaults, **overrides}), host=args.host)
    if args.action == "up":
        from inferload.local.models.build import ensure_models

        ensure_models(servers.models)  # first use: build the sample models
        print("starting the local servers (first start loads the models: up to a minute) ...", file=sys.stderr, flush=True)
        result = servers.up(which=which)
    elif args.action == "down":
        result = servers.down()
    else:
        result = servers.status()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
