"""A warm Locust: one process that has imported Locust and inferload's run, and forks each run asked
of it.

A Locust process spends about a second of CPU and one and a half of wall time before it sends
anything (the interpreter; Locust's, gevent's and inferload's imports; matplotlib for report.html):
a sweep, a tune or the demo runs one per step. `WarmLocust` starts one *fork server* (``python -m
inferload.launch.warm_locust SOCKET PARENT_PID``) that imports all of that once, then, for each run,
forks a process that *is* that run: `locust ARGS` with its own working folder, environment, output
files, pid (its own session, as `ChildProcesses` starts its children: a signal or `killpg` reaches it
and nothing else) and exit status, as ``python -m inferload.launch.locust_entry ARGS`` would have. It
holds SIGINT and SIGTERM from its first instant (`inferload.run.early_signals`; blocked as it is forked,
so one sent as soon as the caller has its pid waits for it), as that entry does from its first line.
What a fork cannot change is a value a module read from the environment when the server imported
it: inferload reads its settings when a run asks for them, not at import (`test_warm_locust.py`
holds the transport's choice to that), and numpy's BLAS runs single-threaded in every fork (the
server sets `OPENBLAS_NUM_THREADS=1`: a fork of a process with threads may hang on a lock one of
them held, and the server refuses to fork while it has more than one thread).

Nothing is left behind: the server gets SIGHUP when the process that started it dies, the fork that
waits for a run (the *waiter*) when the server dies, and the run when its waiter dies or when the caller
that asked for it has gone (its connection closed before the run ended); a run stops on SIGHUP as on
SIGTERM, its results written (`inferload.run.signals`).

A process that runs many `inferload` commands (the test suite) may start one server for all of them and
name its socket in `INFERLOAD_WARM_LOCUST_SOCKET`: every Locust run those commands start, a single
`inferload run`'s included, is then a fork of it; it forks only for callers of its own inferload package,
user and namespaces (`_refusal`: a caller of another install, or in a network namespace of its own, gets
an error and starts its run as a process of its own).

Protocol, one Unix-socket connection per run: the caller sends one JSON line (`RunRequest`); the
server answers a line with the run's pid (or ``error: WHY``), then, when the run has ended, a line
with its return code (negative: the signal that killed it, as `subprocess` says). The waiter is a
child of the server, so the server never waits and serves runs side by side.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from inferload.errors import InferloadError
from inferload.launch.die_with_parent import die_with
from inferload.run import early_signals

#: what the server, its waiters and their runs get when the process above them dies
DEATH_SIGNAL = signal.SIGHUP
#: seconds the server may take to import Locust and inferload before the caller gives up on it
START_TIMEOUT_S = 60.0
#: the socket of a fork server another process started, which every Locust run of a command then forks from
SHARED_SOCKET_ENV = "INFERLOAD_WARM_LOCUST_SOCKET"
#: the inferload package a fork server runs (a caller of another install is refused)
PACKAGE = str(Path(__file__).resolve().parents[1])


class RunRequest(TypedDict):
    """What the caller sends for one run (one JSON line)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str  # "": the caller's own stdin, stdout and stderr, passed along with the request
    stderr: str
    package: str


