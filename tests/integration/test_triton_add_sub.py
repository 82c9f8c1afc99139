"""Triton's own python_backend example ``add_sub`` (tests/examples/triton/add_sub, see its SOURCE.md),
as its authors published it, driven over gRPC and HTTP against a real Triton.

The model takes two FP32 ``[4]`` tensors, does not batch (no ``max_batch_size``) and answers their
sum and difference. One headless run, 2 users per target, inputs from .npy files: every answer is
checked against ``INPUT0 + INPUT1`` and ``INPUT0 - INPUT1`` (``response_check: expected``), no
request fails, and summary.json agrees with Locust's own counts and names the model and protocol.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.example_triton import ExampleTriton
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario

USERS_PER_TARGET = 2


def _target(name: str, kind: str, address: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "address": address,
        "model": "add_sub",
        # max_batch_size 0: the shape is the model's full shape, sent without a batch dimension
        "inputs": [
            {"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "npy", "path": "input0.npy"}},
            {"name": "INPUT1", "shape": [4], "dtype": "FP32", "data": {"generator": "npy", "path": "input1.npy"}},
        ],
        "outputs": ["OUTPUT0", "OUTPUT1"],
        "response_check": "expected",
        "expected": {"path": "expected.json", "atol": 1e-6},
    }


def test_add_sub_runs_over_grpc_and_http_with_correct_answers(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    input0, input1 = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    np.save(tmp_path / "input0.npy", input0)
    np.save(tmp_path / "input1.npy", input1)
    expected = {"OUTPUT0": (input0 + input1).tolist(), "OUTPUT1": (input0 - input1).tolist()}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    targets = [
        _target("grpc", "triton-grpc", example_models_triton.grpc),
        _target("http", "triton-http", example_models_triton.http),
    ]
    data = {"name": "add-sub", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2 * USERS_PER_TARGET}}

    run = run_locust(write_scenario(tmp_path, data), tmp_path)

    assert run.returncode == 0, run.output
    rows = {row["name"]: row for row in run.stats_json if row["name"] in ("grpc", "http")}
    summary = run.summary["targets"]
    for name, protocol in (("grpc", "grpc"), ("http", "http")):
        figures = summary[name]
        assert (figures["server"], figures["protocol"], figures["model"]) == ("triton", protocol, "add_sub")
        assert figures["requests"] == rows[name]["num_requests"] > 0, run.output
        assert figures["failures"] == rows[name]["num_failures"] == 0, run.output
        assert figures["error_rate"] == 0.0 and figures["throughput_rps"] > 0
        latency = figures["latency_ms"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    # Triton's own counters for the model: every execution a batch of one (add_sub does not batch)
    server_side = summary["grpc"]["server_side"]
    assert server_side["avg_batch_size"] == pytest.approx(1.0)
    assert set(server_side["batch_size_histogram"]) == {"1"}


def test_kserve_v2_kinds_send_an_unbatched_model_its_own_shape(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    """The Open Inference Protocol kinds on Triton (docs/comparing-servers.md), on a model whose metadata
    has no batch dimension (add_sub: input [4]): each request carries [4], not [1, 4], every answer is
    checked against INPUT0 ± INPUT1, and nothing fails (before: every call failed with Triton's
    "unexpected shape for input 'INPUT1' ... Expected [4], got [1,4]")."""
    rng = np.random.default_rng(11)
    input0, input1 = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    np.save(tmp_path / "input0.npy", input0)
    np.save(tmp_path / "input1.npy", input1)
    (tmp_path / "expected.json").write_text(
        json.dumps({"OUTPUT0": (input0 + input1).tolist(), "OUTPUT1": (input0 - input1).tolist()})
    )
    targets = [
        _target("v2-grpc", "kserve-v2-grpc", example_models_triton.grpc),
        _target("v2-http", "kserve-v2-http", f"http://{example_models_triton.http}"),
    ]
    data = {"name": "add-sub-v2", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2}}

    run = run_locust(write_scenario(tmp_path, data), tmp_path)

    assert run.returncode == 0, run.output
    assert run.failures_csv == [], run.failures_csv
    for name in ("v2-grpc", "v2-http"):
        figures = run.summary["targets"][name]
        assert figures["requests"] > 0 and figures["failures"] == 0, (name, figures)


def test_kserve_v2_batch_size_on_an_unbatched_model_is_a_start_error(
    example_models_triton: ExampleTriton, tmp_path: Path
) -> None:
    target = {**_target("v2-http", "kserve-v2-http", f"http://{example_models_triton.http}"), "batch_size": 2}
    target.pop("expected")
    target["response_check"] = "shape"
    for spec in target["inputs"]:
        spec["data"] = "zeros"
    data = {"name": "add-sub-v2-batch", "duration": "2s", "targets": [target], "shape": {"kind": "steady", "users": 1}}

    run = run_locust(write_scenario(tmp_path, data), tmp_path)

    assert run.returncode == 2, run.output
    assert "batch_size 2" in run.output and "no batch dimension" in run.output, run.output


def test_an_unversioned_and_a_version_1_target_on_one_model_share_its_figures(
    example_models_triton: ExampleTriton, tmp_path: Path
) -> None:
    """Triton's unversioned statistics sum every version, so the gRPC target (no version) reads the
    HTTP target's (version 1) requests too: the figures are the model's, marked shared (before: each
    target reported them as its own, no shared_with)."""
    grpc = {**_target("grpc", "triton-grpc", example_models_triton.grpc), "response_check": "shape"}
    http = {**_target("http", "triton-http", example_models_triton.http), "response_check": "shape", "version": "1"}
    for target in (grpc, http):
        target.pop("expected")
        for spec in target["inputs"]:
            spec["data"] = "zeros"
    data = {"name": "add-sub-shared", "duration": "3s", "targets": [grpc, http], "shape": {"kind": "steady", "users": 2}}

    run = run_locust(write_scenario(tmp_path, data), tmp_path)

    assert run.returncode == 0, run.output
    targets = run.summary["targets"]
    sides = {name: targets[name]["server_side"] for name in ("grpc", "http")}
    assert sides["grpc"]["shared_with"] == ["http"] and sides["http"]["shared_with"] == ["grpc"], sides
    assert sides["grpc"]["scope"] == sides["http"]["scope"] == "model"
    executions = sum(sides["grpc"]["batch_size_histogram"].values())  # add_sub runs each request alone
    both = targets["grpc"]["requests"] + targets["http"]["requests"]
    # the two targets' requests (one target's would be about half), give or take those in flight at either
    # reading: on the engine (thousands a second) CI saw 8 of 7458 answered but not yet counted by Triton
    assert abs(executions - both) <= max(4, both // 100), (executions, both)
    assert (
        "grpc: server-side figures cover all targets of model 'add_sub' on its server together (shared with http)" in run.output
    )
