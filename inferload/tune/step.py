"""One sweep step: the scenario at one load level, run as `inferload run --headless` would, and
what it measured (`StepResult`), read back from its own results folder.

Each step is a separate headless run of a generated scenario (the user's scenario with its shape
set to the level) in `<sweep out>/steps/<NN>-<level>/`, with `--stop-when-stable`: the run ends
once its windows agree, or at its duration (the maximum number of windows). The step's client CPU
is the busiest load-generating process's CPU use over the steady part (`inferload.tune.cpu_sampler`);
the server's memory and the GPU are sampled alongside (`inferload.tune.resources`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from inferload.measure.stability import StabilityRule, WindowFigures, first_stable_run
from inferload.results.files import WINDOWS_NAME, read_windows
from inferload.results.summary_file import SUMMARY_NAME, read_summary
from inferload.run.child_processes import ChildProcesses
from inferload.run.command import locust_command
from inferload.tune.cpu_sampler import CpuSampler
from inferload.tune.resources import GpuSource, ResourceSampler

#: exit codes of `inferload run` that end a sweep: bad scenario/start checks, and signals
START_FAILED = 2


@dataclass(frozen=True)
class StepPlan:
    """How each step runs: the level's kind, the stability rule, workers and the target measured."""

    open_loop: bool
    rule: StabilityRule
    window_s: float
    warmup_s: float
    target: str
    workers: int = 0
    #: open loop: senders per step (max_in_flight)
    max_in_flight: int = 64
    #: the server's process, whose memory (RSS with its children) each step samples; None: not sampled
    server_pid: int | None = None

    @property
    def max_duration_s(self) -> float:
        """The step's scenario duration: warm-up, the maximum windows, one window of alignment."""
        return self.warmup_s + (self.rule.max_windows + 1) * self.window_s


@dataclass(frozen=True)
class StepResult:
    """One row of sweep.csv / one entry of sweep.json's steps (None: not measured in that step)."""

    step: int
    level: float  # users (closed loop) or req/s offered (open loop)
    exit_code: int
    duration_s: float
    results_dir: str
    stable: bool = False
    windows: int = 0  # complete steady windows measured
    achieved_rps: float | None = None
    requests: int | None = None
    error_rate: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    avg_batch: float | None = None
    queue_ms: float | None = None
    compute_ms: float | None = None
    arrivals: int | None = None  # open loop: arrivals due in the steady part
    unsent: int | None = None
    send_lag_p50_ms: float | None = None
    send_lag_p99_ms: float | None = None
    max_in_flight: int | None = None  # open loop: the senders the step had
    client_cpu_per_worker: float | None = None  # cores busy per load-generating process (1.0 = a full core)
    gpu_util_pct: float | None = None  # NVML: the busiest GPU's mean utilisation over the steady part (None: no GPU)
    gpu_memory_mib: float | None = None  # NVML: the peak memory used on one GPU during the step
    server_memory_mib: float | None = None  # the server process's peak RSS with its children (None: no pid given)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def step_scenario(base: dict[str, Any], plan: StepPlan, level: float) -> dict[str, Any]:
    """The user's scenario (a dict from `scenario_to_dict`) at one level, for one target."""
    data = dict(base)
    data["targets"] = [t for t in base["targets"] if t["name"] == plan.target]
    data["name"] = f"{base['name']}-sweep"
    data["duration"] = plan.max_duration_s
    data["warmup"] = plan.warmup_s
    data["window"] = plan.window_s
    if plan.open_loop:
        kind = base["shape"]["kind"] if base["shape"]["kind"] in ("constant-rate", "poisson") else "constant-rate"
        data["shape"] = {"kind": kind, "rate": level, "max_in_flight": plan.max_in_flight}
    else:
        data["shape"] = {"kind": "steady", "users": int(level)}
    return data


