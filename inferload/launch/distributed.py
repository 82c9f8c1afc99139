"""`inferload run --workers N`: Locust's own master/worker mode, started for you.

The master gets a self-contained locustfile (scenario and payload files embedded, see
`inferload.launch.embedded_locustfile`) written into the results folder and signed with the run key;
local workers run that file, workers on other machines run `inferload worker --master-host HOST`,
which downloads it from the master and runs it only when its signature checks out. Workers merge
into the master's results through Locust's reports (exact histograms), signed with the run key:
`INFERLOAD_RUN_KEY`, made here for local workers when unset, required (the same on every machine)
when workers on other machines are expected (see `inferload.run.run_key`, docs/operations.md).

The master and the local workers run as `ChildProcesses`: a signal to the CLI goes to the master
only, which tells its workers to quit (they send their last reports first) and writes the results;
nothing the CLI started outlives it. A headless master gives up with exit code 2 when its workers
have not all joined within `worker_wait_s` (`--worker-wait`, see `inferload.run.workers`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import zmq

from inferload.errors import InferloadError, UsageError
from inferload.launch.child_processes import LOCUST_ENTRY, ChildProcesses
from inferload.launch.embedded_locustfile import write_embedded_locustfile
from inferload.run.run_key import RUN_KEY_ENV, LocustfileNotTrusted, run_key_for_distributed_run, verify_locustfile
from inferload.run.secure_port import client_options, derive_keys
from inferload.scenario.schema import Scenario

# `inferload worker`'s first step: download the master's locustfile and check its signature.
#
# Locust's own `locust -f - --worker` downloads the locustfile from the master and runs it, whoever
# the master is (and cannot reach a master whose port speaks CURVE: `inferload.run.secure_port`). `inferload worker` asks the master for it the same way (Locust's `locustfile`
# message over ZeroMQ: msgpack of `(type, data, node id)`), checks that it is signed with this
# machine's run key (`inferload.run.run_key.verify_locustfile`) and only then writes it to a private
# folder, for `locust -f <that file> --worker`. Plain pyzmq and msgpack, without importing Locust:
# the CLI process is not monkey-patched by gevent.
#: as long as Locust's own worker waits for its master (CONNECT_TIMEOUT x CONNECT_RETRY_COUNT)
FETCH_TIMEOUT_S = 300.0
ASK_EVERY_S = 1.0
WAITING_NOTE_EVERY_S = 30.0
#: a bigger answer is dropped by ZeroMQ itself (the scenario's payload files travel inside the locustfile)
MAX_ANSWER_BYTES = 512 * 1024 * 1024
LOCUSTFILE_NAME = "locustfile.py"


class LocustfileFetchError(InferloadError):
    """The master did not serve one locustfile in time."""


def fetch_locustfile(master_host: str, master_port: int, key: bytes, timeout_s: float = FETCH_TIMEOUT_S) -> str:
    """The text of the one locustfile the master at `master_host:master_port` serves (over CURVE with
    `key`'s keys: a master without this run key never completes the connection, `inferload.run.secure_port`)."""
    client_id = f"{socket.gethostname()}_inferload_fetch_{uuid.uuid4().hex}"
    request = msgpack.packb(("locustfile", {"version": importlib.metadata.version("locust")}, client_id))
    where = f"{master_host}:{master_port}"
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.IDENTITY, client_id.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_ANSWER_BYTES)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # no request queued before the master is there: one answer, not a pile
        client_options(sock, derive_keys(key))
        sock.connect(f"tcp://{master_host}:{master_port}")
        started = time.monotonic()
        next_note = started + WAITING_NOTE_EVERY_S
        while (now := time.monotonic()) < started + timeout_s:
            if now >= next_note:
                sys.stderr.write(f"inferload worker: waiting for the master at {where} to send its locustfile ...\n")
                next_note = now + WAITING_NOTE_EVERY_S
            with contextlib.suppress(zmq.Again):  # not connected yet: ask again in a moment
                sock.send(request, zmq.NOBLOCK)
            if sock.poll(int(ASK_EVERY_S * 1000), zmq.POLLIN):
                return _locustfile_text(sock.recv(), where)
    finally:
        sock.close()
        context.term()
    raise LocustfileFetchError(
        f"the master at {where} sent no locustfile within {timeout_s:g} s: is it running, reachable, and started with this"
        f" machine's {RUN_KEY_ENV}? (a master with another key is never connected to)"
    )


