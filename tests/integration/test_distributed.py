"""Distributed runs: a Locust master and two workers on separate network hosts, the server on a
third, so the traffic really crosses hosts; exact percentiles and totals across workers; a
worker that dies mid-run is reported and the run still ends cleanly.

What is tested is Locust's master and inferload's merge, not the server: the server is the
reference server (docs/reference-server.md) on the third host, each call held `HOLD_MS` in one of
`SLOTS` slots (more than the users: none waits), so the closed loop's rate, and the machine's load,
are known: 4 users at one call per hold, about 200 calls a second.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from inferload.local.reference_server import ReferenceServerProcess, reference_config_from_dict
from inferload.paths import REPO_ROOT
from inferload.run.run_key import RUN_KEY_ENV, generate_run_key
from tests.support.netns_hosts import NetnsHosts
from tests.support.reference_server import reference_target
from tests.support.scenario_factory import write_scenario
from tests.support.waiting import wait_until

MASTER_PORT = 5557
#: the reference server's port on its host, its hold per call and its slots
SERVER_PORT, HOLD_MS, SLOTS = 8001, 20.0, 8
#: the run key the master and its workers on other hosts share (set on every machine, as a user does)
RUN_KEY = generate_run_key()


def run_key_environment() -> dict[str, str]:
    """This session's environment (its TMPDIR included: tests/conftest.py) with the run key."""
    return {**os.environ, RUN_KEY_ENV: RUN_KEY}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with NetnsHosts(["servers", "master", "worker1", "worker2"]) as hosts:
        config = reference_config_from_dict(
            {
                "host": hosts.addresses["servers"],
                "grpc_port": SERVER_PORT,
                "concurrency": SLOTS,
                "delay": {"law": "fixed", "ms": HOLD_MS},
            },
            "the servers' host",
        )
        folder = tmp_path_factory.mktemp("netns-server")
        with ReferenceServerProcess(config, folder=folder, launcher=hosts.run_in("servers", [])) as server:
            assert server.grpc_port == SERVER_PORT, server.log_path.read_text()
            yield hosts


def scenario_for(hosts: NetnsHosts, folder: Path, duration: str) -> Path:
    target = reference_target("reference", "triton-grpc", f"{hosts.addresses['servers']}:{SERVER_PORT}")
    return write_scenario(
        folder, {"name": "distributed", "duration": duration, "targets": [target], "shape": {"kind": "steady", "users": 4}}
    )


def start_master(hosts: NetnsHosts, scenario: Path, results: Path, log: Path) -> subprocess.Popen[bytes]:
    """`inferload run --remote-workers 2` on the master host; its output goes to `log` (read while it runs)."""
    command = [
        sys.executable,
        "-m",
        "inferload.cli",
        "run",
        str(scenario),
        "--headless",
        "--remote-workers",
        "2",
        "--master-bind-host",
        hosts.addresses["master"],
        "--master-port",
        str(MASTER_PORT),
        "--requests-csv",
        "--out",
        str(results),
        "--",
        "--only-summary",
    ]
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            hosts.run_in("master", command), cwd=REPO_ROOT, env=run_key_environment(), stdout=output, stderr=subprocess.STDOUT
        )


def kill_machine(worker: subprocess.Popen[str]) -> None:
    """A worker machine that dies: its Locust (the CLI's child, in a session of its own) and the CLI, SIGKILLed
    Locust first. SIGKILL of the CLI alone is a clean quit: its Locust stops on the parent's death and says
    goodbye to the master, which then counts no loss."""
    for child in psutil.Process(worker.pid).children(recursive=True):
        child.send_signal(signal.SIGKILL)
    worker.send_signal(signal.SIGKILL)


def start_worker(hosts: NetnsHosts, name: str) -> subprocess.Popen[str]:
    # the documented worker command: the locustfile (scenario embedded) comes from the master, over the
    # port's CURVE (plain `locust -f - --worker` cannot reach a master with a run key)
    command = [sys.executable, "-m", "inferload.cli", "worker", "--master-host", hosts.addresses["master"]]
    command += ["--master-port", str(MASTER_PORT)]
    return subprocess.Popen(
        hosts.run_in(name, command),
        cwd="/",
        env=run_key_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def exact_p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


def test_two_workers_on_other_hosts_give_exact_percentiles_and_summed_totals(hosts, tmp_path):
    results, log = tmp_path / "results", tmp_path / "master.log"
    master = start_master(hosts, scenario_for(hosts, tmp_path, "8s"), results, log)
    workers = [start_worker(hosts, "worker1"), start_worker(hosts, "worker2")]
    master.wait(timeout=90)
    output = log.read_text()
    for worker in workers:
        worker.wait(timeout=30)

    assert master.returncode == 0, output
    summary = json.loads((results / "summary.json").read_text())
    rows = list(csv.DictReader((results / "requests.csv").open()))
    target = summary["targets"]["reference"]
    assert summary["workers"] == 2 and summary["workers_lost"] == []
    per_worker = {}
    for row in rows:
        per_worker[row["worker"]] = per_worker.get(row["worker"], 0) + 1
    assert len(per_worker) == 2 and all(count > 100 for count in per_worker.values()), per_worker
    assert target["requests"] == sum(per_worker.values()) == len(rows)
    ok = [float(row["latency_ms"]) for row in rows if row["outcome"] == "ok"]
    assert target["latency_ms"]["p99"] == pytest.approx(exact_p99(ok), rel=0.01)
    assert target["failures"] == 0


def test_a_worker_that_dies_mid_run_is_reported_and_the_run_ends_cleanly(hosts, tmp_path):
    results, log = tmp_path / "results", tmp_path / "master.log"
    started = time.monotonic()
    master = start_master(hosts, scenario_for(hosts, tmp_path, "12s"), results, log)
    survivor, doomed = start_worker(hosts, "worker1"), start_worker(hosts, "worker2")
    spawned = ("All users spawned", "Spawning is complete")  # Locust's master logs one of these once both workers run
    wait_until(lambda: any(line in log.read_text() for line in spawned), 60, "both workers connected and running their users")
    kill_machine(doomed)
    master.wait(timeout=90)
    output = log.read_text()
    survivor.wait(timeout=30)
    doomed.wait(timeout=10)

    assert time.monotonic() - started < 60
    assert master.returncode == 0, output
    summary = json.loads((results / "summary.json").read_text())
    assert summary["workers"] == 2
    assert len(summary["workers_lost"]) == 1
    assert "went missing" in output
    assert summary["targets"]["reference"]["requests"] > 0
