"""Integration fixtures: the real local Triton and TorchServe, started once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.local.models.build import build_models
from inferload.local.models.specs import MODEL_NAMES
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from tests.support.torchserve_handler import BARE_NUMBER_HANDLER, serving_handler


@dataclass(frozen=True)
class RunningServers:
    """What the ``local_servers`` fixture yields."""

    servers: LocalServers
    ports: ServerPorts
    up_result: dict[str, Any]
    state_dir: Path


@pytest.fixture(scope="session")
def built_models() -> tuple[str, ...]:
    build_models(MODEL_NAMES)
    return MODEL_NAMES


@pytest.fixture(scope="session")
def local_servers(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServers]:
    state_dir = tmp_path_factory.mktemp("local-servers")
    ports = ServerPorts.free()
    servers = LocalServers(state_dir, ports, built_models)
    try:
        result = servers.up(timeout_s=180)
        yield RunningServers(servers, ports, result, state_dir)
    finally:
        servers.down()
        leftovers = processes_mentioning(str(state_dir))
        assert leftovers == [], f"processes left running after down(): {leftovers}"


@pytest.fixture(scope="session")
def bare_number_server(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPorts]:
    """A TorchServe of its own serving a third-party handler that answers one bare number per request
    (model ``bare_number``, tests/support/torchserve_handler.py); shared by the modules that need one."""
    with serving_handler(tmp_path_factory.mktemp("bare-number"), "bare_number", BARE_NUMBER_HANDLER) as (ports, answer):
        assert answer.strip().isdigit(), answer  # a bare number, not a JSON list
        yield ports
