"""Operating `inferload` as a user does: a master that does not wait forever for its workers, and a web
UI that stays on this machine unless asked. (`servers up|status|down` with the default, relative
state dir from a folder of its own: tests/integration/test_readme_commands.py, as the README types them.)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferload.local.servers.ports import is_port_open
from inferload.local.servers.procs import processes_mentioning
from inferload.run.run_key import RUN_KEY_ENV, generate_run_key
from tests.support.locust_runner import python_env
from tests.support.ports import free_port
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


def inferload_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "inferload.cli", *args]


@pytest.fixture
def scenario(local_servers, tmp_path) -> Path:
    target = tiny_target("t", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    data = {"name": "operations", "duration": "60s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    return write_scenario(tmp_path, data)


def test_a_master_whose_workers_never_join_exits_2_naming_the_wait(scenario, tmp_path):
    command = inferload_command(
        "run", str(scenario), "--headless", "--remote-workers", "1", "--worker-wait", "3", "--out", str(tmp_path / "results")
    )
    env = {**python_env(), RUN_KEY_ENV: generate_run_key()}  # workers on other machines share the master's key
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    took_s = time.monotonic() - started

    assert done.returncode == 2, done.stdout + done.stderr
    assert took_s < 15, took_s  # 3 s of waiting, Locust's start and stop around it
    assert "0 of 1 expected worker(s) joined within 3 s (--worker-wait 3)" in done.stderr
    assert "Traceback" not in done.stderr
    assert processes_mentioning(str(tmp_path)) == []


def listening_addresses(port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on `port` (hex, as /proc/net/tcp{,6} write them)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


def non_loopback_ipv4() -> str | None:
    """This machine's address on its default route, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the source address
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_the_web_ui_listens_on_loopback_by_default(scenario, tmp_path):
    port = free_port()
    command = inferload_command("run", str(scenario), "--out", str(tmp_path / "results"), "--", "--web-port", str(port))
    log = tmp_path / "output.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, env=python_env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(lambda: process.poll() is not None or listening_addresses(port), 60, "the web UI to listen")
        assert process.poll() is None, log.read_text()

        assert listening_addresses(port) == [LOOPBACK_HEX], log.read_text()
        assert is_port_open(port)  # on 127.0.0.1
        outside = non_loopback_ipv4()
        if outside is not None:
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=2).close()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
        code = process.wait(timeout=30)
    assert code == 0, log.read_text()  # Ctrl-C is how a web UI is quit: no run was cut short (docs/operations.md)
    assert processes_mentioning(str(tmp_path)) == []
