"""``response_check: expected`` against the real servers' ``identity`` model, in one run: the right
expected file passes every request over Triton gRPC, Triton HTTP and TorchServe; a file with one
value changed fails every request with one message per target saying what came instead. The engine
sends and times every call; Python compares each answer it hands back (`make fallback` runs the
module on the Python transport's own clients too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.conftest import RunningServers
from tests.support.locust_runner import LocustRun, run_locust, unsent_before_the_stop
from tests.support.scenario_factory import tiny_target, write_scenario

BATCH = 2
ITEM = (np.arange(16, dtype=np.float32) * 0.25).astype(np.float32)  # exact in float32 and in JSON
RIGHT = np.tile(ITEM, (BATCH, 1))
WRONG = RIGHT.copy()
WRONG[1, 3] += 1.0  # 0.75 is answered; 1.75 is expected


def _targets(folder: Path, servers: RunningServers, suffix: str, answer: np.ndarray) -> list[dict[str, Any]]:
    np.savez(folder / f"expected{suffix}.npz", OUTPUT__0=answer)
    (folder / f"expected{suffix}.json").write_text(json.dumps(answer.tolist()))
    ports = servers.ports
    targets = [
        tiny_target(f"grpc{suffix}", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}", expected=f"expected{suffix}.npz"),
        tiny_target(
            f"http{suffix}",
            "triton-http",
            f"127.0.0.1:{ports.triton_http}",
            expected={"path": f"expected{suffix}.npz", "atol": 1.0e-6},
        ),
        tiny_target(
            f"ts{suffix}",
            "torchserve-rest",
            f"http://127.0.0.1:{ports.ts_inference}",
            response_check="expected",
            expected=f"expected{suffix}.json",
        ),
    ]
    for target in targets:
        target.update(model="identity", batch_size=BATCH)
        target["inputs"][0]["data"] = {"generator": "npy", "path": "item.npy"}
    return targets


@pytest.fixture(scope="module")
def expected_run(local_servers: RunningServers, tmp_path_factory: pytest.TempPathFactory) -> LocustRun:
    folder = tmp_path_factory.mktemp("expected")
    np.save(folder / "item.npy", ITEM)
    targets = _targets(folder, local_servers, "", RIGHT) + _targets(folder, local_servers, "-wrong", WRONG)
    scenario = {"name": "expected", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 6}}
    return run_locust(write_scenario(folder, scenario), folder)


def test_the_right_expected_values_pass_every_request(expected_run: LocustRun) -> None:
    for name in ("grpc", "http", "ts"):
        target = expected_run.summary["targets"][name]
        assert target["requests"] > 0 and target["failures"] == 0, (name, target, expected_run.failures_csv)


def test_the_engine_sends_and_times_them_and_python_compares_each_answer(expected_run: LocustRun) -> None:
    for name in ("grpc", "http", "ts", "grpc-wrong", "http-wrong", "ts-wrong"):
        said = f"target {name!r}: sent by the engine, its answers compared with the expected ones in Python"
        assert said in expected_run.output, name
    assert "sent through the Python transport" not in expected_run.output


def test_a_wrong_expected_value_fails_every_request_with_one_message_saying_what_came(expected_run: LocustRun) -> None:
    assert expected_run.returncode == 1, expected_run.output
    for name in ("grpc-wrong", "http-wrong", "ts-wrong"):
        target = expected_run.summary["targets"][name]
        assert target["requests"] > 0 and target["failures"] == target["requests"], (name, target)
    errors = {row["Name"]: row["Error"] for row in expected_run.failures_csv}
    assert len(expected_run.failures_csv) == 3, expected_run.failures_csv  # one grouped message per target
    for name in ("grpc-wrong", "http-wrong"):
        assert (
            "unexpected output 'OUTPUT__0': got float32 [2, 16]; at [1, 3] got 0.75, expected 1.75 (1 of 32 differ)"
            in errors[name]
        )
    assert "unexpected answer: at $[1][3] got 0.75, expected 1.75" in errors["ts-wrong"], errors


def test_an_open_loop_of_expected_answers_sends_every_arrival_and_checks_each(
    local_servers: RunningServers, tmp_path: Path
) -> None:
    """Open loop: Python paces the arrivals (the engine hands each answer back to be compared), every
    arrival is sent and answered right, its send lag measured; the wrong file's target fails each.
    "Every arrival" but those due as the run stops: on a busy machine one due in its last moments may
    still wait for a sender then, and is counted unsent at the stop."""
    np.save(tmp_path / "item.npy", ITEM)
    targets = [t for t in _targets(tmp_path, local_servers, "", RIGHT) if t["name"] == "grpc"]
    targets += [t for t in _targets(tmp_path, local_servers, "-wrong", WRONG) if t["name"] == "http-wrong"]
    shape = {"kind": "constant-rate", "rate": 80, "max_in_flight": 8}  # split by weight: 40/s each
    scenario = {"name": "expected-open", "duration": "3s", "targets": targets, "shape": shape}
    run = run_locust(write_scenario(tmp_path, scenario), tmp_path)

    assert run.returncode == 1, run.output  # the wrong file's failures
    right, wrong = run.summary["targets"]["grpc"], run.summary["targets"]["http-wrong"]
    for name, figures in (("grpc", right), ("http-wrong", wrong)):
        open_loop = figures["open_loop"]
        assert open_loop["arrivals"] >= 100, open_loop  # 40/s each for 3 s: about 120
        # each arrival answered or counted unsent, none lost (up to the 8 in flight at the stop)
        assert figures["requests"] + open_loop["unsent"] == pytest.approx(open_loop["arrivals"], abs=8), figures
        # and none unsent for want of a sender while the run went on: only at the stop
        assert unsent_before_the_stop(run, name) == [], open_loop
        assert open_loop["send_lag_ms"]["p99"] is not None
    assert right["failures"] == 0 and wrong["failures"] == wrong["requests"], run.failures_csv
    assert "target 'grpc': sent by the engine, its answers compared with the expected ones in Python" in run.output
