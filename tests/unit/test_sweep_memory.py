"""Memory as a stop and the GPU/memory columns of a sweep, without a server: the ceilings and the stop
reason that names which memory, the sampler on a real process (this one) and on this host's real
NVML (no GPU here: the columns stay empty), the pid read from the local servers' state.json, the
options (bad values named), sweep.csv's new column, and a tune that stops a server's search."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from inferload.cli import build_parser
from inferload.errors import InferloadError, UsageError
from inferload.measure.windows import StabilityRule
from inferload.observe.sources.nvml import NvmlSource
from inferload.tune.server_config import SearchSpace
from inferload.tune.step import ResourceSampler, StepResult, process_tree_rss_mib, server_pid_from_state
from inferload.tune.stop_rules import StopRules, stop_reason
from inferload.tune.sweep import SWEEP_CSV, Sweep, SweepSettings, write_sweep
from inferload.tune.sweep_cli import settings_from_args, with_gpu
from inferload.tune.tune import CandidateResult, ServerTune, Tune, TuneSettings
from tests.support.scenario_factory import write_scenario


def step(**extra: Any) -> StepResult:
    figures: dict[str, Any] = {"requests": 100, "error_rate": 0.0, "p50_ms": 1.0, "p99_ms": 5.0, "achieved_rps": 50.0}
    return StepResult(step=1, level=50, exit_code=0, duration_s=5.0, results_dir="r", **{**figures, **extra})


# -- the stop -------------------------------------------------------------------------------------
def test_the_server_memory_ceiling_stops_the_sweep_and_says_so():
    rules = StopRules(slo={"p99_ms": 1.0}, max_server_memory_mib=500)
    # memory comes before the SLO: a breached SLO at a memory-bound step is the memory's doing
    assert stop_reason([step(server_memory_mib=612.5)], rules) == (
        "memory",
        "memory is the limit: server memory (RSS) 612.5 MiB > 500 MiB",
    )
    assert stop_reason([step(server_memory_mib=400.0)], rules) == ("slo", "SLO breached: p99_ms 5 ms > 1 ms")


def test_the_gpu_memory_ceiling_stops_the_sweep_and_says_so():
    rules = StopRules(slo={}, max_gpu_memory_mib=70000)
    reason = stop_reason([step(gpu_memory_mib=71234.0, server_memory_mib=900.0)], rules)
    assert reason == ("memory", "memory is the limit: GPU memory used 71234 MiB > 70000 MiB")


def test_no_ceiling_or_no_reading_is_never_a_memory_stop():
    assert stop_reason([step(server_memory_mib=10_000.0, gpu_memory_mib=80_000.0)], StopRules(slo={})) is None
    bounded = StopRules(slo={}, max_server_memory_mib=1, max_gpu_memory_mib=1)
    assert stop_reason([step()], bounded) is None  # not measured (no pid, no GPU): not a limit


# -- the sampler ------------------------------------------------------------------------------------
def test_the_sampler_reads_a_real_process_trees_memory():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = b'x' * (64 * 1024 * 1024); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        alone = process_tree_rss_mib(child.pid) or 0.0
        while alone < 64 and time.monotonic() < deadline:
            time.sleep(0.05)
            alone = process_tree_rss_mib(child.pid) or 0.0
        assert alone >= 64  # the child's 64 MiB are resident
        sampler = ResourceSampler(server_pid=os.getpid())
        sampler.sample()
        sampler.sample()
        figures = sampler.figures(0, time.time())
        assert figures.server_memory_mib is not None and figures.server_memory_mib >= alone  # this process + its child
        assert figures.gpu_util_pct is None and figures.gpu_memory_mib is None
    finally:
        child.kill()
        child.wait()
    assert process_tree_rss_mib(child.pid) is None  # gone


def test_on_this_host_nvml_reads_no_gpu_and_the_gpu_columns_stay_empty():
    """The real NVML path (pynvml): on a host with no NVIDIA driver the source says why and reads nothing."""
    source = NvmlSource()
    sampler = ResourceSampler(gpu=source)
    sampler.sample()
    figures = sampler.figures(0, time.time())
    if source.unavailable_reason is None:  # a host with a GPU: real figures
        assert figures.gpu_memory_mib is not None and figures.gpu_memory_mib > 0
    else:
        assert "NVML" in source.unavailable_reason or "pynvml" in source.unavailable_reason
        assert figures.gpu_util_pct is None and figures.gpu_memory_mib is None


class FakeNvml:
    """pynvml's calls as NvmlSource makes them, for two GPUs."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.used = [1024 * 1024 * 1024, 3 * 1024 * 1024 * 1024]
        self.util = [90, 20]

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=self.used[handle], total=8 * 1024**3)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=self.util[handle], memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        raise self.NVMLError("not supported")

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "H200"

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 40

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1500


