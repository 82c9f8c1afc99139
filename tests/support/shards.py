"""The integration layer as a few pytest sessions side by side (`make integration`).

Most of an integration test's time is waiting: a server starting, a run of fixed length, a process
told to stop. Sessions side by side overlap those waits. Each session (a shard) takes whole test
modules, so module fixtures start once, and has its own session fixtures (its own Triton and
TorchServe, its own InfluxDB) on free ports; nothing is shared between shards but the machine.
pytest-xdist would do the same inside one session, but its workers cannot run gevent-patched code
(Locust patches the standard library on import; xdist's queue then blocks for ever).

Modules go to shards longest first, each to the shard with the least time so far, by the seconds
each took last time it was recorded (the folder's durations.json; a module not there counts
as the median); the modules that use one of the session fixtures that start servers
(`SHARED_FIXTURES`) go to one shard together, so that those servers start once. `--record` rewrites that file from this run's timings. Three phases, one after
another: the shards; then the `QUIET` modules (rates and latencies judged against intervals, each
busy well under one core) in three sessions side by side, and beside them `--python-transport TEST`
(repeated): a session of those tests on the Python transport (`INFERLOAD_TRANSPORT=python`, `make
fallback`'s subset), nothing else on the machine; then the `ALONE` modules (a noise or a rank
measured on a quiet machine, or a check that another session's server would spoil) in one session. Each
session's output is printed whole when it ends; the exit code is the first failing session's (0 when
every one passed).

The sample models' Triton and TorchServe (the ``local_servers`` fixture) are the runner's own when
no phase has two sessions that ask for them, which is the case here: the shard phase's group of
modules that use them, then the Python transport's session, then alone's. The runner starts them
once, in the background as the first phase starts, and lends them to each of those sessions
(`LENT_LOCAL_SERVERS`); one start and one stop instead of three (about 20 CPU-seconds each, a start
about 11 s). Their CPU is then the machine's, not any session's own.

Each session draws its servers' ports from a slice of its own (`INFERLOAD_FREE_PORTS`, `PORT_SLICES`),
none shared with a session running beside it, and the runner's lent servers from another: a port
drawn free is bound seconds later (KServe's interpreter starts first), and a port two sessions drew
in that time went to the first to bind it.

    python -m tests.support.shards [--shards N] [--record] [--python-transport TEST]... [FOLDER] [-- PYTEST ARGS]

`make unit` runs the fast layer the same way (`FOLDER` tests/unit: only the shard phase, no groups).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from inferload.launch.distributed import FREE_PORTS_ENV, free_port_range
from tests.support.system_tools import REPO

INTEGRATION = REPO / "tests" / "integration"
#: each folder's seconds per module, last recorded (`--record`)
DURATIONS_NAME = "durations.json"
#: sessions side by side in the first phase: three on this 2-core machine (with the load-judged modules
#: in the later phases, three filled the cores' idle waits: 10.7 min against 12.2-12.5 for two, the same
#: modules, 2026-12-06; when those modules ran among the shards, three failed them)
DEFAULT_SHARDS = 3
#: modules whose assertions are about rates, latencies and noise under load, each judged against an
#: interval and busy well under one core (the integration conftest's CPU ledger): after the
#: shards, three sessions of them side by side (and the Python transport's) with the machine to
#: themselves (beside the shards, the repeat gate failed once on 2 cores; the four kept it about
#: half busy)
QUIET = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_capacity", "test_capacity_of_streams_and_users", "test_engine_reference", "test_open_loop",
        "test_repeat_gate", "test_replay", "test_tail_verdict", "test_worker_loss",
    )
)  # fmt: skip
QUIET_SHARDS = 3
#: modules that want the machine to themselves: a client's 200 µs error told within 20 µs (calibrate), a
#: rank by throughput (tune on TorchServe failed once beside the shards), a generator at its limit
#: (test_sweep), a shared server's config changed under its other users (tune's max batch size); then
#: one not about load: test_servers holds a stopped Triton to leaving no /tmp/python_env_*, which every
#: Triton makes in /tmp whatever TMPDIR says, so another session's Triton leaves one of its own
ALONE = frozenset(
    f"tests/integration/{name}.py"
    for name in ("test_calibrate", "test_servers", "test_sweep", "test_tune", "test_tune_max_batch")
)
#: session fixtures that start servers (or make a whole observed run) once per pytest session: the
#: modules that use one go to one shard, so a phase starts them once
SHARED_FIXTURES = (
    "local_servers", "influxdb", "observed_run", "observed_generation_run", "example_models_triton", "bare_number_server",
)  # fmt: skip
#: the key of durations.json that holds the Python-transport session's seconds
PYTHON_TRANSPORT = "python-transport"
#: the environment variable naming the file of the runner's lent local servers (`lend_local_servers`):
#: JSON, {"state_dir", "up_result"} once they are up, or {"error"} if they could not start
LENT_LOCAL_SERVERS = "INFERLOAD_TEST_LENT_LOCAL_SERVERS"
#: the slices of ports (`INFERLOAD_FREE_PORTS`) the runner hands out: its own (its lent servers') and one per
#: session running at once, so that no session's server is given a port another session drew and has not
#: bound yet (a KServe started on a port another session's server took meanwhile exited at once)
PORT_SLICES = 10
#: the fixture that starts the sample models' servers, which the runner may lend
LOCAL_SERVERS_FIXTURE = "local_servers"


@dataclass
class Session:
    """One pytest session: its tests and what it adds to the environment."""

    name: str
    tests: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    #: the ports its servers draw from (`INFERLOAD_FREE_PORTS`), a slice no session beside it has
    ports: str = ""
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    junit: Path | None = None
    started: float = 0.0


@dataclass
class Shard:
    """Sessions run one after another: the shard's modules, then what was queued behind them."""

    number: int
    modules: list[str] = field(default_factory=list)
    expected_s: float = 0.0
    after: list[Session] = field(default_factory=list)
    #: its session's name (and log's): "shard 2", "quiet 1", "alone"
    name: str = ""

    def sessions(self) -> list[Session]:
        own = [Session(self.name or f"shard {self.number}", self.modules)] if self.modules else []
        return own + self.after


