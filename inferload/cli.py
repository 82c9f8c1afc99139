"""The `inferload` command: demo, run, validate, servers."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from inferload.errors import InferloadError, ScenarioError
from inferload.paths import LOCUSTFILE

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
    run.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="run Locust's master and N local worker processes (default 0: one process)",
    )
    run.add_argument(
        "--remote-workers",
        type=int,
        default=0,
        metavar="M",
        help="also wait for M workers started on other machines with `inferload worker`",
    )
    run.add_argument(
        "--master-bind-host",
        default="127.0.0.1",
        help="address the master listens on for workers (default 127.0.0.1; 0.0.0.0 for other machines)",
    )
    run.add_argument(
        "--master-port", type=int, default=None, help="master port for workers (default: a free port; 5557 is Locust's)"
    )
    run.add_argument("--requests-csv", action="store_true", help="also write every request to requests.csv")
    run.epilog = "Options after -- go to Locust unchanged, e.g. inferload run s.yaml --headless -- --loglevel WARNING"

    validate = sub.add_parser("validate", help="check scenario files; exit 2 with one line per problem")
    validate.add_argument("scenarios", type=Path, nargs="+", metavar="SCENARIO")

    compare = sub.add_parser("compare", help="two runs side by side: each figure in A and B, B - A and the change in %")
    compare.add_argument("a", type=Path, metavar="A", help="results folder or summary.json (before)")
    compare.add_argument("b", type=Path, metavar="B", help="results folder or summary.json (after)")
    compare.add_argument("--json", action="store_true", dest="as_json", help="print JSON instead of a table")

    report = sub.add_parser("report", help="(re)write report.html in a results folder")
    report.add_argument("results_dir", type=Path, metavar="RESULTS_DIR")

    worker = sub.add_parser("worker", help="a Locust worker for a master started with `inferload run --remote-workers`")
    worker.add_argument("--master-host", required=True, help="the master's address")
    worker.add_argument("--master-port", type=int, default=5557, help="the master's port (default 5557)")

    servers = sub.add_parser("servers", help="the local Triton and TorchServe of the embedded default")
    servers.add_argument("action", choices=["up", "down", "status"])
    servers.add_argument(
        "--state-dir", type=Path, default=None, help="where pids, logs and state.json live (default .inferload/servers)"
    )
    servers.add_argument("--ports", default=None, help="comma list name=port, e.g. triton_grpc=9001,ts_inference=9080")
    servers.add_argument("--only", choices=["triton", "torchserve"], help="start only this server")
    servers.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else exposes the servers beyond this machine)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args: list[str] = []
    if "--" in argv:  # everything after -- is for Locust
        argv, locust_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    args.locust_args = locust_args
    try:
        if args.command == "validate":
            return cmd_validate(args.scenarios)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "servers":
            return cmd_servers(args)
        if args.command == "worker":
            from inferload.run.distributed import worker_command

            return subprocess.call(worker_command(args.master_host, args.master_port))
        if args.command == "compare":
            from inferload.results.compare import main_compare

            return main_compare(args.a, args.b, args.as_json)
        if args.command == "report":
            from inferload.results.report import main_report

            return main_report(args.results_dir)
        if args.command == "demo":
            from inferload.local.demo import DemoSettings, run_demo

            return run_demo(
                DemoSettings(
                    out=args.out,
                    users=args.users,
                    steady_s=args.steady,
                    burst_s=args.burst,
                    warmup_s=args.warmup,
                    model=args.model,
                )
            )
    except InferloadError as exc:
        print(f"inferload: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("inferload: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE


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


def locust_command(scenario: Path, headless: bool, out: Path | None, run_id: str | None, extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario)]
    if headless:
        command.append("--headless")
    if out is not None:
        command += ["--results-dir", str(out)]
    if run_id:
        command += ["--run-id", run_id]
    return command + list(extra)


def cmd_run(args: argparse.Namespace) -> int:
    from inferload.scenario.loader import load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    if args.workers < 0 or args.remote_workers < 0:
        raise InferloadError("--workers and --remote-workers: expected 0 or more")
    extra = list(args.locust_args) + (["--requests-csv"] if args.requests_csv else [])
    if not args.workers and not args.remote_workers:
        return subprocess.call(locust_command(args.scenario, args.headless, args.out, args.run_id, extra), cwd=os.getcwd())

    from datetime import datetime, timezone

    from inferload.run.distributed import DistributedRun, run_distributed

    run_id = args.run_id or f"{scenario.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    return run_distributed(
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
        )
    )


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
    from inferload.local.servers.manager import LocalServers
    from inferload.local.servers.ports import ServerPorts
    from inferload.paths import DEFAULT_STATE_DIR

    defaults = ServerPorts().to_dict()
    overrides = parse_ports(args.ports)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise InferloadError(f"--ports: unknown name(s) {unknown}; expected some of {sorted(defaults)}")
    servers = LocalServers(args.state_dir or DEFAULT_STATE_DIR, ServerPorts.from_dict({**defaults, **overrides}), host=args.host)
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
