"""Run the real `locust` command on a scenario, as a user would, and read what it wrote.

`run_locust` is the one helper for a headless run in a process of its own (it waits for the end):
a fork of the session's warm Locust (`inferload.launch.warm_locust`: Locust and inferload already
imported), or with `INFERLOAD_WARM_LOCUST=0` (as for the CLI's sweeps) a fresh `python -m locust` subprocess.
`share_warm_locust` names that warm Locust to every `inferload` command the session starts, so the
Locust runs they start are forks of it too.
`locust_command` builds the same command line for a test that starts Locust itself (web UI).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferload.launch.child_processes import WARM_ENV
from inferload.launch.warm_locust import SHARED_SOCKET_ENV, WarmLocust
from inferload.paths import LOCUSTFILE
from tests.support.system_tools import REPO

#: the session's warm Locust, started by the first run that wants it
_forks: WarmLocust | None = None


def _warm_locust() -> WarmLocust:
    global _forks
    if _forks is None:
        _forks = WarmLocust(python_env(), reports=True)  # run_locust's runs write report.html
    return _forks


def run_forked(
    forks: WarmLocust, arguments: list[str], cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`locust ARGUMENTS` forked from `forks`, waited for, as `subprocess.run(..., capture_output=True,
    text=True, timeout=timeout_s)` says it (on the timeout the run is killed and TimeoutExpired raised)."""
    with tempfile.TemporaryDirectory(prefix="inferload-run-") as outputs:
        stdout, stderr = Path(outputs) / "stdout", Path(outputs) / "stderr"
        run = forks.start(arguments, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
        try:
            code = run.wait(timeout_s)
        except subprocess.TimeoutExpired:
            run.kill()
            raise
        return subprocess.CompletedProcess(run.args, code, stdout.read_text(errors="replace"), stderr.read_text(errors="replace"))


def share_warm_locust() -> None:
    """From now on every Locust run an `inferload` command of this session starts (its children
    inherit `INFERLOAD_WARM_LOCUST_SOCKET`) forks from the session's warm Locust, started now; nothing
    with `INFERLOAD_WARM_LOCUST=0`. A test whose subject is the run's own process (signals, the CLI's
    death) takes the `fresh_locust_processes` fixture."""
    if os.environ.get(WARM_ENV, "1") != "0":
        os.environ[SHARED_SOCKET_ENV] = str(_warm_locust().socket)


def close_warm_locust() -> None:
    """Stop the session's warm Locust, if a run started it (the test session's last teardown)."""
    global _forks
    os.environ.pop(SHARED_SOCKET_ENV, None)
    if _forks is not None:
        _forks.close()
        _forks = None


@dataclass
class LocustRun:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    results_dir: Path
    #: Locust's statistics as it exits (--json-file): every request, to the last
    stats_json: list[dict[str, Any]]
    #: Locust's failures CSV as it last rewrote it (once a second, not at exit): the kinds of
    #: failure, whose counts may miss the last second
    failures_csv: list[dict[str, str]]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.results_dir / "summary.json").read_text())

    @property
    def windows_csv(self) -> str:
        return (self.results_dir / "windows.csv").read_text()

    @property
    def windows(self) -> list[dict[str, str]]:
        """windows.csv's rows."""
        return list(csv.DictReader(io.StringIO(self.windows_csv)))


def python_env() -> dict[str, str]:
    """The environment of a child process: this venv first on PATH, the checkout importable, no InfluxDB token."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env.pop("INFLUX_TOKEN", None)
    return env


def locust_arguments(scenario_path: Path, *extra: str, locustfile: Path = LOCUSTFILE) -> list[str]:
    """`-f <locustfile> --scenario <scenario> <extra...>`: what `locust` is given."""
    return ["-f", str(locustfile), "--scenario", str(scenario_path), *extra]


def locust_command(scenario_path: Path, *extra: str, locustfile: Path = LOCUSTFILE) -> list[str]:
    """`python -m locust <locust_arguments>` with this interpreter."""
    return [sys.executable, "-m", "locust", *locust_arguments(scenario_path, *extra, locustfile=locustfile)]


def run_locust(
    scenario_path: Path,
    folder: Path,
    *extra: str,
    timeout_s: float = 120,
    results_dir: Path | None = None,
    locustfile: Path = LOCUSTFILE,
) -> LocustRun:
    """A headless run; results in `results_dir` (default `folder/results`), Locust's JSON and CSV stats in `folder`."""
    results = results_dir or folder / "results"
    stats_file = folder / "locust-stats.json"
    arguments = locust_arguments(
        scenario_path,
        "--headless",
        "--only-summary",
        "--results-dir",
        str(results),
        "--json-file",
        str(stats_file.with_suffix("")),
        "--csv",
        str(folder / "locust"),
        *extra,
        locustfile=locustfile,
    )
    started = time.monotonic()
    if os.environ.get(WARM_ENV, "1") != "0":
        done = run_forked(_warm_locust(), arguments, REPO, python_env(), timeout_s)
    else:
        command = [sys.executable, "-m", "locust", *arguments]
        done = subprocess.run(command, cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=timeout_s)
    elapsed = time.monotonic() - started
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else []
    failures_path = folder / "locust_failures.csv"
    failures = list(csv.DictReader(failures_path.open())) if failures_path.exists() else []
    return LocustRun(done.returncode, done.stdout, done.stderr, elapsed, results, stats, failures)


def unsent_before_the_stop(run: LocustRun, target: str) -> list[float]:
    """The starts (seconds) of the target's windows that counted unsent arrivals while an open-loop
    run went on. An arrival due in the run's last moments may still wait for a sender on a busy
    machine, and the stop counts it unsent, in one of the run's last two windows: those are not
    listed. Any other window listed is an arrival that waited for want of a sender."""
    windows = [w for w in run.windows if w["target"] == target]
    last = max(float(w["elapsed_s"]) for w in windows)
    return [float(w["elapsed_s"]) for w in windows if w["unsent"] not in ("", "0") and float(w["elapsed_s"]) < last - 1]


def assert_tiny_grpc_run_succeeded(run: LocustRun, target: str = "triton-grpc") -> None:
    """A run of the `tiny` model over gRPC: exit 0, requests and no failures, each answer FP32 [1, 4]."""
    assert run.returncode == 0, run.output
    figures = run.summary["targets"][target]
    assert figures["requests"] > 20 and figures["failures"] == 0, figures
    (entry,) = [e for e in run.stats_json if e["name"] == target]
    assert entry["method"] == "gRPC"
    assert entry["total_content_length"] / entry["num_requests"] == 4 * 4  # the tiny model answers FP32 [1, 4]