def test_gpu_figures_are_the_busiest_gpus_mean_util_and_the_peak_memory_on_one_gpu():
    nvml = FakeNvml()
    sampler = ResourceSampler(gpu=NvmlSource(nvml=nvml))
    sampler.sample()
    nvml.util, nvml.used[0] = [50, 70], 5 * 1024**3
    sampler.sample()
    figures = sampler.figures(0, time.time())
    assert figures.gpu_util_pct == 80.0  # mean of 90 and 70
    assert figures.gpu_memory_mib == 5120.0
    assert sampler.figures(0, 1).gpu_util_pct is None  # no sample in the steady part


# -- the pid from the servers' state ------------------------------------------------------------------
def test_the_servers_pid_is_read_from_their_state_json(tmp_path: Path):
    (tmp_path / "state.json").write_text(json.dumps({"servers": {"triton": {"pid": os.getpid()}}}))
    assert server_pid_from_state(tmp_path, "triton") == os.getpid()
    with pytest.raises(InferloadError, match=r"state.json: servers.torchserve.pid: no torchserve recorded there"):
        server_pid_from_state(tmp_path, "torchserve")
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    (tmp_path / "state.json").write_text(json.dumps({"servers": {"triton": {"pid": int(done.stdout)}}}))
    with pytest.raises(InferloadError, match=r"servers.triton.pid: process \d+ is not running"):
        server_pid_from_state(tmp_path, "triton")
    with pytest.raises(InferloadError, match=r"--server-state: .*missing.state.json does not exist"):
        server_pid_from_state(tmp_path / "missing", "triton")
    (tmp_path / "state.json").write_text("{")
    with pytest.raises(InferloadError, match=r"--server-state: .*state.json: cannot be read"):
        server_pid_from_state(tmp_path, "triton")


# -- the options ----------------------------------------------------------------------------------
def sweep_args(*options: str) -> Any:
    return build_parser().parse_args(["sweep", "s.yaml", "--users", "1,2", *options])


def test_the_memory_options_reach_the_stop_rules():
    settings = settings_from_args(
        sweep_args("--server-pid", str(os.getpid()), "--max-server-memory", "2048", "--max-gpu-memory", "1000")
    )
    assert settings.rules.max_server_memory_mib == 2048 and settings.rules.max_gpu_memory_mib == 1000
    assert settings.server_pid == os.getpid() and settings.gpu is None  # opened last: `with_gpu`
    assert with_gpu(settings, sweep_args()).gpu is not None
    assert with_gpu(settings, sweep_args("--no-gpu")).gpu is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-server-memory", "1024"], "--max-server-memory: needs the server's process: --server-state DIR or --server-pid"),
        (["--max-gpu-memory", "10", "--no-gpu"], "--max-gpu-memory: cannot be used with --no-gpu"),
        (["--server-pid", "1", "--server-state", "x"], "--server-pid and --server-state: give one of them"),
        (["--server-pid", "999999999"], "--server-pid: no running process 999999999"),
    ],
)
def test_bad_memory_options_are_refused_naming_the_option(options: list[str], message: str, tmp_path: Path):
    with pytest.raises(UsageError) as error:
        settings_from_args(sweep_args(*options), tmp_path)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--server-pid", "1", "--max-server-memory", "0"], "argument --max-server-memory: expected a finite number above 0"),
        (["--max-gpu-memory", "-1"], "argument --max-gpu-memory: expected a finite number above 0"),
        (["--server-pid", "0"], "argument --server-pid: expected a whole number of 1 or more"),
    ],
)
def test_memory_values_out_of_range_are_refused_as_they_are_read(options: list[str], message: str, capsys):
    with pytest.raises(SystemExit) as exited:
        sweep_args(*options)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# -- the files --------------------------------------------------------------------------------------
def test_sweep_csv_keeps_its_columns_and_appends_server_memory(tmp_path: Path):
    row = step(server_memory_mib=812.3, gpu_util_pct=None, gpu_memory_mib=None).as_row()
    write_sweep(tmp_path, {"steps": [row]})
    with open(tmp_path / SWEEP_CSV, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][-8:-5] == ["gpu_util_pct", "gpu_memory_mib", "server_memory_mib"]
    assert rows[0][-5:-3] == ["p50_trend", "role"]  # the capacity search's columns, appended after
    assert rows[0][-3:] == ["goodput_pct", "ttft_p99_ms", "tpot_p99_ms"]  # a generative target's, appended last
    assert rows[0][:3] == ["step", "level", "exit_code"]
    assert rows[1][-8:] == ["", "", "812.3", "", "search", "", "", ""]  # no GPU: empty cells