def test_modules(folder: Path) -> list[str]:
    """The test modules of `folder`, as paths relative to the repository."""
    return sorted(str(path.relative_to(REPO)) for path in folder.glob("test_*.py"))


def read_durations(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise SystemExit(f"{path}: expected an object of module path -> seconds")
    return {str(k): float(v) for k, v in data.items()}


def names_fixture(module: str, fixture: str) -> bool:
    """Whether the module (a path relative to the repository) names the fixture: a word of its text."""
    path = REPO / module
    return path.is_file() and re.search(rf"\b{fixture}\b", path.read_text()) is not None


def shared_fixture_groups(modules: list[str], names: tuple[str, ...] = SHARED_FIXTURES) -> list[set[str]]:
    """The modules that must share a shard: those naming one of the session fixtures `names` (a word of
    the module's text), joined wherever two fixtures share a module. Modules naming none are in no group."""
    groups: list[set[str]] = []
    for module in modules:
        fixtures = {name for name in names if names_fixture(module, name)}
        if not fixtures:
            continue
        joined = [group for group in groups if group & fixtures]
        merged = {module, *fixtures}.union(*joined)
        groups = [group for group in groups if group not in joined] + [merged]
    return [{member for member in group if member in modules} for group in groups]


def partition(
    modules: list[str],
    durations: dict[str, float],
    shards: int,
    after: Session | None = None,
    label: str = "shard",
    together: list[set[str]] | None = None,
) -> list[Shard]:
    """Longest first, each to the shard with the least expected time so far, a group of `together` as
    one (its modules side by side in one shard, the longest first), every other module on its own;
    `after` (a session of its own) queued on the first shard, counted there before any module. Shard
    n's session is named `label n`."""
    known = [durations[m] for m in modules if m in durations]
    unknown_s = statistics.median(known) if known else 1.0

    def seconds(module: str) -> float:
        return durations.get(module, unknown_s)

    grouped = [sorted(group, key=lambda m: (-seconds(m), m)) for group in together or [] if group]
    units = grouped + [[m] for m in modules if not any(m in group for group in grouped)]
    plan = [Shard(number, name=f"{label} {number}") for number in range(1, shards + 1)]
    if after is not None:
        plan[0].after.append(after)
        plan[0].expected_s = durations.get(after.name, unknown_s)
    for unit in sorted(units, key=lambda u: (-sum(map(seconds, u)), u[0])):
        shard = min(plan, key=lambda s: (s.expected_s, s.number))
        shard.modules.extend(unit)
        shard.expected_s += sum(map(seconds, unit))
    return [shard for shard in plan if shard.modules or shard.after]


def module_seconds(junit_files: list[Path]) -> dict[str, float]:
    """Seconds per test module (set-up, call and tear-down of its tests) from pytest's JUnit XML."""
    seconds: dict[str, float] = {}
    for junit in junit_files:
        if not junit.exists():
            continue
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")
            path = "/".join(module[: next((i for i, part in enumerate(module) if part.startswith("test_")), len(module)) + 1])
            key = f"{path}.py"
            seconds[key] = seconds.get(key, 0.0) + float(case.get("time", "0") or 0)
    return seconds


def asks_for(session: Session, fixture: str) -> bool:
    """Whether a module of the session's tests names the fixture."""
    return any(names_fixture(module, fixture) for module in {test.split("::")[0] for test in session.tests})


def lendable(phases: list[list[Shard]], fixture: str) -> bool:
    """Whether some session asks for the fixture and no two that do run side by side: in each phase
    (its shards side by side, a shard's sessions one after another) one shard at most has such sessions."""
    counts = [sum(any(asks_for(session, fixture) for session in shard.sessions()) for shard in phase) for phase in phases]
    return any(counts) and max(counts) <= 1


@contextlib.contextmanager
def lend_local_servers(work: Path) -> Iterator[str]:
    """The sample models' Triton and TorchServe, started in the background now, for the sessions'
    ``local_servers`` fixture: yields the file `LENT_LOCAL_SERVERS` names, written once they are up
    (the fixture waits for it); stopped at the end, which fails (SystemExit) if a process of theirs
    is left."""
    from inferload.local.models.build import build_models
    from inferload.local.models.specs import MODEL_NAMES
    from inferload.local.servers.manager import LocalServers
    from inferload.local.servers.ports import ServerPorts
    from inferload.local.servers.procs import processes_mentioning

    state_dir = work / "local-servers"
    lent = work / "local-servers.json"
    servers = LocalServers(state_dir, ServerPorts.free(), MODEL_NAMES)

    def start() -> None:
        try:
            build_models(MODEL_NAMES)
            up_result = servers.up(timeout_s=180)
            answer: dict[str, object] = {"state_dir": str(state_dir), "ports": servers.ports.to_dict(), "up_result": up_result}
        except Exception:  # the borrowing fixture fails with it
            answer = {"error": traceback.format_exc()}
        partial = lent.with_suffix(".tmp")
        partial.write_text(json.dumps(answer))
        partial.replace(lent)

    starting = threading.Thread(target=start, name="lent-local-servers", daemon=True)
    starting.start()
    try:
        yield str(lent)
    finally:
        starting.join()
        servers.down()
        leftovers = processes_mentioning(str(state_dir))
        if leftovers:
            raise SystemExit(f"the lent local servers left processes running after down(): {leftovers}")


def port_slices(count: int = PORT_SLICES) -> list[str]:
    """`free_port_range()` cut in `count` slices, each as `INFERLOAD_FREE_PORTS` says one (LOW-HIGH)."""
    low, high = free_port_range()
    size = (high - low) // count
    return [f"{low + i * size}-{low + (i + 1) * size}" for i in range(count)]


def start(session: Session, folder: Path, pytest_args: list[str], ports: str) -> None:
    """Start `session` in the background; the servers it starts draw their ports from `ports` (LOW-HIGH)."""
    stem = session.name.replace(" ", "-")
    session.log, session.junit = folder / f"{stem}.log", folder / f"{stem}.xml"
    command = [sys.executable, "-m", "pytest", f"--junitxml={session.junit}", *pytest_args, *session.tests]
    with session.log.open("wb") as log:
        session.process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, **session.environment, FREE_PORTS_ENV: ports},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    session.started = time.monotonic()


