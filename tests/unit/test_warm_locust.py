"""A run forked from a warm Locust is what `python -m locust ARGS` in its own process would be: its
arguments, working folder, environment, output, exit status and session its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferload.errors import InferloadError
from inferload.launch.child_processes import WARM_ENV, ChildProcesses
from inferload.launch.warm_locust import SHARED_SOCKET_ENV, WarmLocust
from tests.support.locust_runner import python_env, run_forked
from tests.support.waiting import wait_until

PROBE = """
import os, sys, time
import inferload.users.engine as engine
print("cwd", os.getcwd())
print("probe", os.environ.get("PROBE"))
print("argv", sys.argv[1:3])
print("transport resolved before the run", engine.native_module.cache_info().currsize)
print("own session", os.getsid(0) == os.getpid())
sys.stdout.flush()
if os.environ.get("SLEEP"):
    time.sleep(float(os.environ["SLEEP"]))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture(scope="module")
def forks() -> Iterator[WarmLocust]:
    server = WarmLocust(python_env())
    yield server
    server.close()


def test_a_run_has_its_own_folder_environment_arguments_output_and_exit_code(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE)
    done = run_forked(forks, ["-f", str(locustfile)], tmp_path, {**python_env(), "PROBE": "seen", "CODE": "7"}, timeout_s=60)
    assert done.returncode == 7, done
    assert f"cwd {tmp_path}" in done.stdout and "probe seen" in done.stdout
    assert f"argv ['-f', '{locustfile}']" in done.stdout
    assert "transport resolved before the run 0" in done.stdout  # the server chose no transport for its forks
    assert "own session True" in done.stdout  # a signal to its group reaches it and nothing else
    assert "to stderr" in done.stderr and "to stderr" not in done.stdout
    again = run_forked(forks, ["-f", str(locustfile)], tmp_path, {**python_env(), "PROBE": "other"}, timeout_s=60)
    assert again.returncode == 0 and "probe other" in again.stdout  # nothing of the first run's environment


def test_a_run_without_an_output_file_writes_to_the_callers_own_stdout_and_stderr(forks, tmp_path, capfd):
    """`inferload run`'s run, forked: its output goes where a child's that inherits them would, the caller's."""
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE)
    run = forks.start(["-f", str(locustfile)], cwd=tmp_path, env={**python_env(), "PROBE": "inherited"})
    assert run.wait(timeout=60) == 0
    out, err = capfd.readouterr()
    assert "probe inherited" in out and "to stderr" in err and "to stderr" not in out


def test_a_run_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE)
    with pytest.raises(subprocess.TimeoutExpired):
        run_forked(forks, ["-f", str(locustfile)], tmp_path, {**python_env(), "SLEEP": "60"}, timeout_s=3)
    done = run_forked(forks, ["-f", str(locustfile)], tmp_path, python_env(), timeout_s=60)  # the server goes on serving
    assert done.returncode == 0, done


def test_a_run_killed_by_a_signal_reports_it_as_a_negative_return_code(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE.replace("sys.exit(", "os.kill(os.getpid(), 9)\nsys.exit("))
    done = run_forked(forks, ["-f", str(locustfile)], tmp_path, python_env(), timeout_s=60)
    assert done.returncode == -9, done


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


#: a locustfile that says which stop signals its run held before Locust loaded it
HELD_PROBE = """
from inferload.run import early_signals
print("held", early_signals.take(), flush=True)
"""


def test_a_stop_signal_sent_as_a_run_starts_is_held_for_it_not_lost_or_fatal(forks, tmp_path):
    """`ChildProcesses` forwards a signal that came while a run was starting as soon as it has the
    run's pid: the run holds it from its first instant (before its own handlers) and acts on it."""
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(HELD_PROBE)
    for attempt in range(5):  # the pid comes back as the run is forked: the signal lands in its first moments
        out = tmp_path / f"out-{attempt}"
        run = forks.start(["-f", str(locustfile)], cwd=tmp_path, env=python_env(), stdout=out)
        os.kill(run.pid, signal.SIGTERM)
        code = run.wait(timeout=60)  # Locust then finds no user class in it: exit 1, not killed (-15)
        assert code == 1 and f"held [{int(signal.SIGTERM)}]" in out.read_text(), (attempt, code, out.read_text()[-2000:])


