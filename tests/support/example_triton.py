"""A real Triton serving vendored example models (tests/examples/triton/<model>, see each SOURCE.md).

The models are copied into a temporary model repository (the Python backend writes caches next to
a model.py, and a test may serve one model under several names), then `tritonserver` from the
nvidia-pytriton wheel starts on free loopback ports with those models loaded (explicit mode, so a
test can unload one: Triton then calls the model's ``finalize``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import requests

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import ProcessRecord, spawn, stat_fields
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, stop_triton, triton_command, triton_env
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

EXAMPLES = REPO / "tests" / "examples" / "triton"
READY_DEADLINE_S = 180
#: what sequence_py (tests/examples/triton/sequence_py) prints in its finalize: its answers per correlation ID
SEQUENCES_LINE = "Final sequences stored: "
#: what Triton 2.51 answers, a few times in a thousand, to a request it traces at every request (it
#: loses the request's input, or its datatype; both transports saw it, docs/observability.md): a
#: server race, not ours. `traced_input_lost(error)` says whether a failure is one of them.
TRACED_INPUT_LOST = ("does not exist in request", "data-type is '<invalid>'")


def traced_input_lost(error: str) -> bool:
    """Whether a failure's text is Triton's race under full tracing (TRACED_INPUT_LOST)."""
    return "[request id: " in error and any(marker in error for marker in TRACED_INPUT_LOST)


#: the share of a fully traced run's requests that race may fail (a traced test's error_rate SLO)
TRACED_INPUT_LOST_MAX = 0.01
#: what Triton's handler of SIGSEGV and SIGABRT writes in its log as it crashes
CRASH_LINE = re.compile(r"Signal \(\d+\) received")


#: how many Tritons a traced test may start: the crash rate seen in CI (twice in a row once, both
#: silent, at 00:51 UTC on 2026-12-06) makes two too few for a suite that must not flip
CRASH_ATTEMPTS = 3


@dataclass(frozen=True)
class ExampleTriton:
    http: str  # host:port
    grpc: str
    log: Path
    process: ProcessRecord
    #: the wait status once the process ended (read before anything else reaps it)
    ended: dict[str, int] = field(default_factory=dict)

    def how_it_ended(self) -> str:
        """What ended Triton, from its wait status: a signal's name, an exit status, or "running".

        Read from ``/proc/<pid>/stat`` while the process is a zombie (its 52nd field, ``exit_code``,
        is the wait status), else from ``os.waitpid``: under gevent's patches (a session that imported
        Locust) the child is gevent's, whose ``waitpid`` says (0, 0) until its loop has seen SIGCHLD,
        and whose loop, once it has, holds the status after reaping the zombie."""
        if "status" not in self.ended:
            fields = stat_fields(self.process.pid) or []
            ours = bool(fields) and int(fields[19]) == self.process.start_ticks  # not a recycled pid
            if ours and fields[0] != "Z":
                return "running"
            if ours:
                self.ended["status"] = int(fields[49])
            else:
                try:
                    pid, status = os.waitpid(self.process.pid, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == 0:
                    return "ended (reaped before its status was read)"
                self.ended["status"] = status
        status = self.ended["status"]
        if os.WIFSIGNALED(status):
            return f"ended by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exited with status {os.WEXITSTATUS(status)}"

    def unload(self, model: str, timeout_s: float = 30) -> None:
        """Unload ``model`` (``POST v2/repository/models/<m>/unload``) and wait until it is gone."""
        answer = requests.post(f"http://{self.http}/v2/repository/models/{model}/unload", timeout=timeout_s)
        assert answer.status_code == 200, answer.text
        wait_until(lambda: not self.ready(model), timeout_s, f"{model} unloaded", ignore=(requests.RequestException,))

    def sequences_kept(self, model: str) -> dict[int, list[int]]:
        """Unload ``model`` (a sequence_py) and read the answers it kept per correlation ID, from the
        line its ``finalize`` prints in the log (the log's earlier such lines are other models')."""
        seen = self.log.read_text(errors="replace").count(SEQUENCES_LINE)
        self.unload(model)

        def printed() -> list[str] | None:
            lines = [line for line in self.log.read_text(errors="replace").splitlines() if SEQUENCES_LINE in line]
            return lines if len(lines) > seen else None

        lines = wait_until(printed, 30, f"{model}'s finalize line")
        return dict(ast.literal_eval(lines[seen].split(SEQUENCES_LINE, 1)[1]))

    def ready(self, model: str) -> bool:
        return requests.get(f"http://{self.http}/v2/models/{model}/ready", timeout=2).status_code == 200

    def crashed(self) -> bool:
        """Triton 2.51 crashes now and then with tracing on (SIGSEGV in TRITONBACKEND_ResponseSend,
        docs/observability.md): its log then says ``Signal (11) received``. A Triton that ended
        before the test stopped it crashed too, whatever its log had time to say (CI once saw one
        refuse every connection from the run's first second, its log silent)."""
        said = CRASH_LINE.search(self.log.read_text(errors="replace")) is not None
        return said or self.how_it_ended() != "running"


@contextmanager
def example_triton(work: Path, models: Mapping[str, str], *extra_args: str) -> Iterator[ExampleTriton]:
    """Triton serving ``models`` (served name -> example folder name) until the block ends."""
    repository = work / "models"
    for name, example in models.items():
        shutil.copytree(EXAMPLES / example, repository / name, ignore=shutil.ignore_patterns("SOURCE.md", "__pycache__"))
    ports = ServerPorts.free()
    install = find_triton()
    command = triton_command(install, prepare_backend_dir(install, work / "backends"), repository, ports, tuple(models))
    log = work / "triton.log"
    record = spawn([*command, *extra_args], log, triton_env(install), cwd=work)
    try:
        server = ExampleTriton(f"127.0.0.1:{ports.triton_http}", f"127.0.0.1:{ports.triton_grpc}", log, record)
        for name in models:
            wait_until(
                partial(server.ready, name),
                READY_DEADLINE_S,
                f"Triton serving {name} (log: {log})",
                interval_s=0.5,
                ignore=(requests.RequestException,),
            )
        yield server
    finally:
        stop_triton(record)


T = TypeVar("T")


def on_triton_surviving_its_crash(
    work: Path, models: Mapping[str, str], arguments_in: Callable[[Path], list[str]], body: Callable[[ExampleTriton, Path], T]
) -> T:
    """``body(server, folder)`` on a Triton of its own; run again on a new Triton only when the one
    before crashed (its log has CRASH_LINE, or it ended on its own: a server bug, not ours), up to
    CRASH_ATTEMPTS Tritons. Any other failure fails, and so does the last Triton's crash; each crash
    prints its log's end and how the process ended. ``arguments_in(folder)``: Triton's extra
    arguments for a folder of its own."""
    for attempt in range(1, CRASH_ATTEMPTS + 1):
        folder = work / f"attempt-{attempt}"
        folder.mkdir(parents=True)
        with example_triton(folder / "triton", models, *arguments_in(folder)) as server:
            try:
                return body(server, folder)
            except Exception:  # an assertion, or a request to the Triton that crashed
                if not server.crashed():
                    raise
                tail = server.log.read_text(errors="replace")[-2000:]
                then = "once more on a new Triton" if attempt < CRASH_ATTEMPTS else "no Triton left to try"
                print(f"Triton crashed, {server.how_it_ended()} (its log: {server.log}, ending:\n{tail}): {then}")
                if attempt == CRASH_ATTEMPTS:
                    raise
    raise AssertionError("unreachable")
