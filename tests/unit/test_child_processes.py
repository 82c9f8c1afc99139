"""The CLI's child processes: a signal reaches the lead once, helpers are reaped, the exit code says
what stopped the run; and the Locust options the CLI gives a master (web UI host, worker wait)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from inferload.errors import StoppedBeforeStart
from inferload.launch import child_processes
from inferload.launch.child_processes import ChildProcesses, exit_code
from inferload.launch.distributed import DistributedRun, master_arguments
from inferload.run import early_signals
from tests.support.ports import free_port
from tests.support.scenario_factory import scenario, tiny_target, write_scenario
from tests.support.waiting import wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.mark.parametrize(
    ("returncode", "signals", "expected"),
    [
        (0, [], 0),
        (1, [], 1),
        (2, [], 2),
        (130, [signal.SIGINT], 130),  # Locust's own code after the signal
        (143, [signal.SIGINT], 143),
        (143, [signal.SIGHUP], 129),  # SIGHUP (a closed terminal) goes on as SIGTERM; the CLI says what it got
        (0, [signal.SIGTERM], 143),  # the run had just ended: still not a clean exit
        (-signal.SIGKILL, [], 137),  # died of a signal
    ],
)
def test_exit_code(returncode, signals, expected):
    assert exit_code(returncode, signals) == expected


def test_a_signal_to_the_cli_goes_to_the_lead_and_the_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with ChildProcesses() as children:
        lead = children.start(SLEEPER, lead=True)
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill` or `docker stop` would
        code = children.wait()
    assert lead.returncode == -signal.SIGTERM
    assert code == 143 and children.signals == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_signal_is_forwarded_and_then_handed_to_the_command_that_ends_at_once():
    seconds: list[int] = []
    with ChildProcesses(on_second=seconds.append) as children:
        children.start(SLEEPER, lead=True)
        os.kill(os.getpid(), signal.SIGINT)
        assert seconds == []  # the first stops the lead; the command carries on
        os.kill(os.getpid(), signal.SIGINT)
        code = children.wait()
    assert seconds == [signal.SIGINT] and children.signals == [signal.SIGINT, signal.SIGINT] and code == 130


def test_a_signal_while_the_command_starts_is_held_and_nothing_is_started():
    """`early_signals`: SIGINT before the handlers are installed neither raises KeyboardInterrupt where
    it lands nor is lost: the block that would start the children refuses to (130, nothing started)."""
    before = signal.getsignal(signal.SIGINT)
    release = early_signals.hold()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt here
        refused = pytest.raises(StoppedBeforeStart, match="SIGINT while starting: stopped before anything was started")
        with refused as stopped, ChildProcesses() as children:
            children.start(SLEEPER, lead=True)
        assert stopped.value.exit_code == 130
        assert early_signals.take() == []  # taken once
    finally:
        release()
    assert signal.getsignal(signal.SIGINT) == before


def test_sighup_is_forwarded_as_sigterm():
    with ChildProcesses() as children:
        lead = children.start(SLEEPER, lead=True)
        os.kill(os.getpid(), signal.SIGHUP)
        assert children.wait() == 143
    assert lead.returncode == -signal.SIGTERM


def test_helpers_that_outlive_the_lead_are_killed(monkeypatch):
    monkeypatch.setattr(child_processes, "HELPER_EXIT_WAIT_S", 0.2)
    with ChildProcesses() as children:
        children.start([sys.executable, "-c", "pass"], lead=True)
        helper = children.start(SLEEPER)
        assert children.wait() == 0
    assert helper.returncode == -signal.SIGKILL


def test_leaving_the_block_by_an_error_stops_the_lead():
    with pytest.raises(RuntimeError), ChildProcesses() as children:
        lead = children.start(SLEEPER, lead=True)
        raise RuntimeError("the CLI failed")
    assert lead.returncode == -signal.SIGTERM


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_gets_sigterm_when_the_cli_dies(tmp_path):
    pid_file = tmp_path / "child.pid"
    cli = subprocess.Popen(  # stands for the CLI: starts a sleeper, says its pid, then waits
        [
            *(sys.executable, "-c"),
            "import sys, time; from inferload.launch.child_processes import ChildProcesses\n"
            "with ChildProcesses() as children:\n"
            "    child = children.start([sys.executable, '-c', 'import time; time.sleep(60)'], lead=True)\n"
            f"    open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)\n",
        ],
        start_new_session=True,
    )
    try:
        wait_until(lambda: pid_file.is_file() and pid_file.read_text(), 20, "the CLI to start its child")
        child = int(pid_file.read_text())
        assert Path(f"/proc/{child}").exists()
        cli.kill()  # SIGKILL: the CLI forwards nothing, the kernel signals the child
        cli.wait()
        wait_until(lambda: not _alive(child), 10, f"child {child} to end after its CLI died")
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return status != "Z"  # a zombie has ended (its parent, init here, reaps it later)


def test_a_cli_that_has_spoken_grpc_still_starts_every_child():
    # gRPC's poller thread and fork handlers: with preexec_fn, about 1 child in 200 aborted before
    # exec ("epoll_wait error: Bad file descriptor"), measured on 2 cores; the children are now
    # started without it. A process of its own, as the CLI is (no gevent there).
    cli = (
        "import grpc, sys\n"
        "from inferload.launch.child_processes import ChildProcesses\n"
        f"channel = grpc.insecure_channel('127.0.0.1:{free_port()}')\n"
        "try:\n"
        "    grpc.channel_ready_future(channel).result(timeout=0.3)\n"
        "except grpc.FutureTimeoutError:\n"
        "    pass\n"
        "channel.close()\n"
        "with ChildProcesses() as children:\n"
        "    print([children.start(['true'], lead=True).wait() for _ in range(40)])\n"
    )
    done = subprocess.run([sys.executable, "-c", cli], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([0] * 40), done.stderr


def test_the_parent_death_wrapper_refuses_a_parent_that_is_gone_and_names_a_missing_command():
    wrapper = str(Path(child_processes.__file__).with_name("die_with_parent.py"))
    gone = subprocess.run([sys.executable, wrapper, "1", "true"], capture_output=True, text=True)
    assert gone.returncode == 128 + signal.SIGTERM  # pid 1 is not its parent: the run never starts
    missing = subprocess.run([sys.executable, wrapper, str(os.getpid()), "no-such-program-here"], capture_output=True, text=True)
    assert missing.returncode == 127 and "no-such-program-here" in missing.stderr
    usage = subprocess.run([sys.executable, wrapper, "not-a-pid"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def distributed_run(headless: bool) -> DistributedRun:
    return DistributedRun(
        scenario=scenario({"kind": "steady", "users": 1}),
        results_dir=Path("results"),
        run_id="r",
        local_workers=1,
        headless=headless,
        worker_wait_s=30,
        web_host="127.0.0.1",
    )


def test_a_headless_master_gets_the_worker_wait_and_a_web_ui_master_a_loopback_web_host():
    headless = master_arguments(distributed_run(True), Path("locustfile.py"), 5557)
    assert headless[headless.index("--worker-wait") + 1] == "30" and "--web-host" not in headless
    web = master_arguments(distributed_run(False), Path("locustfile.py"), 5557)
    assert web[web.index("--web-host") + 1] == "127.0.0.1" and "--worker-wait" not in web


def test_the_cli_starts_its_children_unpatched_by_gevent():
    # the modules a distributed `inferload run`, a sweep and a tune import before they start Locust:
    # none may import Locust (gevent's monkey-patching would make `subprocess` fork through gevent,
    # and a CLI that read models' metadata over gRPC then saw its child abort before exec)
    code = (
        "import json, subprocess, sys\n"
        "import inferload.cli, inferload.launch.distributed, inferload.launch.embedded_locustfile\n"
        "import inferload.startchecks.triton, inferload.users.tls, inferload.users.sequence\n"
        "import inferload.tune.sweep, inferload.tune.tune, inferload.local.demo\n"
        "print(json.dumps(['locust' in sys.modules, 'gevent.monkey' in sys.modules, subprocess.Popen.__module__]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[false, false, "subprocess"]'


def test_a_web_ui_lead_quit_by_a_signal_keeps_its_own_exit_code():
    """Ctrl-C is how a web UI run is quit once its run ended: the lead's 0 (or 1: an SLO) stands; a
    run the signal cut short exits 130 by itself."""
    assert exit_code(0, [signal.SIGINT], signal_is_quit=True) == 0
    assert exit_code(1, [signal.SIGINT], signal_is_quit=True) == 1
    assert exit_code(130, [signal.SIGINT], signal_is_quit=True) == 130
    assert exit_code(-signal.SIGKILL, [signal.SIGINT], signal_is_quit=True) == 137


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_signal_while_the_cli_starts_stops_it_with_130_and_nothing_started(tmp_path, monkeypatch, capsys, command):
    """SIGINT while `inferload` builds its parser (it imports the command's modules): `validate`
    stops at once; `run` stops before it starts Locust. Either way 130, no traceback, and the
    handlers are as they were."""
    from inferload import cli

    path = write_scenario(tmp_path, {"name": "s", "duration": "2s", "targets": [tiny_target("t", "triton-grpc", "127.0.0.1:1")],
                                     "shape": {"kind": "steady", "users": 1}})  # fmt: skip
    real = cli.build_parser

    def parser_with_a_signal(**options):  # as a Ctrl-C lands while the CLI starts
        os.kill(os.getpid(), signal.SIGINT)
        return real(**options)

    monkeypatch.setattr(cli, "build_parser", parser_with_a_signal)
    before = signal.getsignal(signal.SIGINT)
    args = [command, str(path)] + (["--headless", "--out", str(tmp_path / "out")] if command == "run" else [])
    assert cli.main(args) == 130
    assert "SIGINT while starting: stopped before anything was started" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) == before and not (tmp_path / "out").exists()