def test_a_warm_locust_that_built_matplotlibs_font_cache_forks_runs_without_its_thread(tmp_path):
    """A machine's first report builds matplotlib's font cache as the server imports it, which starts a
    Timer thread and cancels it: a fork must not inherit it (it ended there with a KeyError traceback
    in every run's output, which failed a fresh machine's CI)."""
    locustfile = tmp_path / "probe.py"
    locustfile.write_text("import gevent\ngevent.sleep(0.2)\nprint('probe ran', flush=True)\n")
    env = {**python_env(), "MPLCONFIGDIR": str(tmp_path / "no-font-cache-yet")}
    server = WarmLocust(env, reports=True)
    try:
        done = run_forked(server, ["-f", str(locustfile)], tmp_path, env, timeout_s=60)
    finally:
        server.close()
    assert "probe ran" in done.stdout, done
    assert (tmp_path / "no-font-cache-yet").is_dir()  # the server did build the cache
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


def test_a_run_whose_warm_locust_died_is_polled_without_waiting_and_ends_with_it(tmp_path):
    """The server killed mid-run, and with it the run's waiter (its parent, which held the connection):
    `poll` answers at once (it may run in a signal handler) while the run lives on; the run killed then
    reads as killed by SIGKILL."""
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(
        "import signal, time\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    server = WarmLocust(python_env())
    try:
        run = server.start(["-f", str(locustfile)], cwd=tmp_path, env=python_env(), stdout=tmp_path / "out")
        wait_until(lambda: "up" in (tmp_path / "out").read_text(), timeout_s=30, what="the run's first line")
        assert server.pid is not None
        waiter = _parent(run.pid)
        os.kill(server.pid, signal.SIGKILL)
        # the waiter goes with the server (PR_SET_PDEATHSIG), the run is handed to another parent
        wait_until(lambda: _parent(run.pid) != waiter, timeout_s=30, what="the run's waiter gone")
        started = time.monotonic()
        assert run.poll() is None  # the run ignores SIGHUP: it lives on, and poll says so at once
        assert time.monotonic() - started < 1.0  # before: poll waited for the run's end (60 s)
        os.kill(run.pid, 0)  # (alive)
        run.kill()
        assert run.wait(timeout=10) == -signal.SIGKILL
    finally:
        server.close()


COMMAND_LINE_PROBE = """
import sys
print("process", open("/proc/self/cmdline").read().replace(chr(0), " "))
sys.exit(3)
"""


@pytest.mark.parametrize(("warm", "started_as"), [("1", "inferload.launch.warm_locust"), ("0", "inferload.launch.locust_entry")])
def test_a_command_that_runs_locust_many_times_forks_each_run_from_its_warm_locust(tmp_path, monkeypatch, warm, started_as):
    """`ChildProcesses(warm=True)` (sweep steps, demo phases): each run a fork of one warm Locust, or with
    INFERLOAD_WARM_LOCUST=0 a process of its own; the lead's exit code and output are the same either way."""
    monkeypatch.setenv(WARM_ENV, warm)
    monkeypatch.chdir(tmp_path)
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(COMMAND_LINE_PROBE)
    with ChildProcesses(warm=True) as children:
        for run in ("one", "two"):
            children.start_locust(["-f", str(locustfile)], tmp_path / f"{run}.log")
            assert children.wait() == 3
            assert started_as in (tmp_path / f"{run}.log").read_text()


def test_a_warm_locust_that_cannot_fork_a_run_leaves_it_to_a_process_of_its_own(tmp_path, monkeypatch):
    def refused(*_args, **_keys):
        raise InferloadError("the warm Locust did not fork the run: error: the warm Locust has 2 threads")

    monkeypatch.setattr(WarmLocust, "start", refused)
    monkeypatch.chdir(tmp_path)
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(COMMAND_LINE_PROBE)
    with ChildProcesses(warm=True) as children:
        children.start_locust(["-f", str(locustfile)], tmp_path / "run.log")
        assert children.wait() == 3
    log = (tmp_path / "run.log").read_text()
    assert "has 2 threads; this and the next runs start as new processes" in log and "locust_entry" in log


SERVER_PROBE = """
import os, sys
waiter = os.getppid()
print("server", open(f"/proc/{waiter}/stat").read().rsplit(")", 1)[1].split()[1])
sys.exit(0)
"""


@pytest.fixture
def server_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A locustfile that prints the pid of the server its run was forked from, in the test's own folder."""
    monkeypatch.setenv(WARM_ENV, "1")
    monkeypatch.chdir(tmp_path)
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(SERVER_PROBE)
    return locustfile


def test_blocks_given_one_warm_locust_fork_from_it_and_leave_it_to_its_owner(tmp_path, server_probe):
    """tune's candidates: each a sweep of its own, every step forked from the tune's one warm Locust."""
    locustfile = server_probe
    shared = WarmLocust()
    try:
        for block in ("one", "two"):
            with ChildProcesses(warm=shared) as children:
                children.start_locust(["-f", str(locustfile)], tmp_path / f"{block}.log")
                assert children.wait() == 0
            assert shared.pid is not None  # still running for the next block
            assert f"server {shared.pid}" in (tmp_path / f"{block}.log").read_text()
    finally:
        shared.close()
    assert shared.pid is None


def test_a_warm_locust_named_by_the_environment_forks_every_run_of_a_command_and_outlives_it(tmp_path, monkeypatch, server_probe):
    """A process that runs many commands (the test suite) starts one server and names its socket: a single
    run's block (`warm=False`, `inferload run`) forks from it too, so do a distributed run's master and
    workers, and no block stops it."""
    locustfile = server_probe
    owner = WarmLocust()
    try:
        monkeypatch.setenv(SHARED_SOCKET_ENV, str(owner.socket))
        for block, warm in (("single", False), ("many", True)):
            with ChildProcesses(warm=warm) as children:
                children.start_locust(["-f", str(locustfile)], tmp_path / f"{block}.log")
                assert children.wait() == 0
            assert f"server {owner.pid}" in (tmp_path / f"{block}.log").read_text()
        with ChildProcesses() as children:  # a distributed run: its master the lead, its workers helpers
            children.start_locust(["-f", str(locustfile)], tmp_path / "master.log")
            worker = children.start_locust(["-f", str(locustfile)], tmp_path / "worker.log", lead=False)
            assert children.wait() == 0 and children.helpers == [worker]
        assert worker.wait(timeout=30) == 0 and f"server {owner.pid}" in (tmp_path / "worker.log").read_text()
        assert owner.pid is not None  # still running: the blocks only used it
    finally:
        owner.close()


def test_a_warm_locust_refuses_a_caller_of_another_inferload_and_its_run_starts_as_a_process(tmp_path, monkeypatch):
    """An installed wheel's CLI must not run the checkout's code: the server says which package it runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("inferload.launch.warm_locust.PACKAGE", "/elsewhere/inferload")  # the caller's side only
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(COMMAND_LINE_PROBE)
    owner = WarmLocust(python_env())
    try:
        monkeypatch.setenv(SHARED_SOCKET_ENV, str(owner.socket))
        with ChildProcesses() as children:
            children.start_locust(["-f", str(locustfile)], tmp_path / "run.log")
            assert children.wait() == 3
    finally:
        owner.close()
    log = (tmp_path / "run.log").read_text()
    assert "not /elsewhere/inferload; this and the next runs start as new processes" in log and "locust_entry" in log


def test_a_caller_is_refused_unless_it_shares_the_servers_package_user_and_namespaces():
    """What a fork cannot change is refused, so the caller starts a process of its own: here the caller is
    this process (the same user and namespaces), so only another package is refused."""
    from inferload.launch.warm_locust import PACKAGE, _refusal

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        request = {"argv": [], "cwd": "/", "env": {}, "stdout": "", "stderr": "", "package": PACKAGE}
        assert _refusal(ours, request) is None
        refused = _refusal(ours, {**request, "package": "/elsewhere/inferload"})
        assert refused == f"this warm Locust runs {PACKAGE}, not /elsewhere/inferload"


def test_a_run_whose_caller_has_gone_gets_sighup_and_ends(forks, tmp_path):
    """A shared server outlives the commands that use it: a run whose caller died (its connection closed)
    is stopped as a run whose CLI died is, with SIGHUP (its results written, `inferload.run.signals`)."""
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGHUP, lambda *_: (print('hup', flush=True), sys.exit(5)))\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    run = forks.start(["-f", str(locustfile)], cwd=tmp_path, env=python_env(), stdout=tmp_path / "out")
    wait_until(lambda: "up" in (tmp_path / "out").read_text(), timeout_s=30, what="the run's first line")
    pid = run.pid
    del run  # the caller's side of the connection closes
    wait_until(lambda: "hup" in (tmp_path / "out").read_text(), timeout_s=30, what="the run to get SIGHUP")
    wait_until(
        lambda: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
        timeout_s=30,
        what="the run to end",
    )


def test_the_warm_locust_has_imported_everything_a_run_of_inferloads_locustfile_imports():
    """Else each fork imports the rest itself (the user classes, tritonclient, protobuf: about 0.4
    CPU-seconds a run), which is what a warm Locust is there to save."""
    probe = (
        "import sys\n"
        "from inferload.launch.warm_locust import preload\n"
        "preload(reports=False)\n"
        "before = set(sys.modules)\n"
        "import inferload.locustfile\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=python_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['inferload.locustfile']", done.stdout