class ForkedLocust:
    """One forked run, as the caller sees it: what `subprocess.Popen` offers a caller that waits for a
    process and signals it (`pid`, `returncode`, `poll`, `wait`, `kill`)."""

    def __init__(self, connection: socket.socket, pid: int, argv: Sequence[str]) -> None:
        self.pid = pid
        self.args = ["locust", *argv]
        self.returncode: int | None = None
        connection.setblocking(False)  # no read ever blocks: `poll` may run in a signal handler during `wait`
        self._connection = connection
        self._received = b""
        self._server_gone = False  # the connection ended before the return code came
        self._killed = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self._receive()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its return code once it has ended; `subprocess.TimeoutExpired` after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self._receive()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self._server_gone:  # nothing more will come: look again for the run itself shortly
                time.sleep(0.05 if left is None else max(0.0, min(left, 0.05)))
                continue
            with selectors.DefaultSelector() as selector:
                selector.register(self._connection, selectors.EVENT_READ)
                selector.select(None if left is None else min(left, 1.0))
        return code

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
                self._killed = True

    def _receive(self) -> int | None:
        """What has come so far; the return code once its line has. Never blocks (`poll` may run in a
        signal handler): when the server went before the run ended (its waiter's death then stops the
        run, DEATH_SIGNAL), the run has ended once its pid has, and reads as killed by that signal
        (by SIGKILL after `kill`)."""
        if self.returncode is not None:
            return self.returncode
        if not self._server_gone:
            try:
                chunk = self._connection.recv(64)
            except (BlockingIOError, InterruptedError):
                return None
            self._received += chunk
            if b"\n" in self._received:
                self.returncode = int(self._received.split(b"\n", 1)[0])
                return self.returncode
            self._server_gone = not chunk
        if self._server_gone and not _alive(self.pid):
            self.returncode = -int(signal.SIGKILL if self._killed else DEATH_SIGNAL)
        return self.returncode

    def __del__(self) -> None:
        self._connection.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    return True


