"""The KServe kinds against real servers: the local KServe model server (kserve from PyPI in its own
venv, serving the sample ``tiny`` TorchScript model) and, for the Open Inference Protocol kinds,
the local Triton (the protocol is standard). Each kind runs headless with 0 failures and real
response sizes, KServe's own figures land in ``server_side``, a model the server does not serve
stops the run at start (exit 2), and ``down()`` leaves nothing running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, is_port_open
from inferload.local.servers.procs import ProcessRecord, is_alive
from tests.integration.conftest import RunningServers
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario


@pytest.fixture(scope="module")
def kserve(
    built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerPorts, dict[str, Any]]]:
    state_dir = tmp_path_factory.mktemp("kserve-servers")
    servers = LocalServers(state_dir, ServerPorts.free(), ("tiny",))
    up = servers.up(which=("kserve",), timeout_s=600)  # the first use makes KServe's venv
    record = ProcessRecord.from_dict(up["servers"]["kserve"]["process"])
    try:
        yield servers.ports, up
    finally:
        servers.down()
        assert not is_alive(record.pid, record.start_ticks)
        assert not any(is_port_open(port) for port in servers.ports.for_server("kserve").values())


def kserve_targets(ports: ServerPorts, model: str = "tiny") -> list[dict[str, Any]]:
    rest = f"http://127.0.0.1:{ports.kserve_http}"
    targets = [
        tiny_target("v2-http", "kserve-v2-http", rest, batch_size=2),
        tiny_target("v2-grpc", "kserve-v2-grpc", f"127.0.0.1:{ports.kserve_grpc}", metrics_url=f"{rest}/metrics"),
        tiny_target("v1-http", "kserve-v1-http", rest, batch_size=3),
    ]
    for target in targets:
        target["model"] = model
    return targets


def scenario(folder: Path, targets: list[dict[str, Any]]) -> Path:
    data = {"name": "kserve", "duration": "3s", "warmup": "1s", "targets": targets, "shape": {"kind": "steady", "users": 3}}
    return write_scenario(folder, data)


def test_every_kserve_kind_runs_against_the_real_kserve_with_its_figures(
    kserve: tuple[ServerPorts, dict[str, Any]], tmp_path: Path
) -> None:
    ports, up = kserve
    assert up["servers"]["kserve"]["cold_start_s"] > 0

    run = run_locust(scenario(tmp_path, kserve_targets(ports)), tmp_path)

    assert run.returncode == 0, run.output
    targets = run.summary["targets"]
    sizes = {row["name"]: row["total_content_length"] for row in run.stats_json}
    for name in ("v2-http", "v2-grpc", "v1-http"):
        assert targets[name]["server"] == "kserve"
        # (at least one: KServe serves gRPC and HTTP from one Python process, and on a loaded clean
        # clone the two HTTP users' closed loop left the gRPC user 5 answers in the 2 s steady state)
        assert targets[name]["requests"] > 0 and targets[name]["failures"] == 0, (name, targets[name])
        assert sizes[name] > 0, sizes
    side = targets["v2-http"]["server_side"]  # one model on one KServe: one reading, shared by the three
    assert side["compute_ms_avg"] > 0 and side["request_ms_avg"] >= side["compute_ms_avg"], side
    assert side["avg_batch_size"] is None and "avg_batch_size" in side["unknown"], side
    assert sorted(side["shared_with"]) == ["v1-http", "v2-grpc"]


def test_a_model_kserve_does_not_serve_stops_the_run_at_start(kserve: tuple[ServerPorts, dict[str, Any]], tmp_path: Path) -> None:
    ports, _ = kserve
    run = run_locust(scenario(tmp_path, kserve_targets(ports, model="nope")), tmp_path)

    assert run.returncode == 2, run.output
    for name in ("v2-http", "v2-grpc", "v1-http"):
        assert f"target '{name}': the server at" in run.output and "does not serve model 'nope'" in run.output, run.output
    assert "it serves: tiny" in run.output  # v1 lists the served models


def test_the_open_inference_protocol_kinds_run_against_triton(local_servers: RunningServers, tmp_path: Path) -> None:
    ports = local_servers.ports
    targets = [
        tiny_target("v2-http", "kserve-v2-http", f"http://127.0.0.1:{ports.triton_http}", batch_size=2),
        tiny_target("v2-grpc", "kserve-v2-grpc", f"127.0.0.1:{ports.triton_grpc}"),
    ]
    run = run_locust(scenario(tmp_path, targets), tmp_path)

    assert run.returncode == 0, run.output
    for name in ("v2-http", "v2-grpc"):
        target = run.summary["targets"][name]
        assert target["requests"] > 5 and target["failures"] == 0, target
    # Triton's HTTP port has no KServe metrics page: no figures, and the reason, never invented ones
    assert run.summary["targets"]["v2-http"]["server_side"] is None
    assert "target 'v2-http': server-side figures unavailable" in run.output, run.output
    assert "no metrics page of its own: set metrics_url" in run.output  # the gRPC target says why at the start
