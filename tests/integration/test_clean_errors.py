"""Mistakes a user makes, answered with a one-line error and exit code 2 instead of a traceback: a
huge scenario name or run id, a target on the other protocol's port, a results folder that cannot
be written when the run needs it from the start, a file given as the servers' state dir.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import inferload
from tests.support.locust_runner import run_locust
from tests.support.ports import free_port
from tests.support.scenario_factory import tiny_target, write_scenario

#: a refused command ends within this many seconds (a Locust start included)
REFUSE_DEADLINE_S = 30.0


def scenario_file(folder: Path, targets: list[dict[str, Any]], name: str = "clean-errors", duration: str = "60s") -> Path:
    data = {"name": name, "duration": duration, "targets": targets, "shape": {"kind": "steady", "users": 1}}
    return write_scenario(folder, data)


def down_target() -> dict[str, Any]:
    return tiny_target("down", "triton-grpc", f"127.0.0.1:{free_port()}")


def assert_clean_exit_2(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def run_headless(scenario: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = inferload("run", str(scenario), "--headless", *extra, timeout_s=180)
    return done, time.monotonic() - started


# --- names ---------------------------------------------------------------------------------------


def test_a_100000_character_scenario_name_is_one_line_from_validate_and_run(tmp_path):
    scenario = scenario_file(tmp_path, [down_target()], name="n" * 100_000)

    for done in (inferload("validate", str(scenario)), run_headless(scenario, "--out", str(tmp_path / "results"))[0]):
        assert_clean_exit_2(done)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"{scenario}: name: expected a name of at most 100 characters; got 100,000"), line
        assert len(line) < 300


def test_a_scenario_name_of_the_longest_allowed_length_keeps_its_results_when_the_folder_fails(tmp_path):
    """The longest name makes the longest default run id: the temporary folder the results fall
    back to must still take it (twice lost before: the folder's name and the fallback's were too long)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the results folder should be")
    scenario = scenario_file(tmp_path, [down_target()], name="n" * 100, duration="2s")
    run = run_locust(scenario, tmp_path, "--results-dir", str(blocker / "results"), "--skip-start-checks")

    assert "Traceback" not in run.output
    fallback = Path(run.output.split("writing them to ")[1].split()[0])
    summary = json.loads((fallback / "summary.json").read_text())
    assert summary["run_id"].startswith("n" * 100 + "-") and summary["targets"]["down"]["requests"] > 0


@pytest.mark.parametrize("run_id", ["r" * 300, "a/b", ".."])
def test_a_run_id_that_names_no_folder_is_refused_before_any_load(tmp_path, run_id):
    scenario = scenario_file(tmp_path, [down_target()])
    done, took_s = run_headless(scenario, "--run-id", run_id, "--out", str(tmp_path / "results"))

    assert_clean_exit_2(done)
    assert done.stderr.startswith("inferload: --run-id: expected "), done.stderr
    assert took_s < REFUSE_DEADLINE_S


def test_locust_itself_refuses_a_run_id_that_names_no_folder(tmp_path):
    scenario = scenario_file(tmp_path, [down_target()])
    run = run_locust(scenario, tmp_path, "--run-id", "r" * 300, timeout_s=60)

    assert run.returncode == 2, run.output
    assert "--run-id: expected at most 150 characters; got 300" in run.stderr
    assert "Traceback" not in run.output


# --- the other protocol's port -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "port_name", "expected"),
    [
        ("triton-http", "triton_grpc", "did not answer as Triton HTTP (is it the gRPC port?)"),
        ("triton-grpc", "triton_http", "did not answer as Triton gRPC (is it the HTTP port?)"),
        ("torchserve-rest", "ts_grpc_inference", "did not answer as TorchServe's HTTP inference API (is it a gRPC port?)"),
        ("torchserve-rest", "ts_management", "did not answer as TorchServe's inference API"),
    ],
)
def test_a_target_on_another_port_of_the_server_exits_2_saying_so(local_servers, tmp_path, kind, port_name, expected):
    port = getattr(local_servers.ports, port_name)
    address = f"http://127.0.0.1:{port}" if kind == "torchserve-rest" else f"127.0.0.1:{port}"
    scenario = scenario_file(tmp_path, [tiny_target("wrong-port", kind, address)])
    done, took_s = run_headless(scenario, "--out", str(tmp_path / "results"))

    assert_clean_exit_2(done)
    assert f"target 'wrong-port': {address} {expected}" in done.stderr, done.stderr
    assert took_s < REFUSE_DEADLINE_S
    assert not (tmp_path / "results" / "summary.json").exists()


# --- results folders and state dirs --------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--requests-csv"], ["--workers", "1"]], ids=["requests-csv", "workers"])
def test_an_unwritable_out_that_the_run_needs_from_its_start_exits_2_before_any_load(tmp_path, flags):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the results folder should be")
    scenario = scenario_file(tmp_path, [down_target()])
    done, took_s = run_headless(scenario, "--out", str(blocker / "results"), *flags)

    assert_clean_exit_2(done)
    assert done.stderr.strip() == (
        f"inferload: --out: cannot write the results into {blocker / 'results'}: {blocker} is a file, not a folder"
    )
    assert took_s < REFUSE_DEADLINE_S


def test_locust_itself_refuses_an_unwritable_results_dir_with_requests_csv(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the results folder should be")
    scenario = scenario_file(tmp_path, [down_target()])
    run = run_locust(scenario, tmp_path, "--requests-csv", timeout_s=60, results_dir=blocker / "results")

    assert run.returncode == 2, run.output
    assert f"--results-dir: cannot write the results into {blocker / 'results'}: {blocker} is a file" in run.stderr
    assert "Traceback" not in run.output


@pytest.mark.parametrize("action", ["status", "down", "up"])
def test_a_file_as_the_servers_state_dir_exits_2(tmp_path, action):
    state = tmp_path / "state"
    state.write_text("not a folder")
    done = inferload("servers", action, "--state-dir", str(state), timeout_s=60)

    assert_clean_exit_2(done)
    assert done.stderr.strip() == f"inferload: --state-dir: expected a folder; got a file: {state}"
