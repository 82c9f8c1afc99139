"""The CLI's child processes: a signal reaches the lead once, helpers are reaped, the exit code says
what stopped the run; and the Locust options the CLI gives a master (web UI host, worker wait)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from inferload.run import child_processes
from inferload.run.child_processes import ChildProcesses, exit_code
from inferload.run.distributed import DistributedRun, master_command
from tests.support.scenario_factory import scenario

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.mark.parametrize(
    ("returncode", "signals", "expected"),
    [
        (0, [], 0),
        (1, [], 1),
        (2, [], 2),
        (130, [signal.SIGINT], 130),  # Locust's own code after the signal
        (143, [signal.SIGINT], 143),
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
    headless = master_command(distributed_run(True), Path("locustfile.py"), 5557)
    assert headless[headless.index("--worker-wait") + 1] == "30" and "--web-host" not in headless
    web = master_command(distributed_run(False), Path("locustfile.py"), 5557)
    assert web[web.index("--web-host") + 1] == "127.0.0.1" and "--worker-wait" not in web
