"""`inferload sweep`'s command line: its options, read into `SweepSettings` with clear errors."""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from inferload.errors import ConfigFileError, UsageError
from inferload.measure.windows import StabilityRule
from inferload.results.calibration import protocol_of, read_calibration
from inferload.run import cli_values
from inferload.run.results_dir import unwritable_problem
from inferload.scenario.limits import MAX_RATE, MAX_USERS, MIN_WINDOW_S
from inferload.scenario.loader import load_scenario
from inferload.scenario.messages import parse_duration
from inferload.traffic.ramp_hold import RampHoldRule
from inferload.tune.capacity import USERS, CapacitySearch
from inferload.tune.capacity_steps import record_unit
from inferload.tune.stop_rules import SLO_KEYS, StopRules
from inferload.tune.sweep import Sweep, SweepSettings

# The load levels a sweep steps through: a list, a linear range or a geometric range.
#
# ``1,2,4,8``: these levels. ``10:100:+10``: 10, 20, ... 100 (linear). ``1:64:x2``: 1, 2, 4, ... 64
# (geometric). The end is included when a step lands on it; a range never goes past it.
#: more steps than this is a typo, not a sweep
MAX_LEVELS = 200


class LevelsError(ValueError):
    """A level list that cannot be read; the message says what was wrong and what was expected."""


def parse_levels(text: str, integer: bool) -> list[float]:
    """The levels of `text` in order; ``integer``: users (whole numbers), else rates (req/s)."""
    text = text.strip()
    if not text:
        raise LevelsError("expected levels like 1,2,4 or 10:100:+10 or 1:64:x2; got an empty string")
    levels = _range(text) if ":" in text else [_levels_number(part, text) for part in text.split(",")]
    if integer:
        for level in levels:
            if not float(level).is_integer():
                raise LevelsError(f"users must be whole numbers; {text!r} gives {level:g}")
    if any(level <= 0 for level in levels):
        raise LevelsError(f"every level must be above 0; {text!r} gives {min(levels):g}")
    if len(levels) > MAX_LEVELS:
        raise LevelsError(f"{text!r} gives {len(levels)} levels; at most {MAX_LEVELS} are allowed")
    if any(b <= a for a, b in itertools.pairwise(levels)):
        raise LevelsError(f"levels must increase; got {text!r}")
    return [float(level) for level in levels]


def _levels_number(part: str, text: str) -> float:
    try:
        value = float(part)
    except ValueError:
        raise LevelsError(f"{part.strip()!r} in {text!r} is not a number") from None
    if not math.isfinite(value):
        raise LevelsError(f"{part.strip()!r} in {text!r} is not a finite number")
    return value


