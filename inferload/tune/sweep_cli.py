"""`inferload sweep`'s command line: its options, read into `SweepSettings` with clear errors."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from inferload.errors import InferloadError, ScenarioError
from inferload.measure.stability import StabilityRule
from inferload.scenario.durations import parse_duration
from inferload.tune.capacity import CapacitySearch
from inferload.tune.levels import LevelsError, parse_levels
from inferload.tune.stop_rules import SLO_KEYS, StopRules
from inferload.tune.sweep import Sweep, SweepSettings

EXIT_USAGE = 2


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="step the load (users or req/s) until the SLO breaks, errors start, throughput plateaus or the generator"
        " is the limit; or --find-max-rps: the highest rate that meets the SLO",
    )
    sweep.add_argument("scenario", type=Path, help="scenario YAML file (its target, payload, warm-up and window)")
    load = sweep.add_mutually_exclusive_group(required=True)
    load.add_argument("--users", metavar="LEVELS", help="closed loop: users per step, e.g. 1,2,4,8 or 1:64:x2 or 4:32:+4")
    load.add_argument("--rate", metavar="LEVELS", help="open loop: req/s per step, e.g. 50:400:+50 or 25:800:x2")
    load.add_argument("--find-max-rps", action="store_true", help="search the highest open-loop rate meeting --slo")
    sweep.add_argument("--target", help="the scenario target to load (needed when it has several)")
    add_search_arguments(sweep)
    sweep.add_argument("--resume", action="store_true", help="carry on an interrupted sweep in --out")
    sweep.add_argument(
        "--min-rps", type=float, help="--find-max-rps as a CI gate: exit 1 when the capacity found is below this req/s"
    )


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Options `inferload sweep` and `inferload tune` share: SLO, stability, stop rules, budget, output."""
    parser.add_argument("--slo", action="append", default=[], metavar="KEY=VALUE", help=f"bound per step: {', '.join(SLO_KEYS)}")
    parser.add_argument("--start-rate", type=float, default=50.0, help="--find-max-rps: first rate tried (default 50)")
    parser.add_argument("--precision", type=float, default=5.0, help="--find-max-rps: stop within this %% (default 5)")
    parser.add_argument("--stable-windows", type=int, default=3, help="windows that must agree (default 3)")
    parser.add_argument("--tolerance", type=float, default=10.0, help="±%% within which they agree (default 10)")
    parser.add_argument("--max-windows", type=int, default=10, help="windows a step runs at most (default 10)")
    parser.add_argument("--window", help="window length, e.g. 2s (default: the scenario's)")
    parser.add_argument("--warmup", help="warm-up of each step, e.g. 3s (default: the scenario's)")
    parser.add_argument("--max-error-rate", type=float, default=0.01, help="a step with more failed requests ends it")
    parser.add_argument("--plateau", type=float, default=5.0, help="plateau: gain under this %% ... (default 5)")
    parser.add_argument("--plateau-steps", type=int, default=2, help="... for this many steps in a row (default 2)")
    parser.add_argument("--max-client-cpu", type=float, default=0.9, help="generator limit: cores per process (0.9)")
    parser.add_argument(
        "--max-unsent", type=float, default=0.01, help="open loop: share of arrivals that may go unsent (default 0.01)"
    )
    parser.add_argument("--max-send-lag", type=float, default=20.0, help="generator limit: send-lag p99 ms (default 20)")
    parser.add_argument("--workers", type=int, default=0, help="local worker processes per step (default 0: one process)")
    parser.add_argument("--server-state", type=Path, help="the local servers' state folder (their pids: server memory per step)")
    parser.add_argument("--server-pid", type=int, help="the server's process id (its memory, with its children, per step)")
    parser.add_argument("--max-server-memory", type=float, help="memory limit: the server's peak RSS in MiB")
    parser.add_argument("--max-gpu-memory", type=float, help="memory limit: the memory used on one GPU in MiB")
    parser.add_argument("--no-gpu", action="store_true", help="do not read the GPUs (NVML) during steps")
    parser.add_argument("--budget", help="total time bound, e.g. 15m: no step starts that could not end within it")
    parser.add_argument("--out", type=Path, help="folder for sweep.json, sweep.csv, sweep.html (default results/sweep-<UTC>)")