def stop_all(sessions: list[Session]) -> None:
    running = [s.process for s in sessions if s.process is not None and s.process.poll() is None]
    for process in running:
        os.killpg(process.pid, signal.SIGINT)  # pytest ends its session: fixtures stop their servers
    for process in running:
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def run(shards: list[Shard], pytest_args: list[str], work: Path, ports: list[str]) -> tuple[int, list[Session]]:
    """Every shard's sessions, the shards side by side, each session on a slice of `ports` that no
    session running beside it has; the first failing exit code (or 0) and the sessions that ran."""
    queues = {shard.number: shard.sessions() for shard in shards}
    if len(shards) > len(ports):
        raise ValueError(f"{len(shards)} shards side by side, {len(ports)} slices of ports")
    for shard in shards:
        names = ", then ".join(session.name for session in queues[shard.number])
        print(f"{shard.name}: {len(shard.modules)} modules ({names}), about {shard.expected_s / 60:.1f} min", flush=True)
    running: dict[int, Session] = {}
    ran: list[Session] = []
    exit_code = 0
    try:
        while True:
            for number, queue in queues.items():
                if number not in running and queue:
                    running[number] = queue.pop(0)
                    in_use = {session.ports for session in running.values()}
                    running[number].ports = next(slice_ for slice_ in ports if slice_ not in in_use)
                    start(running[number], work, pytest_args, running[number].ports)
                    ran.append(running[number])
            if not running:
                return exit_code, ran
            time.sleep(1)
            for number, session in list(running.items()):
                assert session.process is not None and session.log is not None
                code = session.process.poll()
                if code is None:
                    continue
                del running[number]
                took_min = (time.monotonic() - session.started) / 60
                print(f"\n===== {session.name}: exit {code} after {took_min:.1f} min =====", flush=True)
                sys.stdout.write(session.log.read_text(errors="replace"))
                sys.stdout.flush()
                if code != 0 and exit_code == 0:
                    exit_code = code
    except BaseException:
        stop_all(ran)
        raise


