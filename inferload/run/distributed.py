"""`inferload run --workers N`: Locust's own master/worker mode, started for you.

The master gets a self-contained locustfile (scenario and payload files embedded, see
`inferload.run.embedded_locustfile`) written into the results folder; every worker, local or on another
machine, runs `locust -f - --worker --master-host HOST` and downloads it from the master.
Workers merge into the master's results through Locust's reports (exact histograms).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from inferload.run.embedded_locustfile import write_embedded_locustfile
from inferload.scenario.model import Scenario

WORKER_EXIT_WAIT_S = 15.0


@dataclass(frozen=True)
class DistributedRun:
    scenario: Scenario
    results_dir: Path
    run_id: str
    local_workers: int
    remote_workers: int = 0
    headless: bool = True
    master_bind_host: str = "127.0.0.1"
    master_port: int | None = None
    locust_args: list[str] = field(default_factory=list)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def master_command(run: DistributedRun, locustfile: Path, port: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--master",
        "--master-bind-host",
        run.master_bind_host,
        "--master-bind-port",
        str(port),
        "--expect-workers",
        str(run.local_workers + run.remote_workers),
        "--results-dir",
        str(run.results_dir),
        "--run-id",
        run.run_id,
    ]
    if run.headless:
        command.append("--headless")
    return command + list(run.locust_args)


def worker_command(master_host: str, port: int) -> list[str]:
    """What a worker runs, here or on another machine (it needs inferload installed)."""
    return [sys.executable, "-m", "locust", "-f", "-", "--worker", "--master-host", master_host, "--master-port", str(port)]


def run_distributed(run: DistributedRun) -> int:
    """Start the master and the local workers; wait for the master; leave nothing running."""
    run.results_dir.mkdir(parents=True, exist_ok=True)
    locustfile = write_embedded_locustfile(run.scenario, run.results_dir)
    port = run.master_port or free_port(run.master_bind_host if run.master_bind_host != "0.0.0.0" else "127.0.0.1")
    connect_host = "127.0.0.1" if run.master_bind_host in ("0.0.0.0", "*") else run.master_bind_host
    print(
        f"inferload: master on {run.master_bind_host}:{port}, {run.local_workers} local worker(s)"
        + (
            f", waiting for {run.remote_workers} more: on each machine run\n  "
            + " ".join(worker_command("<this host>", port)[2:]).replace(sys.executable, "python")
            if run.remote_workers
            else ""
        ),
        flush=True,
    )
    master = subprocess.Popen(master_command(run, locustfile, port))
    workers: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for index in range(run.local_workers):
            log = open(run.results_dir / f"worker-{index}.log", "wb")  # noqa: SIM115 (closed in finally)
            logs.append(log)
            workers.append(subprocess.Popen(worker_command(connect_host, port), stdout=log, stderr=subprocess.STDOUT))
        return master.wait()
    finally:
        if master.poll() is None:
            master.terminate()
            master.wait(timeout=30)
        for worker in workers:
            try:
                worker.wait(timeout=WORKER_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        for log in logs:
            log.close()
