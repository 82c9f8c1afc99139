"""The Python API against the real local Triton: ``self.client.infer`` in process (Locust as a
library, over Triton's HTTP API: geventhttpclient needs nothing set up), and ``inferload.attach``
in process, across the worker processes of ``locust --processes 2``, and streaming to the real
InfluxDB. Truth is Triton's own request count (its statistics API), Locust's own statistics of the
same requests, and what InfluxDB holds."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import gevent
import numpy as np
import pytest
from locust import FastHttpUser, User, constant, task
from locust.env import Environment

import inferload
from inferload.errors import HttpStatusError
from inferload.servermetrics.readers import snapshot
from inferload.users.base import InferenceUser
from tests.support.locust_runner import python_env
from tests.support.scenario_factory import write_scenario

INPUTS = [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}]
TINY_ANSWER_BYTES = 4 * 4  # tiny answers FP32 [1, 4] per request of batch 1
DEADLINE_S = 20.0


def triton_requests(http_port: int, model: str = "tiny") -> float:
    """Triton's count of the model's successful requests so far (its statistics API)."""
    return snapshot("triton-http", f"127.0.0.1:{http_port}", model).counters["requests"]


def started_user(cls: type[InferenceUser], events: list[dict[str, Any]], host: str | None = None) -> InferenceUser:
    environment = Environment(user_classes=[cls], host=host)
    environment.events.request.add_listener(lambda **event: events.append(event))
    user = cls(environment)
    user.on_start()
    return user


def test_client_infer_reports_what_triton_answered_for_the_request_index_given(local_servers, tmp_path: Path) -> None:
    port = local_servers.ports.triton_http
    np.save(tmp_path / "samples.npy", np.arange(3 * 16, dtype=np.float32).reshape(3, 16))
    keys = {"name": "tiny-http", "model": "tiny", "inputs": [{**INPUTS[0], "data": {"dataset": str(tmp_path / "samples.npy")}}]}
    cls = type("TinyOverHttp", (inferload.TritonHttpUser,), {"target": {**keys, "address": f"127.0.0.1:{port}"}})
    events: list[dict[str, Any]] = []
    user = started_user(cls, events)
    before = triton_requests(port)
    try:
        assert user.client.request_count == 3  # one request per sample (batch_size 1)
        results = [user.client.infer(request_index=i) for i in (2, 0, 1)] + [user.client.infer()]
    finally:
        user.on_stop()
    assert triton_requests(port) - before == 4  # each call one request, counted by Triton itself
    assert [r.request_index for r in results[:3]] == [2, 0, 1] and results[3].request_index in (0, 1, 2)
    for result, event in zip(results, events, strict=True):
        assert result.ok and result.response_length == TINY_ANSWER_BYTES
        assert (event["request_type"], event["name"], event["context"]) == ("HTTP", "tiny-http", {"target": "tiny-http"})
        assert event["response_time"] == result.latency_ms > 0 and event["exception"] is None


def test_a_failed_call_is_the_default_tasks_failure_returned(local_servers) -> None:
    port = local_servers.ports.triton_http
    target = {"name": "nope-http", "address": f"127.0.0.1:{port}", "model": "nope", "inputs": INPUTS}
    cls = type("NopeOverHttp", (inferload.TritonHttpUser,), {"target": target})
    events: list[dict[str, Any]] = []
    user = started_user(cls, events)
    try:
        result = user.client.infer()
        inferload.inference_task(user)  # the default task: the same call, the same report
    finally:
        user.on_stop()
    assert not result.ok and isinstance(result.error, HttpStatusError) and result.response_length == 0
    by_client, by_task = events
    assert by_client["exception"] is result.error
    assert type(by_task["exception"]) is type(result.error) and str(by_task["exception"]) == str(result.error)
    assert str(result.error) == "HTTP 404: Request for unknown model: 'nope' is not found"  # Triton's answer


class PlainTriton(FastHttpUser):
    """A plain Locust user: Triton's v2 JSON inference of ``tiny``, named ``tiny-plain``."""

    wait_time = constant(0.005)
    body = json.dumps({"inputs": [{"name": "INPUT__0", "shape": [1, 16], "datatype": "FP32", "data": [0.25] * 16}]})

    @task
    def infer(self) -> None:
        self.client.post("/v2/models/tiny/infer", data=self.body, name="tiny-plain")


