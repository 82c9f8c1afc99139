"""Triton targets send the scenario's headers: over HTTP as headers, over gRPC as metadata.

Triton itself checks them: started with its inference API restricted to requests carrying
``infer-key: <secret>`` (``--http-restricted-api``; over gRPC, Triton expects the metadata key
``triton-grpc-protocol-infer-key``: ``--grpc-restricted-protocol``), it refuses
every inference call without that header and answers every one with it; its metadata stays open,
so the start checks read the model as usual.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from inferload.local.models.paths import model_repository_dir
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import spawn, stop_group
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, triton_command, triton_env
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

SECRET = "triton-secret-5d2e"
READY_DEADLINE_S = 180
#: the metadata key Triton's gRPC endpoint checks for ``--grpc-restricted-protocol=inference:infer-key=...``
GRPC_KEY = "triton-grpc-protocol-infer-key"


@dataclass(frozen=True)
class RestrictedTriton:
    http: str
    grpc: str


@pytest.fixture(scope="module")
def restricted_triton(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestrictedTriton]:
    work = tmp_path_factory.mktemp("triton-restricted")
    ports = ServerPorts.free()
    install = find_triton()
    command = triton_command(install, prepare_backend_dir(install, work / "backends"), model_repository_dir(), ports, ("tiny",))
    command += [f"--http-restricted-api=inference:infer-key={SECRET}", f"--grpc-restricted-protocol=inference:infer-key={SECRET}"]
    record = spawn(command, work / "triton.log", triton_env(install), cwd=work)
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not _ready(ports):
            assert time.monotonic() < deadline, (work / "triton.log").read_text()[-3000:]
            time.sleep(0.5)
        yield RestrictedTriton(f"127.0.0.1:{ports.triton_http}", f"127.0.0.1:{ports.triton_grpc}")
    finally:
        stop_group(record, term_timeout_s=15)


def _ready(ports: ServerPorts) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{ports.triton_http}/v2/models/tiny/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _run(folder: Path, server: RestrictedTriton, http: dict[str, Any], grpc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    folder.mkdir(parents=True, exist_ok=True)
    targets = [tiny_target("http", "triton-http", server.http, **http), tiny_target("grpc", "triton-grpc", server.grpc, **grpc)]
    data = {"name": "triton-headers", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2}}
    run = run_locust(write_scenario(folder, data), folder)
    assert run.returncode in (0, 1), run.output
    assert SECRET not in run.output
    rows = {row["name"]: row for row in run.stats_json if row["name"] in ("http", "grpc")}
    assert set(rows) == {"http", "grpc"}, run.output
    return rows


def test_triton_refuses_calls_without_the_header_and_answers_those_with_it(
    restricted_triton: RestrictedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = _run(tmp_path / "without", restricted_triton, {}, {})
    for row in without.values():
        assert row["num_requests"] > 0 and row["num_failures"] == row["num_requests"], without
    static = _run(tmp_path / "static", restricted_triton, {"headers": {"infer-key": SECRET}}, {"headers": {GRPC_KEY: SECRET}})
    monkeypatch.setenv("INFERLOAD_TRITON_SECRET", SECRET)
    from_env = _run(
        tmp_path / "env",
        restricted_triton,
        {"headers_from_env": {"Infer-Key": "INFERLOAD_TRITON_SECRET"}},
        {"headers_from_env": {GRPC_KEY.title(): "INFERLOAD_TRITON_SECRET"}},  # sent in lower case, as gRPC needs
    )
    for rows in (static, from_env):
        for row in rows.values():
            assert row["num_requests"] > 0 and row["num_failures"] == 0, rows
