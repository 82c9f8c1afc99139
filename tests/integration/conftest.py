"""Integration fixtures: the real local Triton and TorchServe, started once per test session."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.launch.warm_locust import SHARED_SOCKET_ENV
from inferload.local.models.build import build_models
from inferload.local.models.specs import MODEL_NAMES
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from tests.support.example_triton import ExampleTriton, example_triton
from tests.support.locust_runner import share_warm_locust
from tests.support.shards import LENT_LOCAL_SERVERS
from tests.support.torchserve_handler import BARE_NUMBER_HANDLER, serving_handler

#: the tests that cost their session the most CPU, printed as the session ends (beside pytest's --durations)
CPU_LEDGER_LINES = 40
#: each test's (nodeid, CPU-seconds of the whole machine, of the session's own processes, wall seconds),
#: set-up and teardown included
_cpu_ledger: list[tuple[str, float, float, float]] = []


def machine_busy_s() -> float:
    """CPU-seconds the machine has spent busy since boot, all cores together (/proc/stat: user,
    nice, system, irq, softirq and steal; not idle or iowait): the measure docs/testing.md's phase
    table and issue 37's CPU goal use."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


#: cgroup v1's CPU accounting hierarchy, where this machine has one
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class SessionCpu:
    """CPU-seconds the session's own processes have spent: pytest and every process started below it,
    forks and daemons included, counted by a cgroup of their own (``cpuacct``, accounting only: no
    limit) while the machine's figure mixes in the sessions beside it. None where the machine has no
    such hierarchy or it cannot be written (not root)."""

    def __init__(self) -> None:
        self.group: Path | None = CPUACCT / f"inferload-tests-{os.getpid()}"
        try:
            self.group.mkdir()
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self.group = None

    def busy_s(self) -> float | None:
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        """Move whatever is left in the group (this process at least) back to the root, and remove it."""
        if self.group is None:
            return
        for pid in (self.group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (CPUACCT / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.group.rmdir()
        self.group = None


_session_cpu: SessionCpu | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _session_cpu
    _session_cpu = SessionCpu()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _session_cpu is not None:
        _session_cpu.close()


def session_busy_s() -> float:
    """The session's own CPU-seconds so far (`SessionCpu`); 0 where they cannot be counted."""
    found = None if _session_cpu is None else _session_cpu.busy_s()
    return 0.0 if found is None else found


@pytest.fixture(scope="session", autouse=True)
def commands_fork_their_locust_runs() -> None:
    """Every `inferload` command of the session forks its Locust runs from the session's warm Locust
    (a process of its own costs about 1.5 CPU-seconds more a run); stopped by the session's end."""
    share_warm_locust()


@pytest.fixture
def fresh_locust_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's commands start each Locust run as a process of its own, as a user's `inferload run` does."""
    monkeypatch.delenv(SHARED_SOCKET_ENV, raising=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's share of the machine's CPU: what the servers, Locust processes and pytest it made
    busy spent (a session fixture's start counts to the first test that asks for it, as its set-up
    time does in --durations; anything else running on the machine counts too)."""
    busy, own, wall = machine_busy_s(), session_busy_s(), time.monotonic()
    yield
    _cpu_ledger.append((item.nodeid, machine_busy_s() - busy, session_busy_s() - own, time.monotonic() - wall))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _cpu_ledger:
        return
    busy = sum(cpu for _, cpu, _, _ in _cpu_ledger)
    own = sum(cpu for _, _, cpu, _ in _cpu_ledger)
    wall = sum(seconds for _, _, _, seconds in _cpu_ledger)
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU per test, the {CPU_LEDGER_LINES} that cost their session most")
    write(f"{busy:,.0f} CPU-seconds busy over {wall:,.0f} s of tests ({len(_cpu_ledger)} tests, {os.cpu_count()} cores)")
    if _session_cpu is not None and _session_cpu.group is not None:
        write(f"{own:,.0f} CPU-seconds the session's own processes spent (pytest and every process below it)")
    write("machine CPU-s, own CPU-s, wall s:")
    for nodeid, cpu, mine, seconds in sorted(_cpu_ledger, key=lambda entry: -entry[2])[:CPU_LEDGER_LINES]:
        write(f"{cpu:7.1f} {mine:7.1f} {seconds:7.1f} s  {nodeid}")


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


#: how long a session waits for the runner's lent local servers to be up (they start in about 11 s)
LENT_WAIT_S = 300


def borrowed_local_servers(lent: Path) -> RunningServers:
    """The runner's local servers (`tests.support.shards.lend_local_servers`), once they are up."""
    deadline = time.monotonic() + LENT_WAIT_S
    while not lent.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the runner's local servers were not up after {LENT_WAIT_S} s ({lent} not written)")
        time.sleep(0.2)
    answer = json.loads(lent.read_text())
    if "error" in answer:
        pytest.fail(f"the runner's local servers did not start:\n{answer['error']}")
    state_dir, ports = Path(answer["state_dir"]), ServerPorts.from_dict(answer["ports"])
    return RunningServers(LocalServers(state_dir, ports, MODEL_NAMES), ports, answer["up_result"], state_dir)


@pytest.fixture(scope="session")
def local_servers(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServers]:
    """The sample models' Triton and TorchServe for the session: the runner's when it lends them (`make
    integration`: one pair for the sessions that ask for them, one after another), else started here."""
    lent = os.environ.get(LENT_LOCAL_SERVERS)
    if lent:
        yield borrowed_local_servers(Path(lent))
        return
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


#: the vendored example models the shared Triton serves (served name -> tests/examples/triton folder);
#: the two sequence modules get a pair each, as each unloads its pair to read what the model kept
EXAMPLE_MODELS = {
    "add_sub": "add_sub",
    "add_sub_ensemble": "add_sub_ensemble",
    "bls_sync": "bls_sync",
    "stream_sync": "stream_sync",
    "seq_grpc": "sequence_py",
    "seq_http": "sequence_py",
    "engine_seq_grpc": "sequence_py",
    "engine_seq_http": "sequence_py",
}


@pytest.fixture(scope="session")
def example_models_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleTriton]:
    """One real Triton serving every vendored example model that a test does not restart, trace or
    crash (EXAMPLE_MODELS), shared by the modules that send to them. Triton 2.51 never unloads
    bls_sync once its BLS calls have failed (it waits out any exit timeout), so this Triton's exit
    timeout is 2 s: its stop is forced and leaves its /tmp/python_env_* folder."""
    with example_triton(tmp_path_factory.mktemp("example-models-triton"), EXAMPLE_MODELS, "--exit-timeout-secs=2") as server:
        yield server
