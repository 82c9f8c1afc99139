"""The `inferload` command: demo, run, validate, servers."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from inferload.errors import InferloadError, ScenarioError
from inferload.paths import LOCUSTFILE, REPO_ROOT

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferload",
        description="Load testing for ML inference servers (Triton, TorchServe) on Locust.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="compare Triton and TorchServe on the sample model, on local servers, offline")
    demo.add_argument("--out", type=Path, help="results folder (default results/demo-<UTC time>)")
    demo.add_argument("--users", type=int, default=8, help="concurrent users in the steady phase (default 8)")
    demo.add_argument("--steady", type=float, default=20.0, help="seconds of steady load per server (default 20)")
    demo.add_argument("--burst", type=float, default=20.0, help="seconds of bursty load per server (default 20)")
    demo.add_argument("--warmup", type=float, default=5.0, help="seconds of warm-up before each phase, excluded (default 5)")
    demo.add_argument("--model", default="cnn", choices=["cnn", "tiny"], help="sample model (default cnn)")

    run = sub.add_parser("run", help="run a scenario with Locust (web UI, or --headless)")
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument("--headless", action="store_true", help="no web UI: run, print the figures, exit")
    run.add_argument("--out", type=Path, help="results folder (default results/<run id>)")
    run.add_argument("--run-id", help="run identifier (default <scenario>-<UTC time>)")
    run.add_argument("locust_args", nargs=argparse.REMAINDER, help="after --: more Locust options")

    validate = sub.add_parser("validate", help="check scenario files; exit 2 with one line per problem")
    validate.add_argument("scenarios", type=Path, nargs="+", metavar="SCENARIO")

    compare = sub.add_parser("compare", help="two runs side by side: each figure in A and B, B - A and the change in %")
    compare.add_argument("a", type=Path, metavar="A", help="results folder or summary.json (before)")
    compare.add_argument("b", type=Path, metavar="B", help="results folder or summary.json (after)")
    compare.add_argument("--json", action="store_true", dest="as_json", help="print JSON instead of a table")

    report = sub.add_parser("report", help="(re)write report.html in a results folder")
    report.add_argument("results_dir", type=Path, metavar="RESULTS_DIR")

    servers = sub.add_parser("servers", help="the local Triton and TorchServe of the embedded default")
    servers.add_argument("action", choices=["up", "down", "status"])
    servers.add_argument("--state-dir", type=Path, default=None, help="where pids, logs and state.json live (default .inferload/servers)")
    servers.add_argument("--ports", default=None, help="comma list name=port, e.g. triton_grpc=9001,ts_inference=9080")
    servers.add_argument("--only", choices=["triton", "torchserve"], help="start only this server")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "validate":
            return cmd_validate(args.scenarios)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "servers":
            return cmd_servers(args)
        if args.command == "compare":
            from inferload.compare import main_compare

            return main_compare(args.a, args.b, args.as_json)
        if args.command == "report":
            from inferload.report import main_report

            return main_report(args.results_dir)
        if args.command == "demo":
            from inferload.demo import DemoSettings, run_demo

            return run_demo(DemoSettings(
                out=args.out, users=args.users, steady_s=args.steady, burst_s=args.burst,
                warmup_s=args.warmup, model=args.model,
            ))
    except InferloadError as exc:
        print(f"inferload: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("inferload: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE


def cmd_validate(paths: list[Path]) -> int:
    from inferload.scenario_loader import load_scenario

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


def locust_command(scenario: Path, headless: bool, out: Path | None, run_id: str | None, extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario)]
    if headless:
        command.append("--headless")
    if out is not None:
        command += ["--results-dir", str(out)]
    if run_id:
        command += ["--run-id", run_id]
    return command + [a for a in extra if a != "--"]


def cmd_run(args: argparse.Namespace) -> int:
    from inferload.scenario_loader import load_scenario

    try:
        load_scenario(args.scenario)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    command = locust_command(args.scenario, args.headless, args.out, args.run_id, args.locust_args)
    return subprocess.call(command, cwd=os.getcwd())


def parse_ports(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    ports: dict[str, int] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not value.isdigit() or not 0 < int(value) < 65536:
            raise InferloadError(f"--ports: expected name=port with a port in 1..65535; got {item!r}")
        ports[name.strip()] = int(value)
    return ports


def cmd_servers(args: argparse.Namespace) -> int:
    from inferload.paths import DEFAULT_STATE_DIR
    from inferload.servers.manager import LocalServers
    from inferload.servers.ports import ServerPorts

    defaults = ServerPorts().to_dict()
    overrides = parse_ports(args.ports)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise InferloadError(f"--ports: unknown name(s) {unknown}; expected some of {sorted(defaults)}")
    servers = LocalServers(args.state_dir or DEFAULT_STATE_DIR, ServerPorts.from_dict({**defaults, **overrides}))
    if args.action == "up":
        which = (args.only,) if args.only else ("triton", "torchserve")
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
