"""Warm Locust processes for a test session: each headless run a fork of one process that has already
imported Locust and inferload.

A `python -m locust` run of inferload's locustfile spends about a second of CPU before it sends
anything (the interpreter, Locust's and inferload's imports, gevent's plugin scan, matplotlib for
report.html); the integration layer starts a hundred of them. `LocustForks` starts one *fork server*
per test session (``python -m tests.support.locust_forks SOCKET``) that imports all of that once and
then, for each run asked of it, forks a process that *is* that run: `locust ARGS` with the run's own
working folder, environment, standard output and error (files), its own pid (which a caller may
signal or kill) and its own exit status, as `python -m locust ARGS` would have. What a fork cannot
change is a value a module read from the environment when the server imported it: inferload reads
its settings when a run asks for them, not at import (`test_locust_forks.py` holds the transport's
choice to that), and numpy's BLAS runs single-threaded in every fork (the server sets
`OPENBLAS_NUM_THREADS=1`, as a fork of a process with threads may hang on a lock one of them held).

Protocol, one Unix-socket connection per run: the caller sends one JSON line (argv, cwd, env,
stdout and stderr paths); the server answers a line with the run's pid, then, when it has ended, a
line with its return code (negative: the signal that killed it, as `subprocess` says). The fork that
waits for the run is a child of the server's own, so the server never waits and serves runs side by
side.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from tests.support.system_tools import REPO


class RunRequest(TypedDict):
    """What the caller sends for one run (one JSON line)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str
    stderr: str


@dataclass(frozen=True)
class ForkedRun:
    """What a forked run ended with, as `subprocess.CompletedProcess` would say it."""

    returncode: int
    stdout: str
    stderr: str


class LocustForks:
    """The session's fork server: started on first use, stopped by `close()` (or at interpreter exit)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        """`env`: the server's environment (the runs get their own; see the module for what they cannot change)."""
        self._env = dict(env)
        self._folder = Path(tempfile.mkdtemp(prefix="inferload-locust-forks-"))
        self._socket_path = self._folder / "socket"
        self._server: subprocess.Popen[bytes] | None = None

    def _started(self) -> Path:
        if self._server is not None and self._server.poll() is None:
            return self._socket_path
        with contextlib.suppress(FileNotFoundError):
            self._socket_path.unlink()
        log = (self._folder / "server.log").open("wb")
        self._server = subprocess.Popen(
            [sys.executable, "-m", "tests.support.locust_forks", str(self._socket_path)],
            cwd=REPO,
            env={"OPENBLAS_NUM_THREADS": "1", **self._env},  # numpy's BLAS without a thread pool: a fork keeps one thread
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not self._socket_path.exists():
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Locust fork server did not start: {(self._folder / 'server.log').read_text()}")
            time.sleep(0.05)
        return self._socket_path

    def run(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout_s: float) -> ForkedRun:
        """`locust *argv` in `cwd` with `env`, waited for; on `timeout_s` the run is killed and
        `subprocess.TimeoutExpired` raised, as `subprocess.run` does."""
        import socket  # under Locust's gevent patches in a test session: cooperative, blocking to us

        outputs = Path(tempfile.mkdtemp(prefix="run-", dir=self._folder))
        request: RunRequest = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": str(outputs / "stdout"),
            "stderr": str(outputs / "stderr"),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(self._started()))
            connection.sendall(json.dumps(request).encode() + b"\n")
            answers = connection.makefile("r")
            pid = int(answers.readline())
            connection.settimeout(timeout_s)
            try:
                line = answers.readline()
            except TimeoutError as timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(["locust", *argv], timeout_s) from timeout
        if not line:
            raise RuntimeError(f"the Locust fork server ended during a run: {(self._folder / 'server.log').read_text()}")
        return ForkedRun(
            int(line), (outputs / "stdout").read_text(errors="replace"), (outputs / "stderr").read_text(errors="replace")
        )

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            self._server.wait(timeout=30)


def _run_in_this_process(request: RunRequest) -> int:
    """In the run's fork: become `locust ARGS` as the request says and return its exit code."""
    import gevent

    gevent.reinit()  # a fresh event loop, not the server's
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # the run's own TMPDIR, not the one the server saw
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(file, fd)
        os.close(file)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv = ["locust", *request["argv"]]
    from locust.main import main

    try:
        main()
    except SystemExit as end:
        code = end.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def serve(socket_path: Path) -> None:
    """The fork server: Locust and inferload imported, then one fork per connection until SIGTERM or
    until the process that started it has gone."""
    import locust.main  # noqa: F401  (gevent's patches first, then the rest as Locust's run imports it)
    from gevent import monkey

    real_socket = monkey.get_original("socket", "socket")
    real_fork = monkey.get_original("os", "fork")
    real_waitpid = monkey.get_original("os", "waitpid")
    real_signal = monkey.get_original("signal", "signal")
    import socket as socket_module

    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401  (report.html's plots)

    import inferload.locustfile  # noqa: F401  (inferload's run, the user classes)

    real_signal(signal.SIGCHLD, signal.SIG_IGN)  # the server's children (the waiters) reap themselves
    listener = real_socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    listener.bind(str(socket_path) + ".new")
    listener.listen(16)
    os.rename(str(socket_path) + ".new", str(socket_path))  # ready once the name exists
    listener.settimeout(5)
    parent = os.getppid()
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test session ended without stopping it
                return
            continue
        connection.settimeout(None)
        threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["1"]
        if len(threads) != 1:  # a fork of a threaded process may hold another thread's lock for ever
            connection.sendall(f"error: the fork server has {len(threads)} threads\n".encode())
            connection.close()
            continue
        if real_fork() == 0:  # the waiter: forks the run, answers its pid, then its end
            listener.close()
            real_signal(signal.SIGCHLD, signal.SIG_DFL)
            request = cast(RunRequest, json.loads(connection.makefile("r").readline()))
            run = real_fork()
            if run == 0:
                connection.close()
                code = 1
                try:
                    code = _run_in_this_process(request)
                finally:
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()
                        sys.stderr.flush()
                    os._exit(code)
            with contextlib.suppress(OSError):  # a caller gone (its timeout killed the run) is not told
                connection.sendall(f"{run}\n".encode())
            _, status = real_waitpid(run, 0)
            with contextlib.suppress(OSError):
                connection.sendall(f"{-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}\n".encode())
            os._exit(0)
        connection.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