class WarmLocust:
    """The fork server of one caller (a CLI command, a test session): started by the first `start`,
    stopped by `close()` (and when the caller dies); or, where `INFERLOAD_WARM_LOCUST_SOCKET` names one,
    that server, which this neither starts nor stops. `start` may be called from several threads."""

    def __init__(self, env: Mapping[str, str] | None = None, reports: bool = False) -> None:
        """`env`: the server's environment (default: this process's; the runs get their own, see the
        module). `reports`: the runs write report.html, so the server imports its plotting library
        too (a sweep's steps do not: `--no-report`)."""
        self._env = dict(os.environ if env is None else env)
        self._reports = reports
        shared = os.environ.get(SHARED_SOCKET_ENV, "")
        self._shared = Path(shared) if shared else None
        self._folder: Path | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._starting = threading.Lock()  # runs started from several threads start one server

    @property
    def socket(self) -> Path:
        """The server's socket, the server started first if it is this one's and not running."""
        with self._starting:
            return self._shared if self._shared is not None else self._started_socket()

    def _started_socket(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="inferload-warm-locust-"))
        path = self._folder / "socket"
        if self._server is not None and self._server.poll() is None:
            return path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        log = (self._folder / "server.log").open("wb")
        self._server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inferload.launch.warm_locust",
                str(path),
                str(os.getpid()),
                *(["--reports"] if self._reports else []),
            ],
            env={**self._env, "OPENBLAS_NUM_THREADS": "1"},  # numpy's BLAS without a thread pool: a fork keeps one thread
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal is the caller's to forward
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not path.exists():
            if self._server.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise InferloadError(f"the warm Locust did not start: {(self._folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.02)
        return path

    def start(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: Path | None = None, stderr: Path | None = None
    ) -> ForkedLocust:
        """`locust *argv` in `cwd` with `env`, its output in `stdout` (and `stderr`; default: the same
        file), or with no `stdout` on this process's own stdin, stdout and stderr (as a child that
        inherits them), started now; InferloadError when the server cannot start or fork it."""
        request: RunRequest = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": "" if stdout is None else str(stdout),
            "stderr": "" if stdout is None else str(stderr or stdout),
            "package": PACKAGE,
        }
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(self.socket))
            data = json.dumps(request).encode() + b"\n"
            sent = socket.send_fds(connection, [data], [0, 1, 2] if stdout is None else [])
            connection.sendall(data[sent:])
            line = b""
            while not line.endswith(b"\n"):
                chunk = connection.recv(1)
                if not chunk:
                    break
                line += chunk
        except OSError as error:
            connection.close()
            raise InferloadError(f"the warm Locust did not take the run: {error}") from error
        if not line.strip().isdigit():
            connection.close()
            raise InferloadError(f"the warm Locust did not fork the run: {line.decode(errors='replace').strip() or 'no answer'}")
        return ForkedLocust(connection, int(line), argv)

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, if it is this one's (None before the first run, once closed,
        and for a shared server)."""
        return self._server.pid if self._server is not None and self._server.poll() is None else None

    def close(self) -> None:
        """Stop the server if it is this one's (runs still going end with it: SIGHUP, their results
        written) and remove its folder (socket and log)."""
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        self._server = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _run_in_this_process(request: RunRequest, passed: Sequence[int]) -> int:
    """In the run's fork: become `locust ARGS` as the request says (`passed`: the caller's stdin, stdout
    and stderr where it sent them); its exit code."""
    early_signals.hold()  # as inferload.launch.locust_entry does from its first line
    signal.pthread_sigmask(signal.SIG_UNBLOCK, early_signals.HELD_SIGNALS)  # blocked by the waiter as it forked: held from now on
    import gevent

    gevent.reinit()  # a fresh event loop, not the server's
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # the run's own TMPDIR, not the one the server saw
    if passed:
        standard = list(passed)
    else:
        opened: dict[str, int] = {}
        for path in (request["stdout"], request["stderr"]):
            if path not in opened:
                opened[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        standard = [os.open(os.devnull, os.O_RDONLY), opened[request["stdout"]], opened[request["stderr"]]]
    for fd, source in enumerate(standard):
        os.dup2(source, fd)
    for source in set(standard):
        if source > 2:
            os.close(source)
    sys.argv = ["locust", *request["argv"]]
    from locust.main import main

    try:
        main()
    except SystemExit as end:
        code = end.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


#: the namespaces a run must share with its caller (a fork has the server's: a caller in a network
#: namespace of its own would have its run send from another host)
NAMESPACES = ("net", "mnt", "pid", "user", "uts", "ipc")


def _refusal(connection: socket.socket, request: RunRequest) -> str | None:
    """Why this server must not fork the run (its caller would not get the process it asked for), or
    None: a caller of another inferload package, of another user, or in other namespaces."""
    if request.get("package") != PACKAGE:
        return f"this warm Locust runs {PACKAGE}, not {request.get('package')}"
    pid, uid, gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if (uid, gid) != (os.getuid(), os.getgid()):
        return f"the caller runs as uid {uid} gid {gid}, this warm Locust as {os.getuid()} {os.getgid()}"
    for kind in NAMESPACES:
        try:
            theirs, ours = os.readlink(f"/proc/{pid}/ns/{kind}"), os.readlink(f"/proc/self/ns/{kind}")
        except OSError:
            continue  # no such namespace here (or no /proc): nothing to tell apart
        if theirs != ours:
            return f"the caller runs in another {kind} namespace ({theirs}, this warm Locust in {ours})"
    return None


def _received_request(connection: socket.socket) -> tuple[RunRequest, list[int]]:
    """In the waiter: the caller's request and the descriptors sent with it (none, or its stdin, stdout
    and stderr)."""
    data, passed, _flags, _address = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        chunk = connection.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return cast(RunRequest, json.loads(data)), passed


def _wait_for_run(run: int, caller: socket.socket, waitpid: Any, select: Any) -> int:
    """In the waiter: the run's wait status once it has ended; DEATH_SIGNAL to it when the caller's
    connection closes first (the caller has gone: nobody waits for the run)."""
    ended = os.pidfd_open(run)
    try:
        watched = [caller, ended]
        while True:
            ready, _, _ = select(watched, [], [])
            if ended in ready:
                return int(waitpid(run, 0)[1])
            try:
                gone = not caller.recv(64)
            except OSError:
                gone = True
            if gone:
                watched = [ended]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run, DEATH_SIGNAL)
    finally:
        os.close(ended)


def preload(reports: bool) -> None:
    """Import what a run of inferload's locustfile imports (`tests/unit/test_warm_locust.py` holds the
    two lists equal), and report.html's plotting with `reports`."""
    import locust.main  # noqa: F401  (gevent's patches first, as Locust's run does)

    from inferload.run import early_signals, locust_classes, plugin  # noqa: F401
    from inferload.scenario import loader  # noqa: F401

    if reports:
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401  (report.html's plots)
    # a thread an import started would be in every fork, where it ends with a KeyError traceback in the
    # run's output (a fork keeps only the thread that forked): matplotlib building its font cache (a
    # machine's first report) starts a Timer and cancels it, and gevent ends it only once the server
    # yields; the server forks once every such thread has ended
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(START_TIMEOUT_S)


def serve(socket_path: Path, parent: int, reports: bool) -> None:
    """The fork server: Locust and inferload imported (and report.html's plotting with `reports`),
    then one fork per connection until SIGTERM or until `parent` (the process that started it) has gone."""
    # the death signal ends the server and its waiters even where it came ignored (`nohup`: SIG_IGN is
    # inherited); no terminal's hang-up reaches them, each run being in a session of its own
    signal.signal(DEATH_SIGNAL, signal.SIG_DFL)
    if not die_with(parent, DEATH_SIGNAL):
        return
    preload(reports)
    from gevent import monkey

    real_socket = monkey.get_original("socket", "socket")
    real_fork = monkey.get_original("os", "fork")
    real_waitpid = monkey.get_original("os", "waitpid")
    real_signal = monkey.get_original("signal", "signal")

    real_signal(signal.SIGCHLD, signal.SIG_IGN)  # the server's children (the waiters) reap themselves
    listener = real_socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path) + ".new")
    listener.listen(16)
    os.rename(str(socket_path) + ".new", str(socket_path))  # ready once the name exists
    listener.settimeout(5)
    server = os.getpid()
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the caller ended without stopping it
                return
            continue
        connection.settimeout(None)
        tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["1"]
        threads = max(len(tasks), threading.active_count())  # the kernel's, and gevent's in Python's count
        if threads != 1:  # a fork of a threaded process may hold another thread's lock for ever
            connection.sendall(f"error: the warm Locust has {threads} threads\n".encode())
            connection.close()
            continue
        if real_fork() == 0:  # the waiter: forks the run, answers its pid, then its end
            listener.close()
            real_signal(signal.SIGCHLD, signal.SIG_DFL)
            if not die_with(server, DEATH_SIGNAL):
                os._exit(0)
            request, passed = _received_request(connection)
            refused = _refusal(connection, request)
            if refused is not None:
                with contextlib.suppress(OSError):
                    connection.sendall(f"error: {refused}\n".encode())
                os._exit(0)
            waiter = os.getpid()
            # the caller may signal the run as soon as it has its pid: until the run holds the stop
            # signals (its first line), they wait blocked instead of killing it or being lost (SIG_IGN)
            signal.pthread_sigmask(signal.SIG_BLOCK, early_signals.HELD_SIGNALS)
            run = real_fork()
            if run == 0:
                connection.close()
                code = 1
                try:
                    os.setsid()  # its own session, as ChildProcesses starts a child
                    if die_with(waiter, DEATH_SIGNAL):
                        code = _run_in_this_process(request, passed)
                except BaseException:  # the run's own traceback, in its output, as Python prints it
                    traceback.print_exc()
                finally:
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()
                        sys.stderr.flush()
                    os._exit(code)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, early_signals.HELD_SIGNALS)
            for fd in passed:  # the run's now; the waiter keeps no terminal or pipe of the caller's open
                os.close(fd)
            with contextlib.suppress(OSError):  # a caller gone (it killed the run) is not told
                connection.sendall(f"{run}\n".encode())
            status = _wait_for_run(run, connection, real_waitpid, monkey.get_original("select", "select"))
            with contextlib.suppress(OSError):
                connection.sendall(f"{-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}\n".encode())
            os._exit(0)
        connection.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), "--reports" in sys.argv[3:])
