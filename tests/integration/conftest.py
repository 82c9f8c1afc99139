"""Integration fixtures: the real local Triton and TorchServe, started once per test session."""

from __future__ import annotations

import contextlib
import threading
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

#: fixtures whose servers run in virtual environments of their own, made on first use
OWN_VENV_FIXTURES = {"kserve": "KSERVE_VENV", "bentoml_service": "BENTOML_VENV", "kserve_llm_venv": "KSERVE_LLM_VENV"}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests of servers with venvs of their own run last, and their venvs are made meanwhile.

    On a new machine making KServe's and BentoML's venvs is mostly downloads (minutes); started here
    in the background, they overlap the rest of the suite. `ensure_venv` locks each venv, so a
    fixture that needs one before it is ready waits for it (and sees the install's error, if any)."""
    needed = {name for item in items for name in OWN_VENV_FIXTURES if name in getattr(item, "fixturenames", ())}
    if not needed:
        return
    items.sort(key=lambda item: any(name in getattr(item, "fixturenames", ()) for name in needed))  # stable
    from inferload.local.servers import bentoml_local, kserve_local
    from inferload.local.servers.server_venv import ensure_venv

    specs = {
        "KSERVE_VENV": kserve_local.KSERVE_VENV,
        "BENTOML_VENV": bentoml_local.BENTOML_VENV,
        "KSERVE_LLM_VENV": kserve_local.KSERVE_LLM_VENV,
    }

    def make_venvs() -> None:
        for name in sorted(needed):
            with contextlib.suppress(Exception):  # the fixture's own call reports it
                ensure_venv(specs[OWN_VENV_FIXTURES[name]])

    threading.Thread(target=make_venvs, name="own-venvs", daemon=True).start()


@pytest.fixture(scope="session")
def kserve_llm_venv() -> Path:
    """KServe's venv for the built-in LLM (kserve 0.14.1), made once (in the background from the
    collection on: `pytest_collection_modifyitems`)."""
    from inferload.local.servers import kserve_local
    from inferload.local.servers.server_venv import ensure_venv

    return ensure_venv(kserve_local.KSERVE_LLM_VENV)


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
