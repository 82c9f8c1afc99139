"""The opt-in gRPC call process (``INFERLOAD_GRPC_CALLS=process``, `inferload.users.call_process`)
against the real Triton: a headless run sends real inferences through it with the response check
on, none fail, and the run ends by itself leaving no call process behind; a call process killed
mid-run turns into failures that name it, and the run still ends."""

from __future__ import annotations

import threading

import psutil
import pytest

from tests.support.locust_runner import assert_tiny_grpc_run_succeeded, run_locust
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("local_servers")
CHILD_MODULE = "inferload.users.call_child"


def _call_processes(address: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if CHILD_MODULE in cmdline and address in cmdline:
            found.append(proc)
    return found


def _scenario(tmp_path, address: str, duration: str):
    target = tiny_target("triton-grpc", "triton-grpc", address, response_check="shape")
    return write_scenario(
        tmp_path,
        {
            "name": "call-process",
            "duration": duration,
            "warmup": "1s",
            "targets": [target],
            "shape": {"kind": "steady", "users": 4},
        },
    )


def test_a_run_on_a_call_process_sends_real_inferences_and_ends(local_servers, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLOAD_GRPC_CALLS", "process")
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    run = run_locust(_scenario(tmp_path, address, "4s"), tmp_path)

    assert_tiny_grpc_run_succeeded(run)
    assert _call_processes(address) == []  # it exited with its Locust process


def test_a_killed_call_process_becomes_failures_that_name_it(local_servers, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLOAD_GRPC_CALLS", "process")
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    killed: list[int] = []

    def kill_it() -> None:
        found = wait_until(lambda: _call_processes(address), timeout_s=30, what="a call process")
        found[0].kill()
        killed.append(found[0].pid)

    killer = threading.Thread(target=kill_it)
    killer.start()
    run = run_locust(_scenario(tmp_path, address, "5s"), tmp_path)
    killer.join()

    assert killed, "no call process was found to kill"
    target = run.summary["targets"]["triton-grpc"]
    assert target["failures"] > 0, target
    failures = (tmp_path / "locust_failures.csv").read_text()
    assert f"gRPC call process (pid {killed[0]}) ended" in failures, failures
    assert _call_processes(address) == []
