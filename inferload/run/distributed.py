"""`inferload run --workers N`: Locust's own master/worker mode, started for you.

The master gets a self-contained locustfile (scenario and payload files embedded, see
`inferload.run.embedded_locustfile`) written into the results folder and signed with the run key;
local workers run that file, workers on other machines run `inferload worker --master-host HOST`,
which downloads it from the master and runs it only when its signature checks out. Workers merge
into the master's results through Locust's reports (exact histograms), signed with the run key:
`INFERLOAD_RUN_KEY`, made here for local workers when unset, required (the same on every machine)
when workers on other machines are expected (see `inferload.run.run_key`, docs/operations.md).

The master and the local workers run as `ChildProcesses`: a signal to the CLI goes to the master
only, which tells its workers to quit (they send their last reports first) and writes the results;
nothing the CLI started outlives it. A headless master gives up with exit code 2 when its workers
have not all joined within `worker_wait_s` (`--worker-wait`, see `inferload.run.worker_wait`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from inferload.run.child_processes import ChildProcesses
from inferload.run.command import LOCUST_ENTRY
from inferload.run.embedded_locustfile import write_embedded_locustfile
from inferload.run.run_key import RUN_KEY_ENV, run_key_for_distributed_run
from inferload.scenario.model import Scenario


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
    worker_wait_s: float = 0.0  # headless master: exit 2 if workers are missing after this long (0: wait forever)
    web_host: str = "127.0.0.1"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def master_command(run: DistributedRun, locustfile: Path, port: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        LOCUST_ENTRY,
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
        command += ["--headless", "--worker-wait", f"{run.worker_wait_s:g}"]
    else:
        command += ["--web-host", run.web_host]
    return command + list(run.locust_args)


def worker_command(master_host: str, port: int, locustfile: str = "-") -> list[str]:
    """A Locust worker (it needs inferload installed) running `locustfile`: a local worker, the
    master's own file; `inferload worker`, the file it downloaded and verified; "-", whatever the
    master serves (Locust downloads it and checks nothing)."""
    command = [sys.executable, "-m", LOCUST_ENTRY, "-f", locustfile, "--worker"]
    return [*command, "--master-host", master_host, "--master-port", str(port)]


@contextlib.contextmanager
def run_key_in_environment(key: str) -> Iterator[None]:
    """`INFERLOAD_RUN_KEY` set for the child processes started inside the block (then as it was)."""
    previous = os.environ.get(RUN_KEY_ENV)
    os.environ[RUN_KEY_ENV] = key
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(RUN_KEY_ENV, None)
        else:
            os.environ[RUN_KEY_ENV] = previous


def run_distributed(run: DistributedRun) -> int:
    """Start the master and the local workers; wait for the master; leave nothing running."""
    key = run_key_for_distributed_run(run.remote_workers, os.environ)  # RunKeyError: remote workers and no key
    run.results_dir.mkdir(parents=True, exist_ok=True)
    locustfile = write_embedded_locustfile(run.scenario, run.results_dir, key.encode())
    port = run.master_port or free_port(run.master_bind_host if run.master_bind_host != "0.0.0.0" else "127.0.0.1")
    connect_host = "127.0.0.1" if run.master_bind_host in ("0.0.0.0", "*") else run.master_bind_host
    print(
        f"inferload: master on {run.master_bind_host}:{port}, {run.local_workers} local worker(s)"
        + (
            f", waiting for {run.remote_workers} more: on each machine, with {RUN_KEY_ENV} set to this run's key, run\n  "
            f"inferload worker --master-host <this host> --master-port {port}"
            if run.remote_workers
            else ""
        ),
        flush=True,
    )
    with run_key_in_environment(key), ChildProcesses(signal_is_quit=not run.headless) as children:
        children.start(master_command(run, locustfile, port), lead=True)
        for index in range(run.local_workers):
            with open(run.results_dir / f"worker-{index}.log", "wb") as log:  # the worker keeps its own copy
                children.start(worker_command(connect_host, port, str(locustfile)), log=log)
        return children.wait()