def run_step(
    children: ChildProcesses,
    base: dict[str, Any],
    plan: StepPlan,
    index: int,
    level: float,
    out: Path,
    check_first: bool,
    gpu: GpuSource | None = None,
) -> StepResult:
    """Run one step as a child `inferload run --headless` and read back what it measured."""
    folder = out / "steps" / f"{index:02d}-{level:g}"
    folder.mkdir(parents=True, exist_ok=True)
    scenario_path = folder / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(step_scenario(base, plan, level), sort_keys=False))
    locust_options = ["--stop-when-stable", f"{plan.rule.windows},{plan.rule.tolerance_pct:g}", "--only-summary"]
    locust_options += [
        "--no-report",
        "--loglevel",
        "WARNING",
    ]  # sweep.html shows the steps + ([] if check_first else ["--skip-start-checks"])
    if plan.workers:  # a distributed step: the CLI starts the master and its workers
        command = [
            sys.executable,
            "-m",
            "inferload.cli",
            "run",
            str(scenario_path),
            "--headless",
            "--out",
            str(folder / "results"),
        ]
        command += ["--run-id", f"sweep-{index:02d}", "--workers", str(plan.workers), "--", *locust_options]
    else:  # Locust itself, without the CLI's own start-up in between (about 2 s a step)
        command = locust_command(scenario_path, True, folder / "results", f"sweep-{index:02d}", locust_options)
    started = time.monotonic()
    with open(folder / "run.log", "wb") as log:
        lead = children.start(command, lead=True, log=log)
        sampler = CpuSampler(lead.pid).start()
        resources = ResourceSampler(plan.server_pid, gpu).start()
        try:
            code = children.wait()
        finally:
            sampler.stop()
            resources.stop()
    return read_step(index, level, folder / "results", plan, code, time.monotonic() - started, sampler, resources)


def read_step(
    index: int,
    level: float,
    results: Path,
    plan: StepPlan,
    code: int,
    wall_s: float,
    cpu: CpuSampler,
    resources: ResourceSampler | None = None,
) -> StepResult:
    """A step's figures from its results folder (all None when the run wrote none)."""
    measured = StepResult(index, level, code, round(wall_s, 3), str(results))
    if not (results / SUMMARY_NAME).is_file():
        return measured
    summary = read_summary(results)
    steady_from = datetime.fromisoformat(summary.started_at).timestamp() + float(summary.warmup_s)
    target = summary.targets[plan.target]
    latency = target.latency_ms
    server = target.server_side
    open_loop = target.open_loop
    windows = steady_windows(results, plan.target)
    steady_to = steady_from + float(summary.steady_s or 0.0)
    used = resources.figures(steady_from, steady_to) if resources else None
    return replace(
        measured,
        achieved_rps=_num(target.throughput_rps),
        requests=target.requests,
        error_rate=_num(target.error_rate),
        p50_ms=_num(latency.p50),
        p90_ms=_num(latency.p90),
        p99_ms=_num(latency.p99),
        p999_ms=_num(latency.p999),
        avg_batch=_num(server.avg_batch_size) if server else None,
        queue_ms=_num(server.queue_ms_avg) if server else None,
        compute_ms=_num(server.compute_ms_avg) if server else None,
        arrivals=open_loop.arrivals if open_loop else None,
        unsent=open_loop.unsent if open_loop else None,
        send_lag_p50_ms=_num(open_loop.send_lag_ms.p50) if open_loop else None,
        send_lag_p99_ms=_num(open_loop.send_lag_ms.p99) if open_loop else None,
        max_in_flight=plan.max_in_flight if open_loop else None,
        stable=first_stable_run(windows, plan.rule) is not None,
        windows=len(windows),
        client_cpu_per_worker=cpu.busiest_cores(steady_from, steady_to),
        gpu_util_pct=used.gpu_util_pct if used else None,
        gpu_memory_mib=used.gpu_memory_mib if used else None,
        server_memory_mib=used.server_memory_mib if used else None,
    )


def steady_windows(results: Path, target: str) -> list[WindowFigures]:
    """The target's complete steady windows from windows.csv (the last, cut by the stop, left out)."""
    series = read_windows(results / WINDOWS_NAME).by_target.get(target)
    if series is None:
        return []
    rows = [
        WindowFigures(rps, p99)
        for phase, rps, p99 in zip(series.phase, series.rps, series.p99_ms, strict=True)
        if phase == "steady"
    ]
    return rows[:-1]


def _num(value: float | int | None) -> float | None:
    return None if value is None else float(value)