def _seconds(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except ValueError as error:
        raise InferloadError(f"{option}: {error}") from None
    if value <= 0:
        raise InferloadError(f"{option}: expected a duration above 0; got {text!r}")
    return value


def parse_slo(items: list[str]) -> dict[str, float]:
    slo: dict[str, float] = {}
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in SLO_KEYS:
                raise InferloadError(f"--slo: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}; got {part!r}")
            try:
                number = float(value)
            except ValueError:
                raise InferloadError(f"--slo {key}: expected a number; got {value!r}") from None
            if not number > 0 or (key == "error_rate" and number > 1):
                raise InferloadError(f"--slo {key}: expected a number above 0{' and at most 1' if key == 'error_rate' else ''}")
            slo[key] = number
    return slo


def check_memory_options(args: argparse.Namespace) -> None:
    """The memory options: ceilings above 0, a ceiling on the server's memory only with its process known."""
    for name, value in (("--max-server-memory", args.max_server_memory), ("--max-gpu-memory", args.max_gpu_memory)):
        if value is not None and not value > 0:
            raise InferloadError(f"{name}: expected MiB above 0; got {value:g}")
    if args.server_pid is not None and args.server_state is not None:
        raise InferloadError("--server-pid and --server-state: give one of them")
    if args.server_pid is not None and (args.server_pid <= 0 or not psutil.pid_exists(args.server_pid)):
        raise InferloadError(f"--server-pid: no running process {args.server_pid}")
    if args.max_server_memory is not None and args.server_pid is None and args.server_state is None:
        raise InferloadError("--max-server-memory: needs the server's process: --server-state DIR or --server-pid PID")
    if args.max_gpu_memory is not None and args.no_gpu:
        raise InferloadError("--max-gpu-memory: cannot be used with --no-gpu")


def settings_from_args(args: argparse.Namespace) -> SweepSettings:
    try:
        rule = StabilityRule(args.stable_windows, args.tolerance, args.max_windows)
    except ValueError as error:
        raise InferloadError(f"--stable-windows/--tolerance/--max-windows: {error}") from None
    slo = parse_slo(args.slo)
    if args.find_max_rps and "p99_ms" not in slo and "p95_ms" not in slo and "p999_ms" not in slo:
        raise InferloadError("--find-max-rps needs a latency bound, e.g. --slo p99_ms=50")
    for name, value in (("--plateau-steps", args.plateau_steps), ("--workers", args.workers + 1)):
        if value < 1:
            raise InferloadError(f"{name}: expected a positive number; got {value}")
    if not 0 <= args.max_unsent < 1 or not 0 <= args.max_error_rate <= 1:
        raise InferloadError("--max-unsent and --max-error-rate: expected a share between 0 and 1")
    for name, value in (("--precision", args.precision), ("--start-rate", args.start_rate), ("--plateau", args.plateau)):
        if not value > 0:
            raise InferloadError(f"{name}: expected a number above 0; got {value:g}")
    check_memory_options(args)
    rules = StopRules(
        slo=slo,
        max_error_rate=args.max_error_rate,
        plateau_pct=args.plateau,
        plateau_steps=args.plateau_steps,
        max_client_cpu=args.max_client_cpu,
        max_send_lag_p99_ms=args.max_send_lag,
        max_unsent_ratio=args.max_unsent,
        max_server_memory_mib=args.max_server_memory,
        max_gpu_memory_mib=args.max_gpu_memory,
    )
    levels: list[float] = []
    try:
        if args.users:
            levels = parse_levels(args.users, integer=True)
        elif args.rate:
            levels = parse_levels(args.rate, integer=False)
    except LevelsError as error:
        raise InferloadError(f"{'--users' if args.users else '--rate'}: {error}") from None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # here, not at import: `inferload run` imports this package before Locust patches ssl, and the sources
    # package imports requests
    from inferload.observe.sources.nvml import NvmlSource

    return SweepSettings(
        scenario=args.scenario,
        out=(args.out or Path("results") / f"sweep-{stamp}").resolve(),
        rule=rule,
        rules=rules,
        levels=tuple(levels),
        open_loop=bool(args.rate),
        capacity=CapacitySearch(args.start_rate, args.precision) if args.find_max_rps else None,
        target=args.target,
        window_s=_seconds("--window", args.window),
        warmup_s=None if args.warmup is None else parse_duration(args.warmup),
        workers=args.workers,
        resume=args.resume,
        budget_s=_seconds("--budget", args.budget),
        server_pid=args.server_pid,
        server_state=args.server_state,
        gpu=None if args.no_gpu else NvmlSource(),
    )


EXIT_BELOW_FLOOR = 1


def capacity_gate(capacity: dict[str, Any] | None, floor: float) -> tuple[int, str]:
    """`--min-rps`: (exit code, the line that says why) for a capacity search's answer."""
    found = (capacity or {}).get("max_rps")
    if found is None:
        return EXIT_BELOW_FLOOR, f"capacity gate: FAIL: no rate met the SLO (floor {floor:g} req/s)"
    if found < floor:
        return EXIT_BELOW_FLOOR, f"capacity gate: FAIL: {found:g} req/s is below the floor of {floor:g} req/s"
    return 0, f"capacity gate: pass: {found:g} req/s >= {floor:g} req/s"


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        if args.min_rps is not None and (not args.find_max_rps or not args.min_rps > 0):
            raise InferloadError(f"--min-rps: expected req/s above 0, with --find-max-rps; got {args.min_rps:g}")
        settings = settings_from_args(args)
        sweep = Sweep(settings)
    except ScenarioError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    except InferloadError as error:
        print(f"inferload sweep: {error}", file=sys.stderr)
        return EXIT_USAGE
    code = sweep.run()
    if code != 0 or args.min_rps is None:
        return code
    gate, line = capacity_gate(sweep.capacity, args.min_rps)
    print(line)
    return gate
