"""The start checks, run as a user runs them against the real local Triton and TorchServe: a target
whose server cannot be reached, or that does not serve the model (or version) asked for, stops the
run with exit code 2 before any load, in one line per target naming the target, the address, what
was asked and the models the server serves; `--skip-start-checks` runs anyway.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from inferload.local.servers.procs import processes_mentioning
from tests.support.cli import inferload
from tests.support.ports import free_port
from tests.support.scenario_factory import tiny_target, write_scenario

#: a run stopped by the start checks ends within this many seconds (Locust's start included)
CHECK_DEADLINE_S = 30.0
HEADER = "inferload: the start checks failed; no load was sent"


def target(name: str, kind: str, address: str, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    """A target sending the tiny model's input to `model`."""
    return {**tiny_target(name, kind, address, **extra), "model": model}


def run_scenario(
    tmp_path: Path, targets: list[dict[str, Any]], *extra: str, duration: str = "60s"
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`inferload run` headless on a scenario of `targets`; the finished process and how long it took."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = {"name": "start-checks", "duration": duration, "targets": targets, "shape": {"kind": "steady", "users": len(targets)}}
    scenario = write_scenario(tmp_path, data)
    started = time.monotonic()
    done = inferload("run", str(scenario), "--headless", "--out", str(tmp_path / "results"), *extra, timeout_s=180)
    return done, time.monotonic() - started


def problem_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines after the start checks' header: one per failing target."""
    assert HEADER in done.stderr, done.stdout + done.stderr
    after = done.stderr.split(HEADER, 1)[1].splitlines()[1:]
    return [line for line in after if line.startswith("target '")]


def assert_stopped_before_any_load(done: subprocess.CompletedProcess[str], took_s: float, tmp_path: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert took_s < CHECK_DEADLINE_S
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "results" / "summary.json").exists()


@pytest.mark.parametrize("kind", ["triton-grpc", "triton-http"])
def test_a_model_triton_does_not_serve_exits_2_naming_the_models_it_serves(local_servers, tmp_path, kind):
    port = local_servers.ports.triton_grpc if kind == "triton-grpc" else local_servers.ports.triton_http
    done, took_s = run_scenario(tmp_path, [target("misspelt", kind, f"127.0.0.1:{port}", model="tinny")])

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert line.startswith(f"target 'misspelt': Triton at 127.0.0.1:{port} ({kind}) does not serve model 'tinny'"), line
    assert "it serves: cnn 1, identity 1, tiny 1 (repository index)" in line


def test_a_version_triton_does_not_serve_exits_2(local_servers, tmp_path):
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    done, took_s = run_scenario(tmp_path, [target("v7", "triton-grpc", address, version=7)])

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert f"Triton at {address} (triton-grpc) does not serve model 'tiny' version 7" in line
    assert "it serves: cnn 1, identity 1, tiny 1" in line


def test_a_model_torchserve_does_not_serve_without_management_url_names_the_probe(local_servers, tmp_path):
    address = f"http://127.0.0.1:{local_servers.ports.ts_inference}"
    done, took_s = run_scenario(tmp_path, [target("ts", "torchserve-rest", address, model="tinny")])

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert line.startswith(f"target 'ts': TorchServe at {address} does not serve model 'tinny'"), line
    assert "OPTIONS /predictions/tinny answered HTTP 404 ModelNotFoundException" in line
    assert "give the target a management_url" in line


def test_a_model_torchserve_does_not_serve_with_management_url_lists_the_served_models(local_servers, tmp_path):
    ports = local_servers.ports
    address, management = f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_management}"
    done, took_s = run_scenario(tmp_path, [target("ts", "torchserve-rest", address, model="tinny", management_url=management)])

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert line.startswith(f"target 'ts': TorchServe at {address} does not serve model 'tinny'"), line
    assert line.endswith(f"it serves: cnn, identity, tiny (GET {management}/models)"), line


