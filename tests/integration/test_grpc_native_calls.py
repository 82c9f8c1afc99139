"""The opt-in native-thread gRPC calls (``INFERLOAD_GRPC_CALLS=native``, `inferload.users.native_calls`)
against the real Triton: a headless run sends real inferences, none fail, the answers have the
model's size, and the run ends by itself (every user's thread stopped, every channel closed)."""

from __future__ import annotations

import pytest

from tests.support.locust_runner import assert_tiny_grpc_run_succeeded, run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

pytestmark = pytest.mark.usefixtures("local_servers")


def test_a_run_on_native_calls_sends_real_inferences_and_ends(local_servers, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLOAD_GRPC_CALLS", "native")
    scenario = write_scenario(
        tmp_path,
        {
            "name": "native-calls",
            "duration": "4s",
            "warmup": "1s",
            "targets": [tiny_target("triton-grpc", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")],
            "shape": {"kind": "steady", "users": 4},
        },
    )
    run = run_locust(scenario, tmp_path)

    assert_tiny_grpc_run_succeeded(run)
