"""Every server left as found, on the real servers: a tune killed with SIGKILL mid-candidate leaves
Triton's and TorchServe's model changed (the defect: the originals lived only in its memory) and a
journal entry, which `inferload restore` and the next `inferload tune` put back; SIGTERM and SIGINT
stop a tune at once, put the servers back and exit 143/130; a traced run whose Locust process is
killed leaves Triton tracing, and the next run against that Triton puts the trace settings back.

"As found" is checked on the servers' own answers: Triton's model config API (the whole config),
TorchServe's describe-model (its registration: `REGISTRATION_KEYS`; `loadedAtStartup` and the
workers' ids change with any re-registration), Triton's trace settings API (every setting).
Each test has its own journal folder (`INFERLOAD_JOURNAL_DIR`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.triton_local import trace_arguments
from inferload.run.server_changes import REGISTRATION_KEYS, ServerJournal
from tests.support.example_triton import ExampleTriton, example_triton
from tests.support.locust_runner import python_env
from tests.support.scenario_factory import cnn_target, write_scenario
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

SEARCH = ["--slo", "p99_ms=50", "--precision", "60", "--window", "1s", "--warmup", "1s", "--max-windows", "3"]
SEARCH += ["--stable-windows", "2", "--tolerance", "30", "--max-unsent", "0.05", "--start-rate", "100"]


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def loaded_config(url: str) -> Any:
    """A Triton model's config, or None while the model is not loaded (404: between an unload and a load)."""
    try:
        return get(url)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def registration(management: str) -> dict[str, Any]:
    described = get(f"{management}/models/cnn")[0]
    return {key: described[key] for key in REGISTRATION_KEYS}


def environment(journal: Path) -> dict[str, str]:
    return {**python_env(), "INFERLOAD_JOURNAL_DIR": str(journal)}


