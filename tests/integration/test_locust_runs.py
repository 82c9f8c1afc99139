"""Headless Locust runs of real scenarios against the real local servers (the runs that need no
server are in tests/unit/test_locust_runs_without_servers.py).

Each test runs the real `locust` command in a subprocess, the way a user or a CI job does, and
checks its exit code, its timing and the results it wrote.
"""

from __future__ import annotations

import pytest

from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import cnn_target, write_scenario

pytestmark = pytest.mark.usefixtures("local_servers")

#: a headless run must end by itself within this many seconds of its duration
EXIT_SLACK_S = 12.0


def three_protocols(ports):
    return [
        cnn_target("triton-grpc", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}", outputs=["OUTPUT__0"]),
        cnn_target("triton-http", "triton-http", f"127.0.0.1:{ports.triton_http}"),
        cnn_target(
            "torchserve",
            "torchserve-rest",
            f"http://127.0.0.1:{ports.ts_inference}",
            metrics_url=f"http://127.0.0.1:{ports.ts_metrics}/metrics",
        ),
    ]


def test_each_user_class_sends_real_inferences_and_the_run_ends_on_time(local_servers, tmp_path):
    scenario = write_scenario(
        tmp_path,
        {
            "name": "three-protocols",
            "duration": "8s",
            "warmup": "2s",
            "targets": three_protocols(local_servers.ports),
            "shape": {"kind": "stages", "stages": [{"duration": "3s", "users": 3}, {"duration": "5s", "users": 6}]},
        },
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 0, run.output
    assert run.elapsed_s < 8 + EXIT_SLACK_S
    summary = run.summary
    for name in ("triton-grpc", "triton-http", "torchserve"):
        target = summary["targets"][name]
        assert target["requests"] > 20 and target["failures"] == 0, (name, target)
        assert 0 < target["latency_ms"]["p50"] <= target["latency_ms"]["p99"] <= target["latency_ms"]["max"]
        assert target["server_side"] is not None and target["server_side"]["avg_batch_size"] >= 1, (name, target)
    # real response sizes: Triton returns 10 FP32 logits per item (40 bytes); TorchServe a JSON list
    sizes = {entry["name"]: entry["total_content_length"] / entry["num_requests"] for entry in run.stats_json}
    assert sizes["triton-grpc"] == 40 and sizes["triton-http"] == 40
    assert sizes["torchserve"] > 40
    # the stages shape drove the user count: 3 users, then 6
    users = {row["users"] for row in run.windows if row["users"]}
    assert {"3", "6"} <= users


def test_a_breached_slo_exits_1_with_a_table_naming_the_check(local_servers, tmp_path):
    target = cnn_target(
        "triton-grpc", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}", slo={"p99_ms": 0.001, "error_rate": 0.5}
    )
    scenario = write_scenario(
        tmp_path, {"name": "slo", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 1, run.output
    failed_rows = [line for line in run.output.splitlines() if line.rstrip().endswith("FAIL")]
    assert len(failed_rows) == 1 and "p99_ms" in failed_rows[0]
    checks = {c["metric"]: c for c in run.summary["slo"]["checks"]}
    assert checks["p99_ms"]["passed"] is False and checks["error_rate"]["passed"] is True
    assert run.summary["slo"]["passed"] is False


def test_too_short_a_timeout_is_a_timeout_failure(local_servers, tmp_path):
    target = cnn_target("impatient", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}", timeout=0.0001, batch_size=16)
    scenario = write_scenario(
        tmp_path, {"name": "timeouts", "duration": "2s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 1
    assert run.failures_csv and all("timeout" in row["Error"] for row in run.failures_csv), run.failures_csv


def test_an_unknown_torchserve_model_is_an_http_404_failure(local_servers, tmp_path):
    target = cnn_target(
        "no-such-model", "torchserve-rest", f"http://127.0.0.1:{local_servers.ports.ts_inference}", model="nosuch"
    )
    scenario = write_scenario(
        tmp_path, {"name": "http-404", "duration": "2s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    run = run_locust(scenario, tmp_path, "--skip-start-checks")  # the start checks would exit 2 before any request

    assert run.returncode == 1
    assert {row["Error"] for row in run.failures_csv} and all("HTTP 404" in row["Error"] for row in run.failures_csv)


def test_a_scenario_that_does_not_match_the_triton_model_stops_before_any_load(local_servers, tmp_path):
    target = cnn_target("wrong-shape", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    target["inputs"][0]["shape"] = [3, 64, 64]
    scenario = write_scenario(
        tmp_path, {"name": "mismatch", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 2
    assert "'wrong-shape'" in run.output and "[3, 64, 64]" in run.output and "[3, 32, 32]" in run.output
    assert run.elapsed_s < 15
    assert not (run.results_dir / "summary.json").exists()


def test_server_side_thresholds_gate_the_run_and_the_residual_is_reported(local_servers, tmp_path):
    target = cnn_target(
        "triton-grpc",
        "triton-grpc",
        f"127.0.0.1:{local_servers.ports.triton_grpc}",
        slo={"min_avg_batch_size": 1000, "max_queue_ms": 10000, "max_residual_ms": 10000},
    )
    scenario = write_scenario(
        tmp_path, {"name": "server-slo", "duration": "4s", "targets": [target], "shape": {"kind": "steady", "users": 4}}
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 1, run.output
    checks = {c["metric"]: c for c in run.summary["slo"]["checks"]}
    assert checks["min_avg_batch_size"]["passed"] is False and checks["min_avg_batch_size"]["value"] >= 1
    assert checks["max_queue_ms"]["passed"] and checks["max_residual_ms"]["passed"]
    failed = [line for line in run.output.splitlines() if line.rstrip().endswith("FAIL")]
    assert len(failed) == 1 and "min_avg_batch_size" in failed[0] and ">= 1000" in failed[0]
    # client mean minus the server's own mean request duration, for the run and per window
    figures = run.summary["targets"]["triton-grpc"]
    side = figures["server_side"]
    assert figures["residual_ms"] == pytest.approx(figures["latency_ms"]["mean"] - side["request_ms_avg"])
    assert 0 < figures["residual_ms"] < figures["latency_ms"]["mean"]
    rows = run.windows
    # (a window the server was read over but no client request ended in, a warm-up's, has no residual)
    assert all(not r["residual_ms"] for r in rows if not r["mean_ms"])
    with_server = [r for r in rows if r["server_request_ms"] and r["mean_ms"]]
    assert len(with_server) >= 2
    assert all(
        float(r["residual_ms"]) == pytest.approx(float(r["mean_ms"]) - float(r["server_request_ms"]), abs=0.002)
        for r in with_server
    )
