"""A worker killed mid-run (SIGKILL, so it says nothing): `inferload run --workers 2` moves its users
(closed loop) or its arrival share (open loop) to the live worker once Locust's master declares it
missing, and summary.json reports the loss and the gap. The server is the reference server (each call
held `HOLD_MS` in one of `SLOTS` slots): what is tested is Locust's master and inferload's, not the
server, and a scripted hold keeps the closed loop's rate (and the machine's load) known.

Locust declares a worker missing after `HEARTBEAT_LIVENESS` + 1 missed heartbeats of
`HEARTBEAT_INTERVAL` (4-5 s in Locust 2.47); the re-spread follows within about a second.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from locust.runners import HEARTBEAT_INTERVAL, HEARTBEAT_LIVENESS

from inferload.local.reference_server import ReferenceServerProcess
from inferload.local.servers.procs import processes_mentioning
from tests.support.locust_runner import python_env
from tests.support.ports import free_port
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import write_scenario
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

USERS = 4
RATE = 40.0
#: the workers are processes of their own, found by their command lines and killed: not forks of a warm Locust
pytestmark = pytest.mark.usefixtures("fresh_locust_processes")

#: the reference server's hold per call and its slots (more than the users: no call waits for one)
HOLD_MS, SLOTS = 10.0, 8
#: from the kill until the master declares the worker missing: its heartbeat timeout, and slack for a busy machine
DETECTION_LIMIT_S = (HEARTBEAT_LIVENESS + 1) * HEARTBEAT_INTERVAL + 4.0
#: from "missing" until the live worker carries the whole load
RESPREAD_LIMIT_S = 3.0


@dataclass
class DistributedRun:
    process: subprocess.Popen[bytes]
    log: Path
    results: Path
    port: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        return [pid for pid in processes_mentioning(f"--master-port {self.port}") if b" --worker --master-host " in cmdline(pid)]


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServerProcess]:
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as running:
        yield running


def target(server: ReferenceServerProcess, **extra: Any) -> dict[str, Any]:
    return reference_target("t", "triton-grpc", server.grpc_address, timeout="5s", **extra)


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def start_run(scenario: Path, tmp_path: Path) -> DistributedRun:
    port = free_port()
    results, log = tmp_path / "results", tmp_path / "output.log"
    command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--workers", "2"]
    command += ["--master-port", str(port), "--out", str(results), "--", "--only-summary"]
    with log.open("wb") as sink:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(command, cwd=REPO, env=python_env(), stdout=sink, stderr=subprocess.STDOUT)
    return DistributedRun(process, log, results, port)


def kill_one_worker_mid_run(run: DistributedRun) -> float:
    """Once both workers run their users: SIGKILL one of them; the time of the kill."""
    spawned = ("All users spawned", "Spawning is complete")  # Locust's master logs one of these once both workers run
    wait_until(
        lambda: run.process.poll() is not None or any(line in run.output() for line in spawned), 60, "both workers running"
    )
    assert run.process.poll() is None, run.output()
    wait_until(lambda: len(run.worker_pids()) == 2, 10, "the two worker processes")
    os.kill(run.worker_pids()[1], signal.SIGKILL)
    return time.time()


def finish(run: DistributedRun) -> tuple[dict[str, Any], list[dict[str, str]]]:
    code = run.process.wait(timeout=90)
    assert code == 0, run.output()
    assert processes_mentioning(f"--master-port {run.port}") == []  # the live worker quit with the master
    summary = json.loads((run.results / "summary.json").read_text())
    rows = list(csv.DictReader((run.results / "windows.csv").open()))
    return summary, rows


def the_loss(summary: dict[str, Any], killed_at: float, output: str) -> tuple[float, float]:
    """The one loss summary.json reports: when the master declared it (epoch s) and the gap until re-spread."""
    assert summary["workers"] == 2 and len(summary["workers_lost"]) == 1, output
    (loss,) = summary["worker_losses"]
    assert loss["worker"] == summary["workers_lost"][0]
    lost_at = datetime.fromisoformat(loss["lost_at"]).timestamp()
    assert 0 < lost_at - killed_at < DETECTION_LIMIT_S, (lost_at - killed_at, output)
    assert loss["respread_after_s"] is not None and 0 <= loss["respread_after_s"] < RESPREAD_LIMIT_S, loss
    print(f"missing after {lost_at - killed_at:.1f} s, re-spread after {loss['respread_after_s']:.2f} s")
    return lost_at, lost_at + loss["respread_after_s"]


def windows_between(rows: list[dict[str, str]], start: float, end: float) -> list[dict[str, str]]:
    """Whole windows inside [start, end) (epoch s)."""
    inside = []
    for row in rows:
        begins = datetime.fromisoformat(row["window_start"]).timestamp()
        if begins >= start and begins + 1.0 <= end:
            inside.append(row)
    return inside


def run_end(summary: dict[str, Any]) -> float:
    return datetime.fromisoformat(summary["started_at"]).timestamp() + summary["duration_s"]


def test_closed_loop_a_killed_workers_users_move_to_the_live_worker(server, tmp_path):
    shape = {"kind": "steady", "users": USERS, "spawn_rate": 100}
    data = {"name": "worker-loss", "duration": "18s", "targets": [target(server)], "shape": shape}
    scenario = write_scenario(tmp_path, data)
    run = start_run(scenario, tmp_path)
    killed_at = kill_one_worker_mid_run(run)
    summary, rows = finish(run)

    _, respread_at = the_loss(summary, killed_at, run.output())
    after = windows_between(rows, respread_at + 1.0, run_end(summary) - 1.0)
    assert len(after) >= 3, (respread_at, rows)
    assert [int(row["users"]) for row in after] == [USERS] * len(after), after  # the live worker runs all the users
    assert all(int(row["requests"]) > 0 and int(row["failures"]) == 0 for row in after), after


def test_open_loop_a_killed_workers_arrival_share_moves_to_the_live_worker(server, tmp_path):
    shape = {"kind": "constant-rate", "rate": RATE, "max_in_flight": 8}
    data = {"name": "worker-loss-open", "duration": "18s", "targets": [target(server)], "shape": shape}
    scenario = write_scenario(tmp_path, data)
    run = start_run(scenario, tmp_path)
    killed_at = kill_one_worker_mid_run(run)
    summary, rows = finish(run)

    lost_at, respread_at = the_loss(summary, killed_at, run.output())
    # the live worker alone, at its old share: the windows begun after the kill and ended before the re-spread
    # (at least two whole ones, the master taking 3 s or more to declare the loss; with a second's margin
    # each side there were none when it took 3.0 s)
    before = windows_between(rows, killed_at, respread_at)
    after = windows_between(rows, respread_at + 1.0, run_end(summary) - 1.0)
    assert len(before) >= 1 and len(after) >= 3, (killed_at, lost_at, respread_at, rows)
    assert all(float(row["target_rps"]) <= 0.6 * RATE for row in before), before
    for row in after:  # the live worker draws the whole rate again, and sends it
        assert abs(float(row["target_rps"]) - RATE) <= 0.15 * RATE, after
        assert float(row["rps"]) >= 0.8 * RATE, after


def test_a_stalled_worker_that_comes_back_is_told_to_quit_and_the_users_stay_as_asked(server, tmp_path):
    """SIGSTOP: the worker says nothing and is declared missing, its users move; SIGCONT: it comes back
    with its old users. Before, Locust took it back and ran 6 users where the shape asked for 4."""
    # the stalled worker's calls in flight time out: real failures, allowed here
    shape = {"kind": "steady", "users": USERS, "spawn_rate": 100}
    data = {"name": "worker-stall", "duration": "28s", "targets": [target(server, slo={"error_rate": 0.01})], "shape": shape}
    scenario = write_scenario(tmp_path, data)
    run = start_run(scenario, tmp_path)
    wait_until(lambda: "All users spawned" in run.output() or run.process.poll() is not None, 60, "both workers running")
    wait_until(lambda: len(run.worker_pids()) == 2, 10, "the two worker processes")
    stalled = run.worker_pids()[1]
    os.kill(stalled, signal.SIGSTOP)
    try:
        wait_until(lambda: "went missing" in run.output(), DETECTION_LIMIT_S + 5, "the stalled worker declared missing")
        wait_until(lambda: "load is on the live workers again" in run.output(), 10, "its users moved to the live worker")
    finally:
        os.kill(stalled, signal.SIGCONT)
    wait_until(lambda: "came back" in run.output(), 15, "the worker told to quit when it came back")
    summary, rows = finish(run)

    (loss,) = summary["worker_losses"]
    assert loss["returned_after_s"] is not None and loss["returned_after_s"] > 0, loss
    returned_at = datetime.fromisoformat(loss["lost_at"]).timestamp() + loss["returned_after_s"]
    after = windows_between(rows, returned_at + 2.0, run_end(summary) - 1.0)
    assert len(after) >= 3, (returned_at, rows)
    assert [int(row["users"]) for row in after] == [USERS] * len(after), after  # not 6: the old users are gone
