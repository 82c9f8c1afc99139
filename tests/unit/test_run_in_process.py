"""The run plugin inside a real in-process Locust (Environment + LocalRunner, no server): a fake
user fires request events under the target's name; the run writes summary.json, windows.csv and
report.html at `quitting`, and sets the process exit code from its SLO checks."""

from __future__ import annotations

import json
import socket
import time
from argparse import Namespace
from pathlib import Path
from typing import Any, ClassVar

import gevent
import pytest
from locust import User, constant, task
from locust.env import Environment

from inferload.run.plugin import InferloadRun
from tests.support.scenario_factory import scenario, tiny_target

TARGET = "ts"
REQUESTS = 60  # each run lasts until the fake users have fired this many requests
DEADLINE_S = 10.0


def closed_port() -> int:
    """A loopback port nothing listens on: the server-side readings are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_user(latency_ms: float, fail_every: int) -> type[User]:
    """A user that reports a request every 10 ms: `latency_ms` each, every `fail_every`-th failed (0: none)."""

    class FakeUser(User):
        wait_time = constant(0.01)
        sent: ClassVar[list[bool]] = []  # failed or not, per request fired

        @task
        def call(self) -> None:
            failed = bool(fail_every) and len(self.sent) % fail_every == fail_every - 1
            self.sent.append(failed)
            self.environment.events.request.fire(
                request_type="fake",
                name=TARGET,
                response_time=latency_ms,
                response_length=0,
                exception=RuntimeError("refused by the fake") if failed else None,
                context={},
            )

    return FakeUser


def run_in_process(
    tmp_path: Path, user: type[User], slo: dict[str, Any] | None = None, interrupted: bool = False, no_report: bool = False
) -> tuple[InferloadRun, Environment, dict[str, Any]]:
    target = tiny_target(TARGET, "torchserve-rest", f"http://127.0.0.1:{closed_port()}", slo=slo)
    run = InferloadRun(scenario({"kind": "steady", "users": 2}, duration="10s", targets=[target], window="1s"))
    options = Namespace(
        results_dir=str(tmp_path / "results"),
        run_id="in-process",
        cold_starts=None,
        requests_csv=False,
        skip_start_checks=True,  # no server behind the target: the fake user answers
        no_report=no_report,
    )
    environment = Environment(user_classes=[user], parsed_options=options)
    runner = environment.create_local_runner()
    run.on_init(environment)
    runner.start(2, spawn_rate=100)
    sent: list[bool] = user.sent  # type: ignore[attr-defined]
    deadline = time.monotonic() + DEADLINE_S
    while len(sent) < REQUESTS and time.monotonic() < deadline:
        gevent.sleep(0.05)
    run.interrupted = interrupted
    runner.quit()
    environment.events.quitting.fire(environment=environment, reverse=True)
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    return run, environment, summary


def test_a_run_writes_the_summary_the_contract_describes(tmp_path: Path) -> None:
    user = fake_user(latency_ms=5.0, fail_every=0)
    _, environment, summary = run_in_process(tmp_path, user)

    assert list(summary) == [
        "schema_version",
        "run_id",
        "scenario",
        "started_at",
        "duration_s",
        "warmup_s",
        "steady_s",
        "workers",
        "targets",
        "slo",
        "interrupted",
    ]
    assert summary["run_id"] == "in-process" and summary["workers"] == 1 and summary["interrupted"] is False
    assert summary["schema_version"] == 2
    assert 0 < summary["duration_s"] < DEADLINE_S
    figures = summary["targets"][TARGET]
    assert list(figures) == [
        "server",
        "protocol",
        "kind",
        "model",
        "requests",
        "failures",
        "error_rate",
        "throughput_rps",
        "latency_ms",
        "server_side",
        "cold_start_s",
        "residual_ms",
    ]
    assert (figures["server"], figures["protocol"], figures["kind"], figures["model"]) == (
        "torchserve",
        "http",
        "torchserve-rest",
        "tiny",
    )
    assert figures["requests"] == len(user.sent) >= REQUESTS and figures["failures"] == 0  # type: ignore[attr-defined]
    assert figures["latency_ms"]["p50"] == figures["latency_ms"]["max"] == 5.0
    assert figures["server_side"] is None and figures["cold_start_s"] is None and figures["residual_ms"] is None
    assert summary["slo"] == {"passed": True, "checks": []}
    assert environment.process_exit_code == 0  # a clean run: 0 from its own figures
    results = tmp_path / "results"
    assert (results / "windows.csv").read_text().startswith("window_start,")
    assert (results / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_an_interrupted_run_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, summary = run_in_process(tmp_path, fake_user(latency_ms=5.0, fail_every=0), interrupted=True)
    assert summary["interrupted"] is True
    assert "the run was interrupted" in capsys.readouterr().out
    assert "stopped early" in (tmp_path / "results" / "report.html").read_text()


def test_no_report_writes_the_summary_and_windows_but_no_report_html(tmp_path: Path) -> None:
    _, _, summary = run_in_process(tmp_path, fake_user(latency_ms=5.0, fail_every=0), no_report=True)
    results = tmp_path / "results"
    assert summary["targets"][TARGET]["requests"] > 0
    assert (results / "windows.csv").is_file() and not (results / "report.html").exists()


@pytest.fixture()
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """No report.html (its plots take most of a short run's time; the tests above write it)."""
    monkeypatch.setattr("inferload.run.finish.write_report", lambda folder: Path(folder) / "report.html")


@pytest.mark.usefixtures("no_plots")
@pytest.mark.parametrize(
    ("fail_every", "slo", "exit_code"),
    [
        (0, {"p99_ms": 1}, 1),  # a breached SLO (every request takes 5 ms)
        (1, None, 1),  # every request failed
        (10, {"error_rate": 0.5}, 0),  # failures within an error-rate SLO
        (10, None, 1),  # failures and no SLO: 1, from the run's own figures (never Locust's statistics)
        (0, None, 0),  # a clean run: 0, from the run's own figures too
    ],
)
def test_the_exit_code_follows_the_slo_and_the_failures(
    tmp_path: Path, fail_every: int, slo: dict[str, Any] | None, exit_code: int
) -> None:
    _, environment, summary = run_in_process(tmp_path, fake_user(5.0, fail_every), slo=slo)
    assert environment.process_exit_code == exit_code
    figures = summary["targets"][TARGET]
    if fail_every == 1:
        assert figures["failures"] == figures["requests"] > 0
    else:
        assert (figures["failures"] > 0) is bool(fail_every)
    if slo:
        (check,) = summary["slo"]["checks"]
        assert check["passed"] is (exit_code == 0)
