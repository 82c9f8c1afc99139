"""One sweep step: the scenario at one load level, run as `inferload run --headless` would, and
what it measured (`StepResult`), read back from its own results folder.

Each step is a separate headless run of a generated scenario (the user's scenario with its shape
set to the level) in `<sweep out>/steps/<NN>-<level>/`, with `--stop-when-stable`: the run ends
once its windows agree, or at its duration (the maximum number of windows). The step's client CPU
is the busiest load-generating process's CPU use over the steady part (`CpuSampler`);
the server's memory and the GPU are sampled alongside (`inferload.tune.step`).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import psutil
import yaml

from inferload.errors import UsageError
from inferload.launch.child_processes import Child, ChildProcesses, locust_arguments
from inferload.measure.windows import StabilityRule, WindowFigures, first_stable_run
from inferload.results.compare import terminal_safe
from inferload.results.files import SUMMARY_NAME, WINDOWS_NAME, read_summary, read_windows
from inferload.scenario.input_files import read_limited
from inferload.scenario.limits import MAX_SMALL_FILE_BYTES

# The server's memory and the GPU during a step: what "memory is the limit" is judged on.
#
# A thread samples twice a second, for the whole step:
#
# - the **server's memory**: the resident set (RSS) of the server's process and every process under
#   it (TorchServe's Python workers are children of its Java frontend; Triton is one process), in MiB,
#   psutil. The pid comes from `--server-pid`, or from the local servers' state.json
#   (`--server-state DIR`, as `inferload servers up` writes it).
# - the **GPU**: every GPU NVML sees on this host (`inferload.observe.sources.nvml.NvmlSource`):
#   utilisation (%) and memory used (MiB). On a host without an NVIDIA driver or GPU the source
#   reads nothing and both stay None.
#
# `figures(t0, t1)` then gives the step's row: the peak server RSS, the mean GPU utilisation of the
# busiest GPU and the peak memory used on one GPU, between two wall-clock times.
if TYPE_CHECKING:  # the sources package imports every server's reader (requests): not at import time
    from inferload.observe.sources.nvml import GpuReading
import threading
from typing import TypeVar

# What a step's samplers share: a daemon thread that calls ``sample()`` twice a second until stopped.
#
# A subclass (a dataclass, as this base is) gives ``sample()`` and its thread's name, and may say by
# ``wants_thread()`` that it has nothing to sample (no thread is started then). ``start()`` returns
# the sampler itself, so a step writes ``sampler = CpuSampler(pid).start()``; ``stop()`` ends the
# thread, waiting for it at most 5 s. The fields here are keyword-only, so a subclass's own fields
# keep their positions in its constructor.
SAMPLE_EVERY_S = 0.5
#: how long `stop()` waits for the thread
JOIN_TIMEOUT_S = 5.0

SamplerT = TypeVar("SamplerT", bound="SamplerThread")


@dataclass
class SamplerThread:
    #: the thread's name (seen in a thread dump)
    thread_name: ClassVar[str] = "inferload-sampler"
    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True)
    _thread: threading.Thread | None = field(default=None, kw_only=True)

    def sample(self) -> None:
        raise NotImplementedError

    def wants_thread(self) -> bool:
        """False: nothing to sample, `start()` starts no thread."""
        return True

    def start(self: SamplerT) -> SamplerT:
        if self.wants_thread():
            self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_EVERY_S)


MIB = 1024 * 1024
STATE_FILE = "state.json"


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...


@dataclass(frozen=True)
class ResourceFigures:
    server_memory_mib: float | None = None
    gpu_util_pct: float | None = None
    gpu_memory_mib: float | None = None


def process_tree_rss_mib(pid: int) -> float | None:
    """RSS of `pid` and all its descendants (MiB); None when the process is gone or unreadable."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue  # a worker that ended between the listing and the reading
    return total / MIB


