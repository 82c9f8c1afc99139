"""Triton's python_backend BLS example ``bls_sync`` (tests/examples/triton/bls_sync, see its SOURCE.md)
next to ``add_sub``, the model it calls, on a real Triton.

``MODEL_NAME`` (BYTES, shape [1]) comes from a 1-D string .npy data set, the form numpy gives
``np.array([b'add_sub', ...])``. Naming ``add_sub`` the answers are INPUT0 ± INPUT1; naming
``pytorch`` (not served) the inner call fails and so does the request, while Triton still counts
the execution: every second request failing is how a BLS model with a broken step looks, and the
batch figures must stay the truth (batches of one) rather than inference_count / execution_count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.cli import inferload
from tests.support.example_triton import ExampleTriton
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario


def _bls_target(name: str, kind: str, address: str, models_file: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "address": address,
        "model": "bls_sync",
        "inputs": [
            {"name": "MODEL_NAME", "shape": [1], "dtype": "BYTES", "data": {"dataset": models_file}},
            {"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "constant", "value": 1.0}},
            {"name": "INPUT1", "shape": [4], "dtype": "FP32", "data": {"generator": "constant", "value": 2.0}},
        ],
        "outputs": ["OUTPUT0", "OUTPUT1"],
        **extra,
    }


def test_a_1d_string_npy_feeds_a_bytes_input_of_shape_1(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    np.save(tmp_path / "models.npy", np.array([b"add_sub", b"add_sub", b"add_sub"]))  # dtype S7, shape (3,)
    answers = {"OUTPUT0": [[3.0] * 4] * 3, "OUTPUT1": [[-1.0] * 4] * 3}  # one row per sample
    (tmp_path / "expected.json").write_text(json.dumps(answers))
    targets = [
        _bls_target("grpc", "triton-grpc", example_models_triton.grpc, "models.npy", expected="expected.json"),
        _bls_target("http", "triton-http", example_models_triton.http, "models.npy", expected="expected.json"),
    ]
    path = write_scenario(
        tmp_path, {"name": "bls", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2}}
    )

    checked = inferload("validate", str(path))  # it crashed: 'bytes' object has no attribute 'shape'
    assert checked.returncode == 0, checked.stderr
    run = run_locust(path, tmp_path)

    assert run.returncode == 0, run.output
    for name in ("grpc", "http"):
        figures = run.summary["targets"][name]
        assert figures["requests"] > 0 and figures["failures"] == 0, (name, figures)


def test_an_object_npy_is_refused_with_how_to_save_it(tmp_path: Path) -> None:
    np.save(tmp_path / "models.npy", np.array([b"add_sub", b"pytorch"], dtype=object), allow_pickle=True)
    target = _bls_target("http", "triton-http", "127.0.0.1:8000", "models.npy")
    path = write_scenario(
        tmp_path, {"name": "bls", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )

    checked = inferload("validate", str(path))

    assert checked.returncode == 2, checked.stderr
    assert "targets[0].inputs[0].data.dataset: models.npy holds Python objects (dtype object" in checked.stderr
    assert "np.array(values, dtype=np.bytes_)" in checked.stderr


def test_a_bls_model_whose_calls_half_fail_reports_its_batches_of_one(
    example_models_triton: ExampleTriton, tmp_path: Path
) -> None:
    """Every second request names a model Triton does not serve: Triton counts 2 executions for each
    inference (it counts successful inferences only), but every batch it ran had one request."""
    np.save(tmp_path / "models.npy", np.array([b"add_sub", b"pytorch"]))
    slo = {"min_avg_batch_size": 0.9, "error_rate": 0.6}
    target = _bls_target("grpc", "triton-grpc", example_models_triton.grpc, "models.npy", response_check="status", slo=slo)
    path = write_scenario(
        tmp_path, {"name": "bls", "duration": "4s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    )

    run = run_locust(path, tmp_path)

    figures = run.summary["targets"]["grpc"]
    assert figures["requests"] > 20 and abs(2 * figures["failures"] - figures["requests"]) <= 4, figures  # every second one
    side = figures["server_side"]
    assert set(side["batch_size_histogram"]) == {"1"}, side
    assert side["avg_batch_size"] == 1.0, side  # was 0.5: inference_count / execution_count
    checks = {check["metric"]: check for check in run.summary["slo"]["checks"]}
    assert checks["min_avg_batch_size"]["passed"] is True, checks
    assert run.returncode == 0, run.output  # failures within the error-rate SLO, the batch SLO met
