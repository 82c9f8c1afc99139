"""No result lost on the ways a run can end badly, against the reference server (each call held
`HOLD_MS`; its count of answered calls tells when a run is under way): a results folder that
turns read-only mid-run (a real tmpfs remounted read-only) loses no request of --requests-csv and
the results follow it to the fallback folder; a disk that fills up leaves no 0-byte or partial
summary.json (files are written whole or not at all); a SIGKILLed CLI still gets its results
written (its Locust process is told once: the kernel's repeated parent-death signal is ignored);
`sweep --resume` after Ctrl-C runs the cut step again, and a cut step is never the best.
"""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferload.local.reference_server import ReferenceServerProcess
from inferload.results.files import read_summary
from tests.support.locust_runner import python_env
from tests.support.mounts import fill_up, remount_read_only, tmpfs
from tests.support.reference_server import answered, reference_server, reference_target
from tests.support.scenario_factory import write_scenario
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

FALLBACK = re.compile(r"writing (?:them|the results) to (\S+?)(?: instead| with requests\.csv)")
#: the reference server's hold per call and its slots (more than the users: no call waits)
HOLD_MS, SLOTS = 2.0, 8


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServerProcess]:
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as running:
        yield running


def target(server: ReferenceServerProcess) -> dict[str, object]:
    return reference_target("t", "triton-grpc", server.grpc_address, timeout="5s")


def scenario(folder: Path, server: ReferenceServerProcess, duration: str = "6s", users: int = 1) -> Path:
    data = {
        "name": "kept",
        "duration": duration,
        "warmup": "0s",
        "targets": [target(server)],
        "shape": {"kind": "steady", "users": users},
    }
    return write_scenario(folder, data)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "inferload.cli", *args],
            cwd=REPO,
            env=python_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def data_rows(path: Path) -> int:
    try:
        with path.open(newline="") as handle:
            return max(0, sum(1 for _ in csv.reader(handle)) - 1)
    except OSError:
        return 0


def fallback_folder(output: str) -> Path:
    found = FALLBACK.findall(output)
    assert found, output
    return Path(found[-1])


def test_a_results_folder_that_turns_read_only_mid_run_loses_no_request(server, tmp_path):
    with tmpfs(tmp_path / "mnt", "8m") as mounted:
        results = mounted / "results"
        run = start(
            ["run", str(scenario(tmp_path, server)), "--headless", "--requests-csv", "--out", str(results)],
            tmp_path / "log",
        )
        try:
            wait_until(lambda: data_rows(results / "requests.csv.partial") >= 20, 90, "requests.csv to fill")
            remount_read_only(mounted)
        finally:
            code = run.wait(timeout=120)
        output = (tmp_path / "log").read_text()
        assert code == 0, output
        assert "requests.csv goes on in" in output, output
        assert not (results / "summary.json").exists()  # never a partial file in the failed folder
        assert not list(results.glob(".*.tmp"))
        # the part written before it failed keeps the name that says so: no requests.csv that looks whole
        assert sorted(path.name for path in results.iterdir()) == ["requests.csv.partial"], output
    fallback = fallback_folder(output)
    summary = read_summary(fallback)
    assert summary.targets["t"].requests == data_rows(fallback / "requests.csv") > 20  # every request, none lost
    assert not (fallback / "requests.csv.partial").exists()
    assert (fallback / "windows.csv").is_file() and (fallback / "report.html").is_file()