def server_pid_from_state(state_dir: Path, server: str) -> int:
    """The pid of `server` ('triton' | 'torchserve') recorded in the local servers' state.json;
    UsageError naming `--server-state` when it is not there (exit 2, before any step)."""
    path = Path(state_dir) / STATE_FILE
    if not path.exists():
        raise UsageError(f"--server-state: {path} does not exist (start the servers with `inferload servers up`)")
    try:
        state = json.loads(read_limited(path, MAX_SMALL_FILE_BYTES))  # a regular file: never a FIFO
    except ValueError as error:
        raise UsageError(f"--server-state: {path}: cannot be read: {error}") from None
    entry = state.get("servers", {}).get(server) if isinstance(state, dict) else None
    pid = entry.get("pid") if isinstance(entry, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise UsageError(f"--server-state: {path}: servers.{server}.pid: no {server} recorded there")
    if not psutil.pid_exists(pid):
        raise UsageError(f"--server-state: {path}: servers.{server}.pid: process {pid} is not running")
    return pid


@dataclass
class ResourceSampler(SamplerThread):
    thread_name: ClassVar[str] = "inferload-resource-sampler"
    server_pid: int | None = None
    gpu: GpuSource | None = None
    #: (wall time, server RSS MiB)
    memory: list[tuple[float, float]] = field(default_factory=list)
    #: (wall time, busiest GPU's util %, largest GPU memory used MiB)
    gpus: list[tuple[float, float | None, float | None]] = field(default_factory=list)

    def wants_thread(self) -> bool:
        return self.server_pid is not None or self.gpu is not None

    def sample(self) -> None:
        now = time.time()
        if self.server_pid is not None:
            rss = process_tree_rss_mib(self.server_pid)
            if rss is not None:
                self.memory.append((now, rss))
        if self.gpu is not None:
            readings = self.gpu.read()
            if readings:
                utils = [r.util_pct for r in readings if r.util_pct is not None]
                used = [r.mem_used_bytes / MIB for r in readings if r.mem_used_bytes is not None]
                self.gpus.append((now, max(utils) if utils else None, max(used) if used else None))

    def figures(self, t0: float, t1: float) -> ResourceFigures:
        """Peak server RSS over the whole step (memory is a ceiling: the warm-up counts too), mean GPU
        utilisation between t0 and t1 (the steady part), peak GPU memory over the whole step."""
        rss = [value for _, value in self.memory]
        utils = [u for t, u, _ in self.gpus if t0 <= t <= t1 and u is not None]
        used = [m for _, _, m in self.gpus if m is not None]
        return ResourceFigures(
            server_memory_mib=round(max(rss), 1) if rss else None,
            gpu_util_pct=round(sum(utils) / len(utils), 1) if utils else None,
            gpu_memory_mib=round(max(used), 1) if used else None,
        )


# -- cpu sampler ------------------------------------------------------------
# The load generator's own CPU during a step: per load-generating process, over the steady part.
#
# A thread samples the CPU time of the step's process and every process under it twice a second
# (psutil): the Locust process of a local step, or `inferload run --workers` with its master and workers. Afterwards `busiest_cores(t0, t1)` gives the busiest load-generating process's CPU use
# between two wall-clock times, in cores (1.0 = one full core): a Locust process (gevent) cannot use
# more than one core, so near 1.0 the generator, not the server, bounds the step. Load-generating
# processes are the workers of a distributed step (found by `--worker` in their command line), or
# else the busiest process sampled: the single Locust process of a local one.


@dataclass
class CpuSampler(SamplerThread):
    thread_name: ClassVar[str] = "inferload-cpu-sampler"
    pid: int
    #: pid -> [(wall time, cpu seconds)]
    samples: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    workers: set[int] = field(default_factory=set)

    def sample(self) -> None:
        try:
            lead = psutil.Process(self.pid)
            processes = [lead, *lead.children(recursive=True)]
        except psutil.Error:
            return
        now = time.time()
        for process in processes:
            try:
                times = process.cpu_times()
                if process.pid not in self.samples and "--worker" in process.cmdline():
                    self.workers.add(process.pid)
            except psutil.Error:
                continue
            self.samples[process.pid].append((now, times.user + times.system))

    def busiest_cores(self, t0: float, t1: float) -> float | None:
        """The highest CPU use (cores) of one load-generating process between t0 and t1; None if unknown."""
        pids = self.workers or set(self.samples)
        best: float | None = None
        for pid in pids:
            inside = [(t, cpu) for t, cpu in self.samples.get(pid, []) if t0 <= t <= t1]
            if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
                continue
            cores = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
            best = cores if best is None else max(best, cores)
        return None if best is None else round(best, 3)


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
    #: `--ramp-hold SPEC` for the one run of the ramp-and-hold mode (instead of --stop-when-stable)
    ramp_hold: str | None = None
    #: the step's scenario duration when it is not the stability rule's (the ramp-and-hold run's bound)
    duration_s: float | None = None

    @property
    def max_duration_s(self) -> float:
        """The step's scenario duration: warm-up, the maximum windows, one window of alignment."""
        if self.duration_s is not None:
            return self.duration_s
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
    #: the steady windows' p50: the mean of the last third over the mean of the first (a queue that grows: >> 1)
    p50_trend: float | None = None
    #: what the step was for: "search" (a sweep's or capacity search's step), "verify" (a capacity's check)
    role: str = "search"
    #: a generative target with goodput thresholds: the share of its steady requests that met them (%)
    goodput_pct: float | None = None
    #: a generative target's time to the first token and time per output token, p99 over the steady state
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


#: open-loop kinds a step keeps at its level's rate (with their other keys: the law's shape, its seed);
#: any other shape steps as constant-rate
RATE_KINDS = ("constant-rate", "poisson", "gamma")


def open_loop_step_shape(shape: dict[str, Any], level: float, max_in_flight: int) -> dict[str, Any]:
    """The scenario's shape at ``level`` req/s: a replay keeps its file and window, rescaled to the
    level's mean rate and looped (a step lasts as long as the stability rule needs); constant-rate,
    poisson and gamma keep their law; anything else steps as constant-rate."""
    kind = shape["kind"]
    if kind == "replay":
        replay = {key: value for key, value in shape.items() if key not in ("speed", "rate", "loop")}
        return {**replay, "rate": level, "loop": True, "max_in_flight": max_in_flight}
    if kind in RATE_KINDS:
        kept = {key: value for key, value in shape.items() if key in ("kind", "cv", "seed")}
        return {**kept, "rate": level, "max_in_flight": max_in_flight}
    return {"kind": "constant-rate", "rate": level, "max_in_flight": max_in_flight}


def step_scenario(base: dict[str, Any], plan: StepPlan, level: float) -> dict[str, Any]:
    """The user's scenario (a dict from `scenario_to_dict`) at one level, for one target."""
    data = dict(base)
    data["targets"] = [t for t in base["targets"] if t["name"] == plan.target]
    data["name"] = f"{base['name']}-sweep"
    data["duration"] = plan.max_duration_s
    data["warmup"] = plan.warmup_s
    data["window"] = plan.window_s
    if plan.open_loop:
        data["shape"] = open_loop_step_shape(base["shape"], level, plan.max_in_flight)
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
    role: str = "search",
) -> StepResult:
    """Run one step as a child `inferload run --headless` and read back what it measured."""
    folder = out / "steps" / f"{index:02d}-{level:g}"
    folder.mkdir(parents=True, exist_ok=True)
    scenario_path = folder / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(step_scenario(base, plan, level), sort_keys=False))
    if plan.ramp_hold is not None:
        locust_options = ["--ramp-hold", plan.ramp_hold, "--only-summary"]
    else:
        locust_options = ["--stop-when-stable", f"{plan.rule.windows},{plan.rule.tolerance_pct:g}", "--only-summary"]
    locust_options += [
        "--no-report",
        "--loglevel",
        "WARNING",
    ]  # sweep.html shows the steps + ([] if check_first else ["--skip-start-checks"])
    started = time.monotonic()
    log_path = folder / "run.log"
    if plan.workers:  # a distributed step: the CLI starts the master and its workers
        command = [sys.executable, "-m", "inferload.cli", "run", str(scenario_path), "--headless"]
        command += ["--out", str(folder / "results"), "--run-id", f"sweep-{index:02d}", "--workers", str(plan.workers)]
        with log_path.open("wb") as log:
            lead: Child = children.start([*command, "--", *locust_options], lead=True, log=log)
    else:  # Locust itself (a fork of the sweep's warm Locust), without the CLI's own start-up in between
        arguments = locust_arguments(scenario_path, True, folder / "results", f"sweep-{index:02d}", locust_options)
        lead = children.start_locust(arguments, log_path)
    sampler = CpuSampler(lead.pid).start()
    resources = ResourceSampler(plan.server_pid, gpu).start()
    try:
        code = children.wait()
    finally:
        sampler.stop()
        resources.stop()
    step = read_step(index, level, folder / "results", plan, code, time.monotonic() - started, sampler, resources)
    return replace(step, role=role)