# -- the tune ---------------------------------------------------------------------------------------
class NoConfigurator:
    changed = False

    def current(self) -> dict[str, Any]:
        return {}

    def apply(self, candidate: Any) -> dict[str, Any]:
        return {}

    def restore(self) -> None: ...

    def fragment_options(self) -> dict[str, Any]:
        return {}


def test_a_candidate_that_hits_the_memory_ceiling_ends_that_servers_search(tmp_path: Path):
    lines: list[str] = []
    sweep = SweepSettings(tmp_path / "s.yaml", tmp_path, StabilityRule(3, 10, 10), StopRules(slo={}, max_server_memory_mib=800))
    settings = TuneSettings(tmp_path / "s.yaml", tmp_path, sweep=sweep, space=SearchSpace(), printer=lines.append)
    tuned = Tune(settings, [ServerTune("triton", "t", "cnn", NoConfigurator())])
    tuned.save = lambda: None  # type: ignore[method-assign]
    scored: list[str] = []

    def score(tune: ServerTune, candidate: Any, start: float) -> CandidateResult:
        scored.append(candidate.name)
        limit = "server memory (RSS) 900 MiB > 800 MiB" if candidate.batching else None
        return CandidateResult("triton", candidate.name, {}, {}, 100.0 * len(scored), None, memory_limit=limit)

    tuned.score = score  # type: ignore[method-assign,assignment]
    tuned.tune_server(tuned.servers[0])
    # baseline, then the first batching candidate hit the ceiling: no second delay, no scale-out
    assert scored == ["no batching, 1 instance", "batching 100 us, 1 instance"]
    assert tuned.server_stops["triton"] == (
        "memory is the limit (batching 100 us, 1 instance): server memory (RSS) 900 MiB > 800 MiB"
    )
    assert any("no more candidates" in line for line in lines)


def test_the_tune_package_imports_no_http_library():
    """`inferload run` imports inferload.tune (for --repeat) before Locust patches ssl under gevent: an
    urllib3 imported first makes Locust's ssl context recurse (the GPU reader is imported when used)."""
    code = (
        "import sys; import inferload.cli; from inferload.tune import sweep_cli, tune_cli, step; "
        "print(sorted(m for m in ('urllib3', 'requests') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_sweep_reads_its_targets_server_pid_and_fails_a_rate_over_the_memory_ceiling(tmp_path: Path):
    target = {
        "name": "t",
        "kind": "torchserve-rest",
        "address": "http://127.0.0.1:1",
        "model": "m",
        "inputs": [{"name": "x", "shape": [4], "dtype": "FP32"}],
    }
    data = {"name": "s", "duration": "10s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    scenario = write_scenario(tmp_path, data)
    state = tmp_path / "servers"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({"servers": {"triton": {"pid": 1}, "torchserve": {"pid": os.getpid()}}}))
    rules = StopRules(slo={"p99_ms": 50.0}, max_server_memory_mib=1000)
    sweep = Sweep(SweepSettings(scenario, tmp_path / "out", StabilityRule(3, 10, 10), rules, server_state=state))
    assert sweep.plan.server_pid == os.getpid()  # the torchserve entry: the target's server
    assert sweep.passes(step(server_memory_mib=900.0))
    assert not sweep.passes(step(server_memory_mib=1100.0))


def sweep_settings(tmp_path: Path, *, resume: bool, levels: tuple[float, ...] = (1.0, 2.0)) -> SweepSettings:
    inputs = [{"name": "x", "shape": [4], "dtype": "FP32"}]
    target = {"name": "t", "kind": "triton-http", "address": "http://127.0.0.1:1", "model": "m", "inputs": inputs}
    data = {"name": "s", "duration": "10s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    rules = StopRules(slo={"p99_ms": 50.0})
    return SweepSettings(write_scenario(tmp_path, data), tmp_path / "out", StabilityRule(3, 10, 10), rules, levels, resume=resume)


def test_resume_needs_a_sweep_of_the_same_plan_and_a_new_sweep_needs_an_empty_out(tmp_path: Path):
    with pytest.raises(UsageError, match=r"--resume: nothing to resume: .*/out/sweep\.json does not exist"):
        Sweep(sweep_settings(tmp_path, resume=True))
    first = Sweep(sweep_settings(tmp_path, resume=False))
    first.save()
    with pytest.raises(UsageError, match=r"sweep\.json exists: pass --resume to carry on, or another --out"):
        Sweep(sweep_settings(tmp_path, resume=False))
    with pytest.raises(UsageError, match="is another sweep's \\(its plan differs\\)"):
        Sweep(sweep_settings(tmp_path, resume=True, levels=(1.0, 4.0)))
    assert Sweep(sweep_settings(tmp_path, resume=True)).steps == []