def _locustfile_text(frame: bytes, where: str) -> str:
    try:
        kind, data, _ = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise LocustfileFetchError(f"the master at {where} sent something that is not a Locust message ({error})") from None
    if kind != "locustfile" or not isinstance(data, dict):
        raise LocustfileFetchError(f"the master at {where} answered {kind!r}, not a locustfile")
    if "error" in data:
        raise LocustfileFetchError(f"the master at {where} could not send its locustfile: {data['error']}")
    files: Any = data.get("locustfiles")
    if not (
        isinstance(files, list) and len(files) == 1 and isinstance(files[0], dict) and isinstance(files[0].get("contents"), str)
    ):
        raise LocustfileFetchError(
            f"the master at {where} did not send exactly one locustfile (is it an `inferload run` master?)"
        )
    return str(files[0]["contents"])


def fetch_verified_locustfile(
    master_host: str, master_port: int, key: bytes, folder: Path, timeout_s: float = FETCH_TIMEOUT_S
) -> Path:
    """Download the master's locustfile, check its signature with `key`, write it into `folder`."""
    text = fetch_locustfile(master_host, master_port, key, timeout_s)
    try:
        verify_locustfile(text, key)
    except LocustfileNotTrusted as error:
        raise LocustfileNotTrusted(
            f"refusing to run the locustfile the master at {master_host}:{master_port} served: {error}"
        ) from None
    path = folder / LOCUSTFILE_NAME
    path.write_text(text)
    return path


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


#: the lowest port `free_port` looks at (below it: the well-known and registered services' usual ports)
FREE_PORTS_FROM = 10_000
#: the start of the kernel's range of ports for outgoing connections, where it says none
EPHEMERAL_LOW_DEFAULT = 32_768
#: "LOW-HIGH": the ports `free_port` draws from (HIGH excluded), in place of its default range; processes
#: that start servers side by side (the test runner's sessions) each get their own, so that none draws a
#: port another has drawn and not bound yet
FREE_PORTS_ENV = "INFERLOAD_FREE_PORTS"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW_DEFAULT


def free_port_range() -> tuple[int, int]:
    """The ports `free_port` draws from, LOW included and HIGH excluded: `INFERLOAD_FREE_PORTS` where it is
    set (UsageError when it is not LOW-HIGH with 1024 <= LOW < HIGH <= 65536), else from `FREE_PORTS_FROM`
    to the kernel's ephemeral range."""
    value = os.environ.get(FREE_PORTS_ENV, "").strip()
    if not value:
        return FREE_PORTS_FROM, _ephemeral_low()
    low_text, _, high_text = value.partition("-")
    if low_text.strip().isdigit() and high_text.strip().isdigit():
        low, high = int(low_text), int(high_text)
        if 1024 <= low < high <= 65536:
            return low, high
    raise UsageError(
        f"{FREE_PORTS_ENV}={value!r}: expected LOW-HIGH, the ports servers may be given, 1024 <= LOW < HIGH <= 65536"
    )


def free_port(host: str = "127.0.0.1", taken: Collection[int] = ()) -> int:
    """A TCP port that nothing binds on `host` right now and that is not in `taken`, for a server to
    bind next: drawn at random from `free_port_range()`, by default below the kernel's ephemeral range,
    the ports it gives outgoing connections, so that no client's connection can take it before the
    server binds it (port 0's choice is in that range: a TorchServe given such a port in a busy test
    session found it in use when it bound it). The kernel's choice only where no port in the range is free."""
    low, high = free_port_range()
    draw = random.SystemRandom()  # not the random module's state: a test may seed it in several sessions at once
    if high > low + 1:
        for _ in range(200):
            port = draw.randrange(low, high)
            if port in taken:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    continue
            return port
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def master_arguments(run: DistributedRun, locustfile: Path, port: int) -> list[str]:
    """What `locust` is given for the master of `run` (`ChildProcesses.start_locust`)."""
    command = [
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


def worker_arguments(master_host: str, port: int, locustfile: str = "-") -> list[str]:
    """What `locust` is given for a worker (it needs inferload installed) running `locustfile`: a local
    worker, the master's own file; `inferload worker`, the file it downloaded and verified; "-",
    whatever the master serves (Locust downloads it and checks nothing)."""
    return ["-f", locustfile, "--worker", "--master-host", master_host, "--master-port", str(port)]


def worker_command(master_host: str, port: int, locustfile: str = "-") -> list[str]:
    """That worker as a process of its own (`inferload worker`)."""
    return [sys.executable, "-m", LOCUST_ENTRY, *worker_arguments(master_host, port, locustfile)]


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
        children.start_locust(master_arguments(run, locustfile, port))
        for index in range(run.local_workers):
            worker = worker_arguments(connect_host, port, str(locustfile))
            children.start_locust(worker, run.results_dir / f"worker-{index}.log", lead=False)
        return children.wait()
