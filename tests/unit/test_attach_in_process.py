"""`inferload.attach` inside a real in-process Locust (Environment + LocalRunner, no server): plain
Locust users (fakes that fire request events with known latencies, named so) get inferload's
summary.json, windows.csv, SLO checks and exit code; a request named like a target gets that
target's entry, every other name an entry of Locust's own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Any, ClassVar

import gevent
import gevent.monkey
import pytest
from gevent.hub import get_hub
from locust import User, constant, task
from locust.env import Environment

from inferload.errors import ScenarioError, StartCheckError
from inferload.run.attached_run import AttachedRun, attach
from tests.support.locust_runner import python_env
from tests.support.ports import free_port
from tests.support.scenario_factory import scenario, tiny_target

REQUESTS = 40  # each run lasts until the fake users have fired this many requests
DEADLINE_S = 10.0


def closed_port() -> int:
    """A loopback port nothing listens on: the server-side readings are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeLocustUser(User):
    """A plain Locust user of the test's own: every 10 ms a GET of /a (7 ms) and a POST of /a (3 ms, every
    second one failed), and a request under the name ``tiny`` (5 ms)."""

    wait_time = constant(0.01)
    fired: ClassVar[list[str]] = []

    @task
    def call(self) -> None:
        count = len(self.fired)
        for request_type, name, latency_ms, failed in (
            ("GET", "/a", 7.0, False),
            ("POST", "/a", 3.0, count % 2 == 1),
            ("grpc", "tiny", 5.0, False),
        ):
            self.environment.events.request.fire(
                request_type=request_type,
                name=name,
                response_time=latency_ms,
                response_length=10,
                exception=RuntimeError("refused by the fake") if failed else None,
                context={},
            )
        self.fired.append(name)


@pytest.fixture()
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """No report.html (its plots take most of a short run's time; test_run_in_process.py writes it)."""
    monkeypatch.setattr("inferload.run.finish.write_report", lambda folder: Path(folder) / "report.html")


def run_attached(tmp_path: Path, **attach_keys: Any) -> tuple[Environment, AttachedRun, dict[str, Any]]:
    FakeLocustUser.fired = []
    environment = Environment(user_classes=[FakeLocustUser], parsed_options=Namespace(locustfile="my_locustfile.py"))
    runner = environment.create_local_runner()
    attached = attach(environment, results_dir=tmp_path / "results", **attach_keys)
    runner.start(2, spawn_rate=100)
    deadline = time.monotonic() + DEADLINE_S
    while len(FakeLocustUser.fired) < REQUESTS and time.monotonic() < deadline:
        gevent.sleep(0.05)
    runner.quit()
    environment.events.quitting.fire(environment=environment, reverse=True)
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    return environment, attached, summary


@pytest.mark.usefixtures("no_plots")
def test_plain_locust_requests_get_entries_of_their_own_with_exact_percentiles(tmp_path: Path) -> None:
    environment, attached, summary = run_attached(tmp_path)
    assert summary["scenario"] == "my_locustfile" and summary["run_id"].startswith("my_locustfile-")
    assert summary["warmup_s"] == 0.0 and summary["workers"] == 1
    assert set(summary["targets"]) == {"/a", "tiny"}  # no scenario, no inferload user: every name is Locust's own
    entry = summary["targets"]["/a"]
    assert (entry["server"], entry["protocol"], entry["model"], "kind" in entry) == ("locust", "GET+POST", "", False)
    sent = len(FakeLocustUser.fired)
    assert entry["requests"] == 2 * sent and entry["failures"] == sent // 2
    assert entry["latency_ms"]["p50"] in (3.0, 7.0) and entry["latency_ms"]["max"] == 7.0
    assert entry["server_side"] is None and entry["cold_start_s"] is None and entry["residual_ms"] is None
    assert summary["targets"]["tiny"]["protocol"] == "grpc"
    assert summary["slo"] == {"passed": True, "checks": []}
    assert environment.process_exit_code == 1  # failures that no error-rate SLO covers: the run's own figures decide
    assert attached.summary is not None and attached.summary.run_id == summary["run_id"]
    windows = (tmp_path / "results" / "windows.csv").read_text()
    assert ",/a," in windows and ",tiny," in windows