def test_a_version_torchserve_does_not_serve_lists_the_versions_it_serves(local_servers, tmp_path):
    ports = local_servers.ports
    address, management = f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_management}"
    done, took_s = run_scenario(tmp_path, [target("ts", "torchserve-rest", address, version="9", management_url=management)])

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert "does not serve model 'tiny' version '9'" in line and "ModelVersionNotFoundException" in line
    assert line.endswith(f"it serves model 'tiny' in version(s): 1.0 (GET {management}/models/tiny/all)"), line


def test_every_failing_target_gets_one_line_and_a_good_one_none(local_servers, tmp_path):
    ports = local_servers.ports
    down = free_port()
    targets = [
        target("good", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}"),
        target("bad-model", "triton-http", f"127.0.0.1:{ports.triton_http}", model="nosuch"),
        target("bad-shape", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}"),
        target("ts-good", "torchserve-rest", f"http://127.0.0.1:{ports.ts_inference}"),
        target("ts-down", "torchserve-rest", f"http://127.0.0.1:{down}"),
        target("triton-down", "triton-grpc", f"127.0.0.1:{down}"),
    ]
    targets[2]["inputs"][0]["shape"] = [17]
    done, took_s = run_scenario(tmp_path, targets)

    assert_stopped_before_any_load(done, took_s, tmp_path)
    lines = problem_lines(done)
    assert [line.split("'")[1] for line in lines] == ["bad-model", "bad-shape", "ts-down", "triton-down"], lines
    assert "shape [17] does not match the model's [16]" in lines[1]
    assert lines[2] == f"target 'ts-down': cannot reach TorchServe at http://127.0.0.1:{down}: connection refused"
    assert lines[3].startswith(f"target 'triton-down': cannot reach Triton at 127.0.0.1:{down} (triton-grpc)")


def test_a_server_down_at_start_exits_2_unless_the_checks_are_skipped(tmp_path):
    port = free_port()  # nothing listens there
    targets = [target("down", "torchserve-rest", f"http://127.0.0.1:{port}")]
    done, took_s = run_scenario(tmp_path / "checked", targets, duration="2s")

    assert_stopped_before_any_load(done, took_s, tmp_path / "checked")
    assert problem_lines(done) == [f"target 'down': cannot reach TorchServe at http://127.0.0.1:{port}: connection refused"]
    assert "--skip-start-checks" in done.stderr  # the message says how to run anyway

    skipped, _ = run_scenario(tmp_path / "skipped", targets, "--skip-start-checks", duration="2s")
    assert skipped.returncode == 1, skipped.stdout + skipped.stderr  # ran, and every request failed
    assert HEADER not in skipped.stderr
    assert (tmp_path / "skipped" / "results" / "summary.json").exists()


def test_a_served_scenario_passes_the_checks_with_a_management_url(local_servers, tmp_path):
    ports = local_servers.ports
    targets = [
        target("triton", "triton-http", f"127.0.0.1:{ports.triton_http}"),
        target(
            "ts",
            "torchserve-rest",
            f"http://127.0.0.1:{ports.ts_inference}",
            version="1.0",
            management_url=f"http://127.0.0.1:{ports.ts_management}",
        ),
    ]
    done, _ = run_scenario(tmp_path, targets, duration="2s")

    assert done.returncode == 0, done.stdout + done.stderr
    assert HEADER not in done.stderr and "could not check" not in done.stderr


@pytest.mark.usefixtures("fresh_locust_processes")  # its worker, a process of its own, must go with the master
def test_a_distributed_run_stops_at_the_masters_check(local_servers, tmp_path):
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    done, took_s = run_scenario(tmp_path, [target("misspelt", "triton-grpc", address, model="tinny")], "--workers", "1")

    assert_stopped_before_any_load(done, took_s, tmp_path)
    (line,) = problem_lines(done)
    assert "does not serve model 'tinny'" in line and "it serves: cnn 1, identity 1, tiny 1" in line
    assert processes_mentioning(str(tmp_path)) == []  # the worker went with its master
