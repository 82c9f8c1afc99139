"""A remote Triton's trace records through the collector sidecar: the collector (``--scenario``)
tails a real Triton's trace file (asking Triton where it is) and writes `triton_traces` points; a
run with ``trace.source: influxdb`` streaming to the same InfluxDB under the same run id reads them
back at its end and joins them: the tail says where they came from.

The Triton is this module's own, not the session's: Triton 2.51 has crashed (SIGSEGV) a few times
here with tracing on (docs/observability.md), and a crash must not take the other tests' server."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferload.local.servers.triton_local import trace_arguments
from tests.support.example_triton import ExampleTriton, example_triton
from tests.support.influx_fixture import REPO, InfluxServer, python_env
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def traced_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleTriton]:
    """Triton serving the tests' example `tail_queue` model, started with a trace file (tracing off)."""
    work = tmp_path_factory.mktemp("triton-shipped-traces")
    with example_triton(work, {"tail_queue": "tail_queue"}, *trace_arguments(work / "trace.json")) as server:
        yield server


def test_a_run_joins_the_trace_records_the_collector_shipped_to_influxdb(
    traced_triton: ExampleTriton, influxdb: InfluxServer, tmp_path: Path
) -> None:
    run_id = f"trace-influx-{tmp_path.name}"
    target = {
        "name": "t",
        "kind": "triton-grpc",
        "address": traced_triton.grpc,
        "model": "tail_queue",
        "inputs": [{"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "zeros"}}],
        "trace": {"rate": 1, "source": "influxdb"},
    }
    scenario = write_scenario(
        tmp_path,
        {"name": "shipped", "duration": "3s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": 2}},
    )
    command = [sys.executable, "-m", "collectors", "--scenario", str(scenario), "--run-id", run_id, "--no-gpu"]
    command += ["--interval", "0.5s", "--influx-url", influxdb.url]
    log_path = tmp_path / "collector.log"
    with open(log_path, "w") as log_file:
        collector = subprocess.Popen(command, cwd=REPO, env=python_env(), stdout=log_file, stderr=subprocess.STDOUT)
    try:
        started = f"SELECT \"text\" FROM events WHERE run_id = '{run_id}' AND kind = 'collector_start'"
        wait_until(lambda: influxdb.series(started), timeout_s=20, what="the collector to start")
        run = run_locust(scenario, tmp_path, "--run-id", run_id, "--influx-url", influxdb.url, timeout_s=90)
        assert run.returncode == 0, run.output
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=20)
    log = log_path.read_text()
    assert "is down" not in log, log
    tail = run.summary["targets"]["t"]["tail"]
    assert tail["trace_source"] == "influxdb" and "trace_file" not in tail, tail
    assert tail["available"] is True, (tail, log)
    assert 0 < tail["joined"] <= tail["client_requests"], tail
    points = influxdb.series(f"SELECT count(trace_id) FROM triton_traces WHERE run_id = '{run_id}' AND model = 'tail_queue'")
    assert points and points[0]["values"][0][1] >= tail["joined"], points
