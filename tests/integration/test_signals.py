"""A run stopped by SIGINT or SIGTERM keeps its results: `inferload run` (one process and
`--workers 2`) and plain `locust -f ... --headless`, with real signals, against the reference server
(each call held `HOLD_MS` in one of `SLOTS` slots): what is tested is inferload's and Locust's
handling of signals, and the server's own count of the calls it answered is the truth.

Each process under test starts in its own session (as a service manager or `docker stop` would
signal it, and so that a SIGINT ignored by a background shell is not inherited). "Mid-run" is when
the server has answered requests of this run; its count is also the check that the master gathered
its workers' last reports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.local.reference_server import ReferenceServerProcess
from inferload.local.servers.procs import processes_mentioning
from tests.support.locust_runner import locust_command, python_env
from tests.support.ports import free_port
from tests.support.reference_server import answered, reference_server, reference_target
from tests.support.scenario_factory import write_scenario
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

#: each run a process of its own, as a user's `inferload run` starts it: the signals reach that process
pytestmark = pytest.mark.usefixtures("fresh_locust_processes")

#: a signalled run has this long to write its results and exit
STOP_DEADLINE_S = 30.0
#: after the second signal the process ends at once
SECOND_SIGNAL_DEADLINE_S = 3.0
#: requests in flight when users are killed: the server counts them, the client does not
IN_FLIGHT_SLACK = 20
#: the reference server's hold per call and its slots (more than the users: no call waits)
HOLD_MS, SLOTS = 5.0, 8


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServerProcess]:
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as running:
        yield running


def target(server: ReferenceServerProcess) -> dict[str, Any]:
    return reference_target("t", "triton-grpc", server.grpc_address, timeout="5s")


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    log: Path
    results: Path
    answered_before: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def scenario(server, tmp_path) -> Path:
    data = {"name": "signals", "duration": "120s", "targets": [target(server)], "shape": {"kind": "steady", "users": 2}}
    return write_scenario(tmp_path, data)


def start(command: list[str], tmp_path: Path, server: ReferenceServerProcess) -> Started:
    log = tmp_path / "output.log"
    before = answered(server)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, env=python_env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    started = Started(process, log, tmp_path / "results", before)
    try:
        wait_until(
            lambda: process.poll() is not None or answered(server) - before > 200,
            60,
            "the run to be sending requests",
        )
        assert process.poll() is None, started.output()
    except BaseException:  # a run that never got going: nothing of it left running after the test
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_DEADLINE_S)
        raise
    return started


def stop(started: Started, signum: int) -> tuple[int, float]:
    """Send `signum`; the exit code and the seconds it took to exit."""
    sent = time.monotonic()
    os.kill(started.process.pid, signum)
    code = started.process.wait(timeout=STOP_DEADLINE_S)
    return code, time.monotonic() - sent


def inferload_run(scenario: Path, tmp_path: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "inferload.cli",
        "run",
        str(scenario),
        "--headless",
        "--out",
        str(tmp_path / "results"),
        *options,
        "--",
        "--only-summary",
    ]


def assert_interrupted_results(started: Started, answered_after: int, exact: bool) -> dict:
    results = started.results
    output = started.output()
    assert (results / "summary.json").is_file(), output
    assert (results / "windows.csv").read_text().startswith("window_start,"), output
    assert "<html" in (results / "report.html").read_text().lower(), output
    summary = json.loads((results / "summary.json").read_text())
    assert summary["interrupted"] is True
    target = summary["targets"]["t"]
    assert target["requests"] > 200 and target["failures"] == 0
    sent = answered_after - started.answered_before
    if exact:  # every request the server answered was counted, the workers' last ones included
        assert sent - IN_FLIGHT_SLACK <= target["requests"] <= sent, (target["requests"], sent)
    return summary


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_inferload_run_writes_interrupted_results_and_leaves_nothing(server, scenario, tmp_path, signum):
    started = start(inferload_run(scenario, tmp_path), tmp_path, server)
    code, took_s = stop(started, signum)

    assert code == 128 + signum, started.output()
    assert processes_mentioning(str(tmp_path)) == []  # the CLI waited for its Locust process
    assert took_s < STOP_DEADLINE_S
    assert_interrupted_results(started, answered(server), exact=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_a_distributed_run_gathers_the_workers_last_reports(server, scenario, tmp_path, signum):
    port = free_port()
    command = inferload_run(scenario, tmp_path, "--workers", "2", "--master-port", str(port))
    started = start(command, tmp_path, server)
    code, _ = stop(started, signum)

    assert code == 128 + signum, started.output()
    assert processes_mentioning(str(tmp_path)) == []  # the master
    assert processes_mentioning(f"--master-port {port}") == []  # the workers
    summary = assert_interrupted_results(started, answered(server), exact=True)
    assert summary["workers"] == 2 and summary["workers_lost"] == []


def test_sigterm_to_plain_locust_writes_interrupted_results(server, scenario, tmp_path):
    command = locust_command(scenario, "--headless", "--only-summary", "--results-dir", str(tmp_path / "results"))
    started = start(command, tmp_path, server)
    code, _ = stop(started, signal.SIGTERM)

    assert code == 143, started.output()
    assert "SIGTERM: stopping the run early" in started.output()
    assert_interrupted_results(started, answered(server), exact=True)


def test_a_second_signal_ends_the_process_at_once(server, scenario, tmp_path):
    command = locust_command(scenario, "--headless", "--only-summary", "--results-dir", str(tmp_path / "results"))
    started = start(command, tmp_path, server)
    os.kill(started.process.pid, signal.SIGTERM)
    wait_until(lambda: "stopping the run early" in started.output(), 10, "the first SIGTERM to be handled")

    sent = time.monotonic()
    os.kill(started.process.pid, signal.SIGTERM)
    code = started.process.wait(timeout=STOP_DEADLINE_S)

    assert time.monotonic() - sent < SECOND_SIGNAL_DEADLINE_S, started.output()
    assert code == 143
    assert "SIGTERM again: exiting at once" in started.output()


#: longer than any test here waits: a run that waited for it would fail the stop deadline
AUTOQUIT_S = "600"


def web_ui_autostart(scenario: Path, tmp_path: Path) -> list[str]:
    """A web UI run that starts itself and would quit only `AUTOQUIT_S` after it ends (Locust's options)."""
    return locust_command(
        scenario,
        *("--web-host", "127.0.0.1", "--web-port", str(free_port()), "--autostart", "--autoquit", AUTOQUIT_S),
        *("--results-dir", str(tmp_path / "results")),
    )


def test_sigint_to_a_self_starting_web_ui_run_writes_interrupted_results_without_waiting_for_autoquit(server, scenario, tmp_path):
    started = start(web_ui_autostart(scenario, tmp_path), tmp_path, server)
    code, _ = stop(started, signal.SIGINT)  # within STOP_DEADLINE_S, not AUTOQUIT_S

    assert code == 130, started.output()
    assert_interrupted_results(started, answered(server), exact=True)


def test_sigint_after_a_self_starting_web_ui_run_ended_quits_without_waiting_for_autoquit(server, tmp_path):
    data = {"name": "ended", "duration": "2s", "targets": [target(server)], "shape": {"kind": "steady", "users": 2}}
    started = start(web_ui_autostart(write_scenario(tmp_path, data), tmp_path), tmp_path, server)
    wait_until(lambda: "Shape test completed" in started.output(), 30, "the run to end (the web UI stays up)")
    code, _ = stop(started, signal.SIGINT)

    assert code == 0, started.output()  # the run was complete: Locust's own exit code
    summary = json.loads((started.results / "summary.json").read_text())
    assert summary["interrupted"] is False and summary["targets"]["t"]["requests"] > 0


@pytest.mark.parametrize("workers", [0, 2], ids=["local", "2-workers"])
def test_a_web_ui_run_writes_its_results_when_it_ends_and_ctrl_c_then_exits_0(server, tmp_path, workers):
    """`inferload run` with the web UI (started by Locust's --autostart, no --autoquit: the UI stays up
    after the run, as a user's does): the results are there as soon as the run ends, every request
    the server answered counted (a master waits for its workers' last reports), and the Ctrl-C that quits
    the UI afterwards is no interruption (before: nothing written until the Ctrl-C, then exit 130 with
    summary.json saying interrupted: false)."""
    data = {"name": "web-ended", "duration": "3s", "targets": [target(server)], "shape": {"kind": "steady", "users": 2}}
    command = [
        *inferload_run(write_scenario(tmp_path, data), tmp_path)[:5],  # python -m inferload.cli run SCENARIO
        "--out",
        str(tmp_path / "results"),
        *(["--workers", str(workers)] if workers else []),
        "--",
        "--autostart",
        "--web-port",
        str(free_port()),
    ]
    started = start(command, tmp_path, server)
    summary_file = started.results / "summary.json"
    try:
        wait_until(summary_file.is_file, 60, "summary.json, written when the run ends (the web UI still up)")
        wait_until(lambda: (started.results / "report.html").is_file(), 30, "report.html")
        assert started.process.poll() is None, started.output()  # the web UI is still serving
        written = summary_file.read_text()
        sent = answered(server) - started.answered_before
        counted = json.loads(written)["targets"]["t"]["requests"]
        assert sent - IN_FLIGHT_SLACK <= counted <= sent, (counted, sent)
    except BaseException:  # a failed check: nothing left serving
        started.process.kill()  # its Locust processes get SIGTERM from the kernel (PR_SET_PDEATHSIG)
        started.process.wait(timeout=STOP_DEADLINE_S)
        raise

    code, _ = stop(started, signal.SIGINT)

    assert code == 0, started.output()
    assert summary_file.read_text() == written  # not written again at the quit
    summary = json.loads(written)
    assert summary["interrupted"] is False and summary["targets"]["t"]["requests"] > 0
    assert processes_mentioning(str(tmp_path)) == []