def test_a_full_disk_leaves_no_partial_summary_and_the_results_go_to_the_fallback(server, tmp_path):
    with tmpfs(tmp_path / "mnt", "256k") as mounted:
        results = mounted / "results"
        results.mkdir()
        run = start(["run", str(scenario(tmp_path, server)), "--headless", "--out", str(results)], tmp_path / "log")
        try:
            wait_until(lambda: "All users spawned" in (tmp_path / "log").read_text(), 90, "the run to start")
            fill_up(mounted)
        finally:
            code = run.wait(timeout=120)
        output = (tmp_path / "log").read_text()
        assert code == 0, output
        written = sorted(path.name for path in results.iterdir())
        assert "summary.json" not in written and not [name for name in written if name.endswith(".tmp")], written
    fallback = fallback_folder(output)
    assert read_summary(fallback).targets["t"].requests > 0
    compared = subprocess.run(
        [sys.executable, "-m", "inferload.cli", "compare", str(fallback), str(fallback), "--json"],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compared.returncode == 0, compared.stderr


def test_a_disk_full_before_the_start_sends_requests_csv_and_the_results_to_the_fallback(server, tmp_path):
    """The probe's case: `--requests-csv` on a disk already full crashed at start with a traceback
    and left a 0-byte requests.csv."""
    with tmpfs(tmp_path / "mnt", "256k") as mounted:
        results = mounted / "results"
        results.mkdir()
        fill_up(mounted)
        done = subprocess.run(
            [sys.executable, "-m", "inferload.cli", "run", str(scenario(tmp_path, server, duration="3s")),
             "--headless", "--requests-csv", "--out", str(results)],
            cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert "Traceback" not in output and "requests.csv goes on in" in output, output
        assert list(results.iterdir()) == [], output  # no 0-byte requests.csv, no partial file
    fallback = fallback_folder(output)
    summary = read_summary(fallback)
    assert summary.targets["t"].requests > 0
    with (fallback / "requests.csv").open(newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:3] == ["time", "target", "latency_ms"]
    assert data_rows(fallback / "requests.csv") >= summary.targets["t"].requests  # warm-up 0 s: every request


@pytest.mark.usefixtures("fresh_locust_processes")  # the kernel's signal to a child of the CLI, as a user's run is
def test_a_sigkilled_cli_still_has_its_results_written(server, tmp_path):
    for attempt in range(2):  # the kernel's repeated signal came in 3 of 4 runs before: twice makes it plain
        folder = tmp_path / f"attempt-{attempt}"
        folder.mkdir()
        log = folder / "log"
        served = answered(server)
        run = start(["run", str(scenario(folder, server, "60s")), "--headless", "--out", str(folder / "results")], log)
        wait_until(lambda log=log: "All users spawned" in log.read_text(), 90, "the run to start")
        # killed once the server has answered some of the run's requests (the native engine's first call
        # may still be connecting when the users are spawned)
        wait_until(lambda served=served: answered(server) >= served + 20 or None, 30, "the run's first answers")
        threads = psutil.Process(run.pid).num_threads()
        locust = psutil.Process(run.pid).children()
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        psutil.wait_procs(locust, timeout=60)
        output = log.read_text()
        assert threads >= 2, threads  # what made the kernel send its parent-death signal more than once
        assert "again: exiting at once" not in output, output
        summary = json.loads((folder / "results" / "summary.json").read_text())
        assert summary["interrupted"] is True and summary["targets"]["t"]["requests"] > 0


def test_sweep_resume_after_ctrl_c_runs_the_cut_step_again_and_a_cut_step_is_never_best(server, tmp_path):
    path = write_scenario(
        tmp_path, {"name": "swept", "duration": "30s", "targets": [target(server)], "shape": {"kind": "steady", "users": 1}}
    )
    out = tmp_path / "out"
    options = ["--users", "1,4", "--window", "1s", "--warmup", "1s", "--max-windows", "8", "--stable-windows", "8"]
    options += ["--tolerance", "50", "--out", str(out), "--no-gpu"]
    sweep = start(["sweep", str(path), *options], tmp_path / "log")
    try:
        wait_until(lambda: (out / "steps" / "02-4" / "run.log").is_file(), 120, "step 2 to start")
        served = answered(server)  # step 1 is over: from here on, step 2's requests
        # its users are sending (more answers than its start check's few): its warm-up began before this,
        # however long its Locust took to start on a busy machine
        wait_until(lambda: answered(server) > served + 50 or None, 90, "step 2's users to send", interval_s=0.05)
        load_began = time.monotonic()
        # well past its 1 s warm-up: two steady windows (1 s each) after it, and 900 answers
        wait_until(
            lambda: (answered(server) > served + 900 and time.monotonic() - load_began > 3.0) or None,
            60,
            "step 2's load well past its warm-up",
            interval_s=0.2,
        )
    finally:
        sweep.send_signal(signal.SIGINT)
    assert sweep.wait(timeout=120) == 130, (tmp_path / "log").read_text()
    document = json.loads((out / "sweep.json").read_text())
    assert document["stopped"]["rule"] == "interrupted"
    cut = document["steps"][-1]
    assert cut["level"] == 4 and cut["exit_code"] == 130 and cut["requests"], cut  # it has figures, partial ones
    assert document["best"] is None or document["best"]["level"] == 1  # the cut step is never the best

    resumed = subprocess.run(
        [sys.executable, "-m", "inferload.cli", "sweep", str(path), *options, "--resume"],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    document = json.loads((out / "sweep.json").read_text())
    assert [step["level"] for step in document["steps"]] == [1, 4]  # step 2 ran again, to its end
    assert all(step["exit_code"] == 0 for step in document["steps"]), document["steps"]
    assert document["stopped"]["rule"] != "interrupted"