#: the lines of a failed step's run.log printed under its progress line, and the characters of each
REASON_LINES = 4
REASON_CHARS = 240
#: the end of run.log read for them
REASON_TAIL_BYTES = 64 * 1024


def run_log_reason(log_path: Path) -> list[str]:
    """What a step's run said as it ended without results: run.log's lines from its last that
    starts ``inferload`` (the run's own error, e.g. the start checks' verdict) to its end, else the
    log's last lines (a traceback's end); at most REASON_LINES of REASON_CHARS each, control
    characters shown escaped. Empty when there is no log to read."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - REASON_TAIL_BYTES))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line for line in tail.splitlines() if line.strip()]
    starts = [number for number, line in enumerate(lines) if line.startswith("inferload")]
    said = lines[starts[-1] :] if starts else lines[-REASON_LINES:]
    shown = [terminal_safe(line[:REASON_CHARS]) for line in said]
    return shown[:REASON_LINES]


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
    trend = p50_trend(results, plan.target)
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
        p50_trend=trend,
        goodput_pct=_num(target.generation.goodput.attainment_pct)
        if target.generation is not None and target.generation.goodput is not None
        else None,
        ttft_p99_ms=_num(target.decoupled.first_response_ms.p99) if target.generation is not None and target.decoupled else None,
        tpot_p99_ms=_num(target.generation.tpot_ms.p99) if target.generation is not None else None,
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


def p50_trend(results: Path, target: str) -> float | None:
    """How the p50 moved over the steady windows (the last, cut by the stop, left out): the mean of the
    last third over the mean of the first third; None with fewer than 3 windows or an empty one."""
    series = read_windows(results / WINDOWS_NAME).by_target.get(target)
    if series is None:
        return None
    p50s = [p50 for phase, p50 in zip(series.phase, series.p50_ms, strict=True) if phase == "steady"][:-1]
    if len(p50s) < 3 or any(p50 is None or p50 <= 0 for p50 in p50s):
        return None
    third = max(1, len(p50s) // 3)
    first, last = p50s[:third], p50s[-third:]
    return round(sum(v for v in last if v) / len(last) / (sum(v for v in first if v) / len(first)), 3)


def _num(value: float | int | None) -> float | None:
    return None if value is None else float(value)