class TinyOwnTasks(inferload.TritonHttpUser):
    """An inferload user with a task of its own, its address the run's host."""

    wait_time = constant(0.005)
    target = {"name": "tiny-own", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012
    calls: ClassVar[list[bool]] = []

    @task
    def first_request(self) -> None:
        self.calls.append(self.client.infer(request_index=0).ok)


def test_attach_counts_what_triton_counted_and_gives_the_scenarios_targets_their_entries(local_servers, tmp_path: Path) -> None:
    port = local_servers.ports.triton_http
    host = f"http://127.0.0.1:{port}"
    plain_target = {"name": "tiny-plain", "kind": "triton-http", "address": host, "model": "tiny", "inputs": INPUTS}
    scenario = {
        "name": "attached",
        "duration": "1m",  # not used by attach: the run lasts as long as the test lets it
        "targets": [{**plain_target, "slo": {"p50_ms": 0.001, "error_rate": 0}}],  # a p50 no server meets: exit 1
        "shape": {"kind": "steady", "users": 1},
    }
    TinyOwnTasks.calls = []
    environment = Environment(user_classes=[PlainTriton, TinyOwnTasks], host=host)
    runner = environment.create_local_runner()
    attached = inferload.attach(environment, write_scenario(tmp_path, scenario), results_dir=tmp_path / "results")
    before = triton_requests(port)
    runner.start(4, spawn_rate=100)
    deadline = time.monotonic() + DEADLINE_S
    while environment.stats.total.num_requests < 200 and time.monotonic() < deadline:
        gevent.sleep(0.1)
    runner.stop()  # stops the users (a call in flight is cut: Triton may count it, the run does not)
    counted = triton_requests(port) - before
    environment.events.quitting.fire(environment=environment, reverse=True)
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert summary["run_id"] == attached.run_id
    plain, own = summary["targets"]["tiny-plain"], summary["targets"]["tiny-own"]
    assert (plain["server"], plain["kind"], own["kind"]) == ("triton", "triton-http", "triton-http")  # both are targets
    for name, entry in (("tiny-plain", plain), ("tiny-own", own)):
        locust_entry = environment.stats.get(name, "POST" if name == "tiny-plain" else "HTTP")
        assert entry["requests"] == locust_entry.num_requests > 0 and entry["failures"] == 0
    assert all(TinyOwnTasks.calls) and len(TinyOwnTasks.calls) == own["requests"]
    recorded = plain["requests"] + own["requests"]
    assert 0 <= counted - recorded <= 4  # at most one call in flight per user when they were stopped
    assert plain["server_side"]["shared_with"] == ["tiny-own"]  # Triton's own figures, read for both targets together
    (p50_check,) = [c for c in summary["slo"]["checks"] if c["metric"] == "p50_ms"]
    assert p50_check["value"] == plain["latency_ms"]["p50"] > 0.001 and p50_check["passed"] is False
    assert environment.process_exit_code == 1


PLAIN_LOCUSTFILE = """
import json

from locust import FastHttpUser, constant, events, task

from inferload import attach

BODY = json.dumps({"inputs": [{"name": "INPUT__0", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]})


class TinyInfer(FastHttpUser):
    wait_time = constant(0.005)

    @task
    def infer(self):
        self.client.post("/v2/models/tiny/infer", data=BODY, name="tiny-infer")


@events.init.add_listener
def on_locust_init(environment, **_kwargs):
    attach(environment, results_dir="results")
"""

#: the test's own addition: the master's count of the requests in Locust's statistics, written at its end
MASTER_COUNT = """

@events.quitting.add_listener
def write_master_count(environment, **_kwargs):
    if type(environment.runner).__name__ == "MasterRunner":
        with open("master_count.txt", "w") as handle:
            handle.write(str(environment.stats.get("tiny-infer", "POST").num_requests))
"""


def test_attach_merges_the_worker_processes_figures_on_the_master(local_servers, tmp_path: Path) -> None:
    locustfile = tmp_path / "plain.py"
    locustfile.write_text(PLAIN_LOCUSTFILE + MASTER_COUNT)
    port = local_servers.ports.triton_http
    env = {**python_env(), "INFERLOAD_RUN_KEY": secrets.token_urlsafe(24)}
    command = [
        *(sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary", "--processes", "2"),
        *("-u", "4", "-r", "4", "-t", "5s", "--host", f"http://127.0.0.1:{port}"),
    ]
    before = triton_requests(port)
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    counted = triton_requests(port) - before
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    entry = summary["targets"]["tiny-infer"]
    assert summary["workers"] == 2 and entry["failures"] == 0
    # every request the master heard of from its workers, each counted once: what Locust's own statistics
    # hold (both come with the workers' reports; a last report Locust's quit does not wait for is in neither)
    assert entry["requests"] == int((tmp_path / "master_count.txt").read_text()) > 0
    assert counted >= entry["requests"]  # and all of them reached Triton
    assert entry["latency_ms"]["max"] >= entry["latency_ms"]["p99"] >= entry["latency_ms"]["p50"] > 0


@pytest.fixture(autouse=True)
def _no_report_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process runs skip report.html's plots (the doc's runs write it)."""
    monkeypatch.setattr("inferload.run.finish.write_report", lambda folder: Path(folder) / "report.html")


class FiringUser(User):
    """A plain Locust user of the test's own (a fake, named so): a request named ``/a`` every 10 ms, 7 ms each."""

    wait_time = constant(0.01)

    @task
    def call(self) -> None:
        self.environment.events.request.fire(
            request_type="GET", name="/a", response_time=7.0, response_length=1, exception=None, context={}
        )


def test_attach_streams_the_windows_to_influxdb(influxdb, tmp_path: Path) -> None:
    environment = Environment(user_classes=[FiringUser])
    runner = environment.create_local_runner()
    attached = inferload.attach(environment, influx_url=influxdb.url, results_dir=tmp_path / "results", run_id="attached-stream")
    runner.start(2, spawn_rate=100)
    gevent.sleep(2.5)
    runner.quit()
    environment.events.quitting.fire(environment=environment, reverse=True)
    assert attached.summary is not None and attached.summary.streaming is not None
    assert attached.summary.streaming.points_written > 0 and attached.summary.streaming.points_dropped == 0
    (series,) = influxdb.series(
        "SELECT sum(\"count\") FROM requests WHERE run_id = 'attached-stream' AND target = '/a' AND worker = 'all'"
    )
    streamed, recorded = series["values"][0][1], attached.summary.targets["/a"].requests
    assert recorded is not None and streamed == recorded > 0  # every request, in one window or another