def inferload(*args: str, journal: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inferload.cli", *args]
    return subprocess.run(command, cwd=REPO, env=environment(journal), capture_output=True, text=True, timeout=timeout_s)


def start(args: list[str], journal: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(  # its own session: a signal reaches only the CLI, as `kill PID` would
            [sys.executable, "-m", "inferload.cli", *args],
            cwd=REPO,
            env=environment(journal),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def tune_args(tmp_path: Path, server: str, target: dict[str, Any], *options: str) -> list[str]:
    scenario = write_scenario(
        tmp_path, {"name": "tune", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    return ["tune", str(scenario), "--servers", server, "--out", str(tmp_path / "out"), *SEARCH, *options]


def wait_gone(process: subprocess.Popen[bytes], timeout_s: float, log: Path | None = None) -> int:
    """The CLI's exit code once it has exited within `timeout_s`; else it is killed with its process
    group and the test fails with its output (`log`) and its steps' run.log, which say where it was."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session (`start`): the CLI and its helpers
        process.wait()
        if log is None:
            raise
        said = [f"== {log}\n{log.read_text(errors='replace')[-4000:]}"]
        said += [f"== {run}\n{run.read_text(errors='replace')[-3000:]}" for run in sorted(log.parent.glob("**/run.log"))]
        pytest.fail(f"the CLI had not exited {timeout_s:g} s later:\n" + "\n".join(said))


def first_step_running(out: Path) -> bool:
    return any(out.glob("*/01/steps/01-*/run.log"))


def cnn_successes(triton_url: str) -> int:
    """Triton's count of the cnn model's successful requests so far."""
    [model] = get(f"{triton_url}/v2/models/cnn/stats")["model_stats"]
    return int(model["inference_stats"]["success"]["count"])


@pytest.fixture
def triton_url(local_servers) -> str:
    return f"http://127.0.0.1:{local_servers.ports.triton_http}"


@pytest.fixture
def management(local_servers) -> str:
    return f"http://127.0.0.1:{local_servers.ports.ts_management}"


def test_a_tune_killed_on_triton_leaves_a_journal_that_restore_puts_back(local_servers, triton_url, tmp_path):
    before = get(f"{triton_url}/v2/models/cnn/config")
    journal = tmp_path / "journal"
    target = cnn_target("triton", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    args = tune_args(tmp_path, "triton", target, "--triton-url", triton_url, "--triton-delays-us", "2000")
    tune = start(args, journal, tmp_path / "tune.log")
    try:  # the baseline (no batching) is loaded, and written down before
        wait_until(lambda: "dynamic_batching" not in get(f"{triton_url}/v2/models/cnn/config"), 120, "the baseline loaded")
        assert len(ServerJournal(journal).entries()) == 1
    finally:
        tune.send_signal(signal.SIGKILL)
        wait_gone(tune, 30)
    wait_until(lambda: not processes_mentioning(str(tmp_path / "out")), 30, "the tune's step to end")
    # left changed, what the journal is for: another config, or the model unloaded (a kill between a
    # candidate's unload and its load)
    assert loaded_config(f"{triton_url}/v2/models/cnn/config") != before

    restored = inferload("restore", journal=journal)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "inferload: restored model 'cnn': the model config on Triton at" in restored.stdout, restored.stdout
    assert "unloaded and loaded again from its config.pbtxt" in restored.stdout
    assert get(f"{triton_url}/v2/models/cnn/config") == before
    assert ServerJournal(journal).entries() == []


def test_a_tune_killed_on_torchserve_is_put_back_by_the_next_tune(local_servers, management, tmp_path):
    before = registration(management)
    journal = tmp_path / "journal"
    target = cnn_target("torchserve", "torchserve-rest", f"127.0.0.1:{local_servers.ports.ts_inference}")
    (tmp_path / "first").mkdir()
    args = tune_args(tmp_path / "first", "torchserve", target, "--torchserve-management", management)
    tune = start(args, journal, tmp_path / "tune.log")
    try:  # the baseline: batch 1, no delay
        wait_until(lambda: registration(management)["batchSize"] == 1, 120, "the baseline registered", ignore=(OSError, KeyError))
        assert len(ServerJournal(journal).entries()) == 1
    finally:
        tune.send_signal(signal.SIGKILL)
        wait_gone(tune, 30)
    wait_until(lambda: not processes_mentioning(str(tmp_path / "first")), 30, "the tune's step to end")
    assert registration(management) != before  # left at batch 1 / 0 ms

    # the next tune against that TorchServe puts it back first (a 1 s budget: then it measures nothing)
    (tmp_path / "next").mkdir()
    following = inferload(
        *tune_args(tmp_path / "next", "torchserve", target, "--torchserve-management", management, "--budget", "1s"),
        journal=journal,
    )
    assert following.returncode == 1, following.stdout + following.stderr  # no candidate fitted the budget
    assert "inferload: restored model 'cnn': the registration on TorchServe at" in following.stdout, following.stdout
    assert registration(management) == before
    assert ServerJournal(journal).entries() == []


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_tune_at_once_puts_the_server_back_and_keeps_what_was_measured(
    local_servers, management, tmp_path, stop, code
):
    before = registration(management)
    journal = tmp_path / "journal"
    target = cnn_target("torchserve", "torchserve-rest", f"127.0.0.1:{local_servers.ports.ts_inference}")
    tune = start(tune_args(tmp_path, "torchserve", target, "--torchserve-management", management), journal, tmp_path / "log")
    try:
        wait_until(lambda: first_step_running(tmp_path / "out"), 120, "the first step to start")
    finally:
        tune.send_signal(stop)
    assert wait_gone(tune, 120, tmp_path / "log") == code, (tmp_path / "log").read_text()
    output = (tmp_path / "log").read_text()
    assert "[torchserve] putting the original settings back ..." in output, output
    document = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert document["stopped"] == "interrupted"
    assert len(document["candidates"]) == 1 and document["candidates"][0]["error"] == "interrupted"  # no other started
    assert document["winners"] == {}  # a candidate cut short is never the best
    assert registration(management) == before
    assert ServerJournal(journal).entries() == []
    assert not processes_mentioning(str(tmp_path / "out"))


def test_a_second_signal_during_a_step_ends_the_tune_at_once_and_restore_puts_the_server_back(
    local_servers, triton_url, tmp_path
):
    """Two SIGINTs 0.2 s apart while a step runs: the tune exits 130 at once, as a second signal
    between steps does, without waiting for the step or putting the server back; the journal keeps
    what to put back, and `inferload restore` does."""
    before = get(f"{triton_url}/v2/models/cnn/config")
    journal = tmp_path / "journal"
    target = cnn_target("triton", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    args = tune_args(tmp_path, "triton", target, "--triton-url", triton_url, "--triton-delays-us", "2000")
    tune = start(args, journal, tmp_path / "tune.log")
    try:  # the step's load is on (Triton answers it): the first signal makes it write its results, which takes seconds
        wait_until(lambda: first_step_running(tmp_path / "out"), 120, "the first step to start")
        served = cnn_successes(triton_url)  # the candidate is loaded before its first step starts
        wait_until(lambda: cnn_successes(triton_url) > served + 50, 60, "the first step's load")
    finally:
        tune.send_signal(signal.SIGINT)
        time.sleep(0.2)
        tune.send_signal(signal.SIGINT)
    assert wait_gone(tune, 10, tmp_path / "tune.log") == 130, (tmp_path / "tune.log").read_text()
    output = (tmp_path / "tune.log").read_text()
    assert "inferload tune: SIGINT again: exiting at once; the journal keeps what to put back" in output, output
    assert "putting the original settings back" not in output, output
    wait_until(lambda: not processes_mentioning(str(tmp_path / "out")), 30, "the tune's step to end")
    assert len(ServerJournal(journal).entries()) == 1
    restored = inferload("restore", journal=journal)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert get(f"{triton_url}/v2/models/cnn/config") == before
    assert ServerJournal(journal).entries() == []


# -- a traced run -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def traced_triton(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Triton of its own with a trace file (tracing off): Triton 2.51 has crashed with tracing on."""
    work = tmp_path_factory.mktemp("triton-left-tracing")
    with example_triton(work, {"tail_queue": "tail_queue"}, *trace_arguments(work / "trace.json")) as server:
        yield server


def trace_settings(server: ExampleTriton) -> dict[str, Any]:
    return dict(get(f"http://{server.http}/v2/models/tail_queue/trace/setting"))


def traced_scenario(folder: Path, server: ExampleTriton, duration: str, trace: dict[str, Any] | None) -> Path:
    target: dict[str, Any] = {
        "name": "t",
        "kind": "triton-http",
        "address": server.http,
        "model": "tail_queue",
        "inputs": [{"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "zeros"}}],
    }
    if trace is not None:
        target["trace"] = trace
    data = {"name": "traced", "duration": duration, "warmup": "0s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    folder.mkdir(parents=True, exist_ok=True)
    return write_scenario(folder, data)


@pytest.mark.usefixtures("fresh_locust_processes")  # the run's Locust, a child of the CLI, is what is killed
def test_a_killed_traced_run_leaves_tracing_on_and_the_next_run_puts_it_back(traced_triton, tmp_path):
    before = trace_settings(traced_triton)
    assert before["trace_level"] == ["OFF"], before
    journal = tmp_path / "journal"
    scenario = traced_scenario(tmp_path / "traced", traced_triton, "60s", {"rate": 0.02})
    run = start(["run", str(scenario), "--headless", "--out", str(tmp_path / "traced" / "results")], journal, tmp_path / "log")
    try:
        wait_until(lambda: trace_settings(traced_triton)["trace_level"] == ["TIMESTAMPS"], 90, "tracing on")
        locust = [child for child in psutil.Process(run.pid).children(recursive=True) if "locust" in " ".join(child.cmdline())]
        assert locust, "the run's Locust process"
        for process in locust:
            process.kill()  # SIGKILL: nothing of it runs again
    finally:
        run.wait(timeout=60)
    assert trace_settings(traced_triton)["trace_level"] == ["TIMESTAMPS"]  # left tracing: the defect
    assert len(ServerJournal(journal).entries()) == 1

    following = traced_scenario(tmp_path / "next", traced_triton, "2s", None)
    done = inferload("run", str(following), "--headless", "--out", str(tmp_path / "next" / "results"), journal=journal)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restored model 'tail_queue': the trace settings on Triton at" in done.stdout + done.stderr
    assert trace_settings(traced_triton) == before
    assert ServerJournal(journal).entries() == []
    assert (tmp_path / "next" / "results" / "summary.json").is_file()
