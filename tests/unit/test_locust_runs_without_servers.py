"""Headless Locust runs that need no server: nothing listens at the targets' address, or the
scenario is refused before any load. They run the real `locust` command in a subprocess, the way a
user or a CI job does, and check its exit code, its timing and the results it wrote.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from tests.support.locust_runner import run_locust
from tests.support.ports import free_port
from tests.support.scenario_factory import cnn_target, write_scenario

#: a headless run must end by itself within this many seconds of its duration
EXIT_SLACK_S = 12.0


def test_a_stopped_server_counts_failures_and_exits_1_cleanly(tmp_path):
    port = free_port()  # nothing listens there
    scenario = write_scenario(
        tmp_path,
        {
            "name": "stopped",
            "duration": "3s",
            "targets": [
                cnn_target("triton-down", "triton-grpc", f"127.0.0.1:{port}"),
                cnn_target("torchserve-down", "torchserve-rest", f"http://127.0.0.1:{port}"),
            ],
            "shape": {"kind": "steady", "users": 2},
        },
    )
    run = run_locust(scenario, tmp_path, "--skip-start-checks")  # down at start: the start checks would exit 2
    exited_at = time.time()

    assert run.returncode == 1, run.output
    # timed from the run's start (summary.json), not the process's: on a loaded machine (load 14-16 on
    # 2 cores) the interpreter's imports alone took 10+ s before the run began; the 3 s run must end by itself
    started_at = datetime.fromisoformat(run.summary["started_at"]).timestamp()
    assert exited_at - started_at < 3 + EXIT_SLACK_S, (run.elapsed_s, exited_at - started_at)
    for target in run.summary["targets"].values():
        assert target["requests"] > 0 and target["failures"] == target["requests"]
        assert target["error_rate"] == 1.0
    errors = {row["Name"]: row["Error"] for row in run.failures_csv}
    assert "refused" in errors["triton-down"] and "refused" in errors["torchserve-down"]
    assert "Traceback" not in run.output


def test_an_invalid_scenario_exits_2_with_one_line_per_problem(tmp_path):
    scenario = write_scenario(
        tmp_path, {"name": "bad", "duration": "soon", "targets": [], "shape": {"kind": "steady", "users": 1}}
    )
    run = run_locust(scenario, tmp_path, timeout_s=60)

    assert run.returncode == 2
    lines = [line for line in run.output.splitlines() if str(scenario) in line]
    assert any(": duration:" in line for line in lines) and any(": targets:" in line for line in lines)
    assert "Traceback" not in run.output


def test_an_unwritable_results_folder_loses_nothing(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the results folder should be")
    scenario = write_scenario(
        tmp_path,
        {
            "name": "unwritable",
            "duration": "2s",
            "targets": [cnn_target("down", "triton-grpc", f"127.0.0.1:{free_port()}")],
            "shape": {"kind": "steady", "users": 1},
        },
    )
    run = run_locust(scenario, tmp_path, "--results-dir", str(blocker / "results"), "--skip-start-checks")

    assert "writing them to" in run.output
    fallback = run.output.split("writing them to ")[1].split()[0]
    summary = json.loads((Path(fallback) / "summary.json").read_text())
    assert summary["targets"]["down"]["requests"] > 0


def test_a_triton_header_from_an_unset_environment_variable_stops_the_run_before_any_load(tmp_path):
    port = free_port()  # nothing listens there either: the header problem is found first
    target = cnn_target("triton-auth", "triton-grpc", f"127.0.0.1:{port}")
    target["headers_from_env"] = {"X-Api-Key": "INFERLOAD_TEST_UNSET_VARIABLE"}
    scenario = write_scenario(
        tmp_path, {"name": "unset-header", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    run = run_locust(scenario, tmp_path, timeout_s=60)

    assert run.returncode == 2, run.output
    assert "environment variable INFERLOAD_TEST_UNSET_VARIABLE (for header X-Api-Key) is not set" in run.output
    assert "Traceback" not in run.output