@pytest.mark.usefixtures("no_plots")
@pytest.mark.parametrize(("p99_ms", "exit_code"), [(1.0, 1), (100.0, 0)])
def test_slo_thresholds_on_a_plain_request_set_the_exit_code(tmp_path: Path, p99_ms: float, exit_code: int) -> None:
    environment, _, summary = run_attached(tmp_path, slo={"/a": {"p99_ms": p99_ms, "error_rate": 0.6}})
    checks = {c["metric"]: c for c in summary["slo"]["checks"]}
    assert checks["p99_ms"]["value"] == 7.0 and checks["p99_ms"]["passed"] is (exit_code == 0)
    assert checks["error_rate"]["passed"] is True  # a quarter of /a failed: within the threshold, so exit 0, not 1
    assert environment.process_exit_code == exit_code


@pytest.mark.usefixtures("no_plots")
def test_a_request_named_like_a_scenario_target_gets_the_targets_entry_and_its_slo(tmp_path: Path) -> None:
    target = tiny_target("tiny", "triton-grpc", f"127.0.0.1:{closed_port()}", slo={"p50_ms": 4})
    the_scenario = scenario({"kind": "steady", "users": 1}, duration="1m", targets=[target], warmup="0s", window="1s")
    environment, _, summary = run_attached(tmp_path, scenario=the_scenario)
    assert summary["scenario"] == "test"
    entry = summary["targets"]["tiny"]
    assert (entry["server"], entry["protocol"], entry["kind"], entry["model"]) == ("triton", "grpc", "triton-grpc", "tiny")
    assert entry["latency_ms"]["p50"] == 5.0 and entry["server_side"] is None  # nothing serves the target's address
    assert summary["targets"]["/a"]["server"] == "locust"
    (check,) = summary["slo"]["checks"]
    assert (check["target"], check["metric"], check["value"], check["passed"]) == ("tiny", "p50_ms", 5.0, False)
    assert environment.process_exit_code == 1


def test_bad_thresholds_are_a_scenario_error_and_attach_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    environment = Environment(user_classes=[FakeLocustUser])
    environment.create_local_runner()
    with pytest.raises(ScenarioError) as caught:
        AttachedRun(environment, slo={"/a": {"p99": 5, "error_rate": 2}})
    assert str(caught.value).splitlines() == [
        "attach(slo=...): slo['/a'].error_rate: must be at most 1; got 2",
        "attach(slo=...): slo['/a'].p99: unknown key 'p99' (did you mean 'p99_ms'?)",
    ]
    with pytest.raises(StartCheckError, match=r"attach\(window_s=\.\.\.\): expected a number of seconds of at least 0\.1; got 0"):
        AttachedRun(environment, window_s=0)
    with pytest.raises(StartCheckError, match=r"attach\(run_id=\.\.\.\): expected no '/'"):
        AttachedRun(environment, run_id="a/b")
    with pytest.raises(SystemExit) as exited:
        attach(environment, influx_url="influx:8086")
    assert exited.value.code == 2
    assert "inferload.attach: attach(influx_url=...) or the INFLUX_* variables: " in capsys.readouterr().err


def test_attach_brings_the_loops_clock_up_to_date_so_that_run_time_is_not_cut_short() -> None:
    """attach runs in Locust's init, where importing inferload's run modules takes seconds on a busy
    machine with the hub's loop not running: its cached clock falls behind, and Locust's --run-time
    timer, armed next, fired that much early (seen: a 4 s run that ended after 38 ms)."""
    environment = Environment(user_classes=[FakeLocustUser])
    environment.create_local_runner()
    loop = get_hub().loop
    loop.update_now()
    gevent.monkey.get_original("time", "sleep")(0.3)  # blocks the hub, as a long import does
    stale = loop.now()
    AttachedRun(environment)
    assert loop.now() - stale >= 0.3


def test_attach_on_a_distributed_run_without_a_run_key_exits_2_saying_what_to_set(tmp_path: Path) -> None:
    """A Locust master (no worker needed: attach runs in its init, before it waits for any)."""
    locustfile = tmp_path / "plain.py"
    locustfile.write_text(
        "from locust import User, events, task\nimport inferload\n\n"
        "class Idle(User):\n    @task\n    def idle(self):\n        pass\n\n"
        "@events.init.add_listener\ndef on_locust_init(environment, **_kwargs):\n    inferload.attach(environment)\n"
    )
    env = {key: value for key, value in python_env().items() if key != "INFERLOAD_RUN_KEY"}
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--master", "--headless", "--expect-workers", "1"]
    command += ["--master-bind-port", str(free_port()), "-t", "2s"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "inferload.attach: a Locust master of an inferload run needs a run key: set INFERLOAD_RUN_KEY" in done.stderr
    assert not (tmp_path / "results").exists()
