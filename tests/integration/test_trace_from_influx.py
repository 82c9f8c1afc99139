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
from pathlib import Path

from inferload.local.servers.triton_local import trace_arguments
from tests.support.example_triton import TRACED_INPUT_LOST_MAX, ExampleTriton, on_triton_surviving_its_crash, traced_input_lost
from tests.support.influx_fixture import REPO, InfluxServer, python_env
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario
from tests.support.waiting import wait_until


def test_a_run_joins_the_trace_records_the_collector_shipped_to_influxdb(influxdb: InfluxServer, tmp_path: Path) -> None:
    """On a Triton of its own with a trace file (tracing off until the run turns it on); on a new
    one when Triton crashed (a server bug under full tracing, docs/observability.md), up to three."""

    def body(server: ExampleTriton, folder: Path) -> None:
        run_id = f"trace-influx-{folder.parent.name}-{folder.name}"
        target = {
            "name": "t",
            "kind": "triton-grpc",
            "address": server.grpc,
            "model": "tail_queue",
            "inputs": [{"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "zeros"}}],
            "trace": {"rate": 1, "source": "influxdb"},
            "slo": {"error_rate": TRACED_INPUT_LOST_MAX},  # Triton's race tracing every request (TRACED_INPUT_LOST)
        }
        scenario = write_scenario(
            folder,
            {"name": "shipped", "duration": "3s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": 2}},
        )
        command = [sys.executable, "-m", "collectors", "--scenario", str(scenario), "--run-id", run_id, "--no-gpu"]
        command += ["--interval", "0.5s", "--influx-url", influxdb.url]
        log_path = folder / "collector.log"
        with open(log_path, "w") as log_file:
            collector = subprocess.Popen(command, cwd=REPO, env=python_env(), stdout=log_file, stderr=subprocess.STDOUT)
        try:
            started = f"SELECT \"text\" FROM events WHERE run_id = '{run_id}' AND kind = 'collector_start'"
            wait_until(lambda: influxdb.series(started), timeout_s=20, what="the collector to start")
            run = run_locust(scenario, folder, "--run-id", run_id, "--influx-url", influxdb.url, timeout_s=90)
            assert run.returncode == 0, run.output
        finally:
            collector.send_signal(signal.SIGTERM)
            collector.wait(timeout=20)
        log = log_path.read_text()
        assert all(traced_input_lost(row["Error"]) for row in run.failures_csv), run.failures_csv
        assert "is down" not in log, log
        tail = run.summary["targets"]["t"]["tail"]
        assert tail["trace_source"] == "influxdb" and "trace_file" not in tail, tail
        assert tail["available"] is True, (tail, log)
        assert 0 < tail["joined"] <= tail["client_requests"], tail
        points = influxdb.series(f"SELECT count(trace_id) FROM triton_traces WHERE run_id = '{run_id}' AND model = 'tail_queue'")
        assert points and points[0]["values"][0][1] >= tail["joined"], points

    on_triton_surviving_its_crash(
        tmp_path, {"tail_queue": "tail_queue"}, lambda folder: trace_arguments(folder / "trace.json"), body
    )