def _range(text: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise LevelsError(f"a range is START:END:+STEP or START:END:xFACTOR; got {text!r}")
    start, end = _levels_number(parts[0], text), _levels_number(parts[1], text)
    step = parts[2].strip()
    if end < start:
        raise LevelsError(f"the end ({end:g}) is below the start ({start:g}) in {text!r}")
    if step[:1] in ("+", "") or step[:1].isdigit():
        increment = _levels_number(step.lstrip("+"), text)
        if increment <= 0:
            raise LevelsError(f"the step must be above 0 in {text!r}")
        count = math.floor((end - start) / increment + 1e-9) + 1
        return [round(start + k * increment, 9) for k in range(min(count, MAX_LEVELS + 1))]
    if step[:1] in ("x", "*"):
        factor = _levels_number(step[1:], text)
        if factor <= 1:
            raise LevelsError(f"the factor must be above 1 in {text!r}")
        if start <= 0:
            raise LevelsError(f"a geometric range starts above 0; got {text!r}")
        levels: list[float] = []
        level = start
        while level <= end * (1 + 1e-9) and len(levels) <= MAX_LEVELS:
            levels.append(round(level, 9))
            level *= factor
        return levels
    raise LevelsError(f"the step of {text!r} must be +N (linear) or xF (geometric); got {step!r}")


# -- the generator's calibrated ceiling (`--calibration FILE`) ---------------------------------------
# `inferload calibrate` certifies, per protocol, the highest rate per load-generating process at which
# inferload's own figures stay within their bounds (the *roofline*, docs/calibration.md). A capacity
# search given that certificate never offers more than roofline x processes: above it the generator,
# not the server, would be measured, so the search stops there and says the generator is the limit.
# The certificate is read by its one reader, `inferload.results.calibration.read_calibration`.


def generator_ceiling_rps(path: Path | None, processes: int, scenario: Path, target: str | None = None) -> float | None:
    """The highest rate the search may offer: the certificate's roofline for the loaded target's
    protocol (without `--target`, the lowest of the scenario's) times the load-generating processes;
    UsageError naming `--calibration` when the file is no certificate or certifies no rate."""
    if path is None:
        return None
    try:
        certificate = read_calibration(path)
    except ConfigFileError as error:
        raise UsageError(f"--calibration: {error}") from None
    targets = load_scenario(scenario).targets
    kinds = sorted({str(t.kind) for t in targets if target is None or t.name == target})
    rooflines = {protocol_of(kind): certificate.roofline_rps_per_process(protocol_of(kind)) for kind in kinds}
    uncertified = sorted(protocol for protocol, roofline in rooflines.items() if roofline is None)
    if uncertified:
        raise UsageError(
            f"--calibration {path}: it certifies no {' or '.join(uncertified)} rate on this machine (every tested "
            "rate missed a bound): a search under it would measure the generator; calibrate again, or drop --calibration"
        )
    found = [roofline for roofline in rooflines.values() if roofline is not None]
    return min(found) * max(1, processes) if found else None


def add_sweep_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    sweep = sub.add_parser("sweep", help=help_text)
    sweep.add_argument("scenario", type=Path, help="scenario YAML file (its target, payload, warm-up and window)")
    load = sweep.add_mutually_exclusive_group(required=True)
    load.add_argument("--users", metavar="LEVELS", help="closed loop: users per step, e.g. 1,2,4,8 or 1:64:x2 or 4:32:+4")
    load.add_argument("--rate", metavar="LEVELS", help="open loop: req/s per step, e.g. 50:400:+50 or 25:800:x2")
    load.add_argument("--find-max-rps", action="store_true", help="search the highest open-loop rate meeting --slo")
    load.add_argument(
        "--find-max-users", action="store_true", help="search the most closed-loop users (concurrency) meeting --slo"
    )
    load.add_argument(
        "--ramp-hold",
        action="store_true",
        help="one run: raise the rate from --start-rate a step per window while it meets --slo, step back at the first"
        " window that breaks it, hold there for --sustain; reports the rate held",
    )
    sweep.add_argument("--target", help="the scenario target to load (needed when it has several)")
    add_search_arguments(sweep)
    sweep.add_argument("--resume", action="store_true", help="carry on an interrupted sweep in --out")
    sweep.add_argument(
        "--min-rps",
        type=cli_values.finite_number(0.0, above=True),
        help="--find-max-rps as a CI gate: exit 1 unless the capacity's 95 %% interval lies at or above this req/s",
    )
    sweep.add_argument(
        "--min-users",
        type=cli_values.whole_number(1, MAX_USERS),
        help="--find-max-users as a CI gate: exit 1 unless the capacity's 95 %% interval lies at or above this many users",
    )
    sweep.add_argument(
        "--start-users",
        type=cli_values.whole_number(1, MAX_USERS),
        default=4,
        help="--find-max-users: first user count tried (default 4)",
    )
    sweep.add_argument("--ramp-step", type=float, default=10.0, help="--ramp-hold: rate step per window, %% (default 10)")
    sweep.add_argument("--sustain", default="30s", help="--ramp-hold: how long the rate is held (default 30s)")
    sweep.add_argument("--max-backoffs", type=int, default=3, help="--ramp-hold: steps back after a failed hold (default 3)")


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Options `inferload sweep` and `inferload tune` share: SLO, stability, stop rules, budget, output.

    Each value is checked as it is read (`inferload.run.cli_values`): a bad one is one line and exit 2."""
    above_0 = cli_values.finite_number(0.0, above=True)
    share = cli_values.finite_number(0.0, high=1.0)
    parser.add_argument("--slo", action="append", default=[], metavar="KEY=VALUE", help=f"bound per step: {', '.join(SLO_KEYS)}")
    parser.add_argument(
        "--max-steps",
        type=cli_values.whole_number(1, 1000),
        default=12,
        help="--find-max-rps: runs the search may make (default 12)",
    )
    parser.add_argument(
        "--runs-per-rate",
        type=cli_values.whole_number(1, 100),
        default=2,
        help="--find-max-rps: runs pooled at most at an unsure rate (default 2)",
    )
    parser.add_argument(
        "--cliff-factor",
        type=cli_values.finite_number(1.0, above=True),
        default=3.0,
        help="--find-max-rps: latency rising more than this between rates is a cliff",
    )
    parser.add_argument("--no-verify", action="store_true", help="--find-max-rps: no verification runs below and above")
    parser.add_argument(
        "--calibration", type=Path, help="a calibration.json: no rate above its generator roofline x processes is offered"
    )
    parser.add_argument(
        "--start-rate",
        type=cli_values.finite_number(0.0, above=True, high=MAX_RATE),
        default=50.0,
        help="--find-max-rps: first rate tried (default 50)",
    )
    parser.add_argument(
        "--precision",
        type=cli_values.finite_number(0.0, above=True, high=100.0),
        default=5.0,
        help="--find-max-rps: stop when the boundary's 95 %% interval is this narrow (default 5)",
    )
    parser.add_argument(
        "--stable-windows", type=cli_values.whole_number(1, 1000), default=3, help="windows that must agree (default 3)"
    )
    parser.add_argument("--tolerance", type=above_0, default=10.0, help="±%% within which they agree (default 10)")
    parser.add_argument(
        "--max-windows", type=cli_values.whole_number(1, 10_000), default=10, help="windows a step runs at most (default 10)"
    )
    parser.add_argument("--window", type=cli_values.duration, help="window length, e.g. 2s (default: the scenario's)")
    parser.add_argument("--warmup", type=cli_values.duration, help="warm-up of each step, e.g. 3s (default: the scenario's)")
    parser.add_argument("--max-error-rate", type=share, default=0.01, help="a step with more failed requests ends it")
    parser.add_argument("--plateau", type=above_0, default=5.0, help="plateau: gain under this %% ... (default 5)")
    parser.add_argument(
        "--plateau-steps", type=cli_values.whole_number(1, 1000), default=2, help="... for this many steps in a row (default 2)"
    )
    parser.add_argument("--max-client-cpu", type=above_0, default=0.9, help="generator limit: cores per process, above 0 (0.9)")
    parser.add_argument(
        "--max-unsent",
        type=cli_values.finite_number(0.0, high=0.999),
        default=0.01,
        help="open loop: share of arrivals that may go unsent (default 0.01)",
    )
    parser.add_argument("--max-send-lag", type=above_0, default=20.0, help="generator limit: send-lag p99 ms (default 20)")
    parser.add_argument(
        "--workers",
        type=cli_values.local_workers,
        default=0,
        help="local worker processes per step (default 0: one process)",
    )
    parser.add_argument("--server-state", type=Path, help="the local servers' state folder (their pids: server memory per step)")
    parser.add_argument(
        "--server-pid", type=cli_values.whole_number(1), help="the server's process id (its memory, with its children, per step)"
    )
    parser.add_argument("--max-server-memory", type=above_0, help="memory limit: the server's peak RSS in MiB")
    parser.add_argument("--max-gpu-memory", type=above_0, help="memory limit: the memory used on one GPU in MiB")
    parser.add_argument("--no-gpu", action="store_true", help="do not read the GPUs (NVML) during steps")
    parser.add_argument("--budget", help="total time bound, e.g. 15m: no step starts that could not end within it")
    parser.add_argument("--out", type=Path, help="folder for sweep.json, sweep.csv, sweep.html (default results/sweep-<UTC>)")


def _seconds(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except ValueError as error:
        raise UsageError(f"{option}: {error}; got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{option}: expected a duration above 0; got {text!r}")
    return value


def parse_slo(items: list[str]) -> dict[str, float]:
    slo: dict[str, float] = {}
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in SLO_KEYS:
                raise UsageError(f"--slo: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}; got {part!r}")
            try:
                number = float(value)
            except ValueError:
                raise UsageError(f"--slo {key}: expected a number; got {value!r}") from None
            most = {"error_rate": 1.0, "min_goodput_pct": 100.0}.get(key)
            if not math.isfinite(number) or not number > 0 or (most is not None and number > most):
                raise UsageError(f"--slo {key}: expected a finite number above 0{f' and at most {most:g}' if most else ''}")
            slo[key] = number
    return slo


def check_memory_options(args: argparse.Namespace) -> None:
    """The memory options: ceilings above 0, a ceiling on the server's memory only with its process known."""
    if args.server_pid is not None and args.server_state is not None:
        raise UsageError("--server-pid and --server-state: give one of them")
    if args.server_pid is not None and not psutil.pid_exists(args.server_pid):
        raise UsageError(f"--server-pid: no running process {args.server_pid}")
    if args.max_server_memory is not None and args.server_pid is None and args.server_state is None:
        raise UsageError("--max-server-memory: needs the server's process: --server-state DIR or --server-pid PID")
    if args.max_gpu_memory is not None and args.no_gpu:
        raise UsageError("--max-gpu-memory: cannot be used with --no-gpu")


def check_levels_bound(args: argparse.Namespace, levels: list[float]) -> None:
    """Each level within the scenario's bound (every step is a run of its own: a step past it would be
    refused only when the sweep reached it, after the steps before it ran): UsageError naming the option."""
    if not levels:
        return
    option, bound, unit = ("--users", MAX_USERS, "users") if args.users else ("--rate", MAX_RATE, "req/s")
    if max(levels) > bound:
        raise UsageError(
            f"{option}: {getattr(args, option[2:])!r} goes up to {max(levels):,.10g} {unit}; a step runs at most {bound:,.10g} {unit}"
        )


def default_out(prefix: str) -> Path:
    """``results/<prefix>-<UTC time>``, absolute."""
    return (Path("results") / f"{prefix}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}").resolve()


def settings_from_args(args: argparse.Namespace, out: Path | None = None) -> SweepSettings:
    """The sweep's settings from its options (`out`: the folder, default --out or `default_out("sweep")`);
    UsageError naming the option that is wrong."""
    try:
        rule = StabilityRule(args.stable_windows, args.tolerance, args.max_windows)
    except ValueError as error:
        raise UsageError(f"--stable-windows/--tolerance/--max-windows: {error}") from None
    slo = parse_slo(args.slo)
    find_max_users = getattr(args, "find_max_users", False)
    if (args.find_max_rps or find_max_users) and not {"p99_ms", "p95_ms", "p999_ms", "min_goodput_pct"} & set(slo):
        option = getattr(args, "capacity_for", None) or ("--find-max-users" if find_max_users else "--find-max-rps")
        raise UsageError(f"{option} needs a latency or goodput bound, e.g. --slo p99_ms=50 or --slo min_goodput_pct=90")
    ramp = ramp_rule(args, slo) if getattr(args, "ramp_hold", False) else None
    for name, value in (
        ("--plateau-steps", args.plateau_steps),
        ("--workers", args.workers + 1),
        ("--max-steps", args.max_steps),
        ("--runs-per-rate", args.runs_per_rate),
    ):
        if value < 1:
            raise UsageError(f"{name}: expected a positive number; got {value}")
    if not 0 <= args.max_unsent < 1 or not 0 <= args.max_error_rate <= 1:
        raise UsageError("--max-unsent and --max-error-rate: expected a share between 0 and 1")
    for name, value in (("--precision", args.precision), ("--start-rate", args.start_rate), ("--plateau", args.plateau)):
        if not value > 0:
            raise UsageError(f"{name}: expected a number above 0; got {value:g}")
    if not args.cliff_factor > 1:
        raise UsageError(f"--cliff-factor: expected a factor above 1; got {args.cliff_factor:g}")
    if find_max_users and args.calibration is not None:
        raise UsageError("--calibration: its roofline bounds the rates --find-max-rps offers; closed-loop users offer no rate")
    ceiling = generator_ceiling_rps(args.calibration, args.workers, args.scenario, getattr(args, "target", None))
    if args.window is not None and args.window < MIN_WINDOW_S:
        raise UsageError(f"--window: expected at least {MIN_WINDOW_S:g} s; got {args.window:g} s")
    check_memory_options(args)
    budget_s = _seconds("--budget", args.budget)
    out = out or (args.out.resolve() if args.out else default_out("sweep"))
    problem = unwritable_problem(out, "the results", keep=False)
    if problem:
        raise UsageError(f"--out: {problem}")
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
        raise UsageError(f"{'--users' if args.users else '--rate'}: {error}") from None
    check_levels_bound(args, levels)
    return SweepSettings(
        scenario=args.scenario,
        out=out,
        rule=rule,
        rules=rules,
        levels=tuple(levels),
        open_loop=bool(args.rate),
        capacity=capacity_search(args, ceiling) if args.find_max_rps or find_max_users else None,
        ramp_hold=ramp,
        start_rps=args.start_rate,
        target=args.target,
        window_s=args.window,
        warmup_s=args.warmup,
        workers=args.workers,
        resume=args.resume,
        budget_s=budget_s,
        server_pid=args.server_pid,
        server_state=args.server_state,
    )


def ramp_rule(args: argparse.Namespace, slo: dict[str, float]) -> RampHoldRule:
    """`--ramp-hold`'s rule: the SLO (with the error bound), the step, the sustain period, the steps back."""
    if "min_goodput_pct" in slo:
        raise UsageError("--ramp-hold judges latency bounds only; a goodput bound: --find-max-rps --slo min_goodput_pct=90")
    if not any(key != "error_rate" for key in slo):
        raise UsageError("--ramp-hold needs a latency bound, e.g. --slo p99_ms=50")
    if not args.ramp_step > 0:
        raise UsageError(f"--ramp-step: expected a percentage above 0; got {args.ramp_step:g}")
    if args.max_backoffs < 0:
        raise UsageError(f"--max-backoffs: expected 0 or more; got {args.max_backoffs}")
    sustain = _seconds("--sustain", args.sustain) or 30.0
    bounds = {**slo, "error_rate": min(args.max_error_rate, slo.get("error_rate", 1.0))}
    return RampHoldRule(bounds, args.ramp_step, sustain, args.max_unsent, args.max_backoffs)


def capacity_search(args: argparse.Namespace, ceiling_rps: float | None) -> CapacitySearch:
    """The capacity search's settings from the options (checked by `settings_from_args`): over rates, or
    (`--find-max-users`) over closed-loop users, where a calibrated ceiling of rates bounds nothing."""
    search = CapacitySearch(
        args.start_rate,
        args.precision,
        max_steps=args.max_steps,
        runs_per_rate=args.runs_per_rate,
        cliff_factor=args.cliff_factor,
        verify=not args.no_verify,
        ceiling_rps=ceiling_rps,
    )
    if getattr(args, "find_max_users", False):
        return replace(search, start_rps=float(args.start_users), ceiling_rps=None, unit=USERS)
    return search


def with_gpu(settings: SweepSettings, args: argparse.Namespace) -> SweepSettings:
    """`settings` with the GPUs' readings (NVML) unless --no-gpu: made last, once every option is checked
    (opening NVML logs a line when there is no GPU)."""
    if args.no_gpu:
        return settings
    # here, not at import: `inferload run` imports this package before Locust patches ssl, and the sources
    # package imports requests
    from inferload.observe.sources.nvml import NvmlSource

    return replace(settings, gpu=NvmlSource())


EXIT_BELOW_FLOOR = 1


def capacity_gate(capacity: dict[str, Any] | None, floor: float) -> tuple[int, str]:
    """`--min-rps` (`--min-users`): (exit code, the line that says why) for a capacity search's answer.
    It passes only when the lower end of the capacity's 95 % interval is at or above the floor: a
    capacity whose interval reaches below the floor may be below it, and a gate must not pass on noise."""
    capacity = capacity or {}
    unit = record_unit(capacity)
    name = unit.name
    interval = capacity.get(f"interval_{unit.key}")
    if interval and interval[0]:
        low, high = interval[0], interval[1]
        span = f"[{low:g}, {'∞' if high is None else f'{high:g}'}] {name}"
        if low >= floor:
            return 0, f"capacity gate: pass: the capacity's interval {span} lies at or above {floor:g} {name}"
        if high is not None and high < floor:
            return (
                EXIT_BELOW_FLOOR,
                f"capacity gate: FAIL: the capacity's interval {span} lies below the floor of {floor:g} {name}",
            )
        return EXIT_BELOW_FLOOR, (
            f"capacity gate: FAIL: the capacity's interval {span} reaches below the floor of {floor:g} {name}"
            " (it may be below it: more or longer steps narrow the interval)"
        )
    found = capacity.get(f"max_{unit.key}")  # no interval: a search whose lowest level was over (or a sweep.json from before)
    if found is None:
        what = "user count" if unit.whole else "rate"
        return EXIT_BELOW_FLOOR, f"capacity gate: FAIL: no {what} met the SLO (floor {floor:g} {name})"
    if found < floor:
        return EXIT_BELOW_FLOOR, f"capacity gate: FAIL: {found:g} {name} is below the floor of {floor:g} {name}"
    return 0, f"capacity gate: pass: {found:g} {name} >= {floor:g} {name}"


def cmd_sweep(args: argparse.Namespace) -> int:
    """The sweep; a bad option or scenario raises a UsageError (exit 2, `inferload.cli.main`)."""
    if args.min_rps is not None and not args.find_max_rps:
        raise UsageError(f"--min-rps: expected req/s above 0, with --find-max-rps; got {args.min_rps:g}")
    if args.min_users is not None and not args.find_max_users:
        raise UsageError(f"--min-users: a floor of users for --find-max-users; got {args.min_users} without it")
    sweep = Sweep(settings_from_args(args))  # UsageError: the scenario's target, or a sweep.json in --out
    budget_s = sweep.settings.budget_s
    if budget_s is not None and budget_s < sweep.step_s:
        raise UsageError(
            f"--budget: {args.budget} leaves no time for one step ({sweep.step_s:g} s: the scenario's run and its"
            f" start-up); expected at least {math.ceil(sweep.step_s):d}s"
        )
    sweep.settings = with_gpu(sweep.settings, args)
    code = sweep.run()
    floor = args.min_users if args.find_max_users else args.min_rps
    if code != 0 or floor is None:
        return code
    gate, line = capacity_gate(sweep.capacity, floor)
    print(line)
    return gate
