"""Triton targets send the scenario's headers: over HTTP as headers, over gRPC as metadata.

Triton itself checks them: started with its inference, metadata and model-config APIs restricted
to requests carrying ``infer-key: <secret>`` (``--http-restricted-api``; over gRPC, Triton expects
the metadata key ``triton-grpc-protocol-infer-key``: ``--grpc-restricted-protocol``), it refuses
every call without that header and answers every one with it. The start checks send the target's
headers too: without them the run stops at start (exit 2) saying Triton refused to give the
model's metadata; with them the checks pass and every inference call succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from inferload.local.models.specs import model_repository_dir
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import spawn
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, stop_triton, triton_command, triton_env
from tests.support.locust_runner import LocustRun, run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

SECRET = "triton-secret-5d2e"
READY_DEADLINE_S = 180
#: the metadata key Triton's gRPC endpoint checks for ``--grpc-restricted-protocol=inference:infer-key=...``
GRPC_KEY = "triton-grpc-protocol-infer-key"
#: what the restricted Triton refuses without the header: inference and what the start checks read
RESTRICTED = "inference,metadata,model-config"


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
    command += [
        f"--http-restricted-api={RESTRICTED}:infer-key={SECRET}",
        f"--grpc-restricted-protocol={RESTRICTED}:infer-key={SECRET}",
    ]
    record = spawn(command, work / "triton.log", triton_env(install), cwd=work)
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not _ready(ports):
            assert time.monotonic() < deadline, (work / "triton.log").read_text()[-3000:]
            time.sleep(0.5)
        yield RestrictedTriton(f"127.0.0.1:{ports.triton_http}", f"127.0.0.1:{ports.triton_grpc}")
    finally:
        stop_triton(record)


def _ready(ports: ServerPorts) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{ports.triton_http}/v2/models/tiny/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _start(folder: Path, server: RestrictedTriton, http: dict[str, Any], grpc: dict[str, Any], *extra: str) -> LocustRun:
    folder.mkdir(parents=True, exist_ok=True)
    targets = [tiny_target("http", "triton-http", server.http, **http), tiny_target("grpc", "triton-grpc", server.grpc, **grpc)]
    data = {"name": "triton-headers", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2}}
    return run_locust(write_scenario(folder, data), folder, *extra)


def _run(
    folder: Path, server: RestrictedTriton, http: dict[str, Any], grpc: dict[str, Any], *extra: str
) -> dict[str, dict[str, Any]]:
    run = _start(folder, server, http, grpc, *extra)
    assert run.returncode in (0, 1), run.output
    assert SECRET not in run.output
    rows = {row["name"]: row for row in run.stats_json if row["name"] in ("http", "grpc")}
    assert set(rows) == {"http", "grpc"}, run.output
    return rows


def test_triton_refuses_calls_without_the_header_and_answers_those_with_it(
    restricted_triton: RestrictedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = _run(tmp_path / "without", restricted_triton, {}, {}, "--skip-start-checks")
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


def test_the_start_checks_send_the_headers_and_stop_without_them(restricted_triton: RestrictedTriton, tmp_path: Path) -> None:
    """Triton refuses its metadata and model config without the header: the checks say so and send no load."""
    run = _start(tmp_path, restricted_triton, {}, {})
    assert run.returncode == 2, run.output
    assert "no load was sent" in run.output
    for name, header in (("http", "infer-key"), ("grpc", GRPC_KEY)):
        assert f"target {name!r}: Triton at" in run.output and f"expecting header '{header}'" in run.output, run.output
    assert "refused to give model 'tiny''s metadata or config" in run.output
    assert run.stats_json == [] or all(row["num_requests"] == 0 for row in run.stats_json)