def plan(
    modules: list[str], durations: dict[str, float], shards: int, fallback: Session | None, integration: bool
) -> list[tuple[str, list[Shard]]]:
    """The three phases, each with its heading: the shards (the modules that share a session fixture
    together, in the integration layer: the unit layer starts no server), the quiet modules with the
    Python transport's session beside them, alone."""
    sharded = [m for m in modules if m not in ALONE | QUIET]
    together = shared_fixture_groups(sharded) if integration else []
    first = partition(sharded, durations, shards, together=together)
    quiet = partition([m for m in modules if m in QUIET], durations, QUIET_SHARDS, label="quiet")
    if fallback is not None:  # a third session beside them: the three kept both cores about half busy here
        quiet.append(
            Shard(len(quiet) + 1, after=[fallback], expected_s=durations.get(PYTHON_TRANSPORT, 0.0), name=PYTHON_TRANSPORT)
        )
    alone = Shard(0, [m for m in modules if m in ALONE], name="alone")
    alone.expected_s = sum(durations.get(m, 0.0) for m in alone.modules)
    return [
        ("", first),
        ("then the quiet modules and the Python transport's, side by side with nothing else", quiet),
        ("then alone: the modules that want the machine to themselves", [alone]),
    ]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in args:
        args, pytest_args = args[: args.index("--")], args[args.index("--") + 1 :]
    parser = argparse.ArgumentParser(prog="python -m tests.support.shards", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=INTEGRATION)
    parser.add_argument("--shards", type=int, default=int(os.environ.get("INTEGRATION_SHARDS", DEFAULT_SHARDS)))
    parser.add_argument("--record", action="store_true", help=f"write this run's seconds per module to FOLDER/{DURATIONS_NAME}")
    parser.add_argument(
        "--python-transport", action="append", default=[], metavar="TEST", help="a test for the Python-transport session"
    )
    options = parser.parse_args(args)
    if options.shards < 1:
        parser.error(f"--shards: at least 1, got {options.shards}")
    modules = test_modules(options.folder.resolve())
    if not modules:
        parser.error(f"{options.folder}: no test_*.py modules")
    fallback = (
        Session(PYTHON_TRANSPORT, options.python_transport, {"INFERLOAD_TRANSPORT": "python", "INFERLOAD_WARM_LOCUST": "0"})
        if options.python_transport
        else None
    )
    durations_path = options.folder.resolve() / DURATIONS_NAME
    durations = read_durations(durations_path)
    integration = options.folder.resolve() == INTEGRATION
    phases = plan(modules, durations, options.shards, fallback, integration)
    shards = phases[0][1]
    began = time.monotonic()
    exit_code, ran = 0, list[Session]()
    ports = port_slices()
    os.environ[FREE_PORTS_ENV] = ports[0]  # the runner's own: its lent servers'; each session gets another
    with tempfile.TemporaryDirectory(prefix="inferload-shards-") as work, contextlib.ExitStack() as lent:
        if integration and lendable([phase for _, phase in phases], LOCAL_SERVERS_FIXTURE):
            os.environ[LENT_LOCAL_SERVERS] = lent.enter_context(lend_local_servers(Path(work)))
            print("the sample models' Triton and TorchServe: one pair for every session that asks for them", flush=True)
        for heading, phase in phases:
            phase = [shard for shard in phase if shard.modules or shard.after]
            if not phase:
                continue
            if heading:
                print(f"\n{heading}", flush=True)
            code, ran_now = run(phase, pytest_args, Path(work), ports[1:])
            exit_code, ran = exit_code or code, ran + ran_now
        took = module_seconds([session.junit for session in ran if session.junit is not None and session is not fallback])
        if fallback is not None and fallback.junit is not None and fallback.junit.exists():
            took[PYTHON_TRANSPORT] = sum(module_seconds([fallback.junit]).values())
    print(
        f"\n{options.folder.name}: {len(ran)} sessions in {len(shards)} shards, {(time.monotonic() - began) / 60:.1f} min in all, exit {exit_code}"
    )
    if options.record:
        recorded = read_durations(durations_path)
        recorded.update({module: round(seconds, 1) for module, seconds in took.items()})
        durations_path.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"recorded the seconds of {len(took)} modules in {durations_path.relative_to(REPO)}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
