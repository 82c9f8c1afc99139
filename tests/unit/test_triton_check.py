"""The scenario's tensors against what Triton says the model takes.

The metadata and config dicts below have the shape of Triton's own answers to
`GET v2/models/<model>` and `GET v2/models/<model>/config` (HTTP), and of the gRPC client's
`as_json=True` forms (int64 values as strings, the config wrapped in {"config": ...}).
"""

from __future__ import annotations

from typing import Any

import pytest

from inferload.errors import ServerError
from inferload.scenario.targets import Target
from inferload.startchecks.triton import (
    check_target_against_triton,
    fetch_triton_model_info,
    triton_model_batches,
)


def cnn_metadata() -> dict[str, Any]:
    return {
        "name": "cnn",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 3, 32, 32]}],
        "outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 10]}],
    }


def cnn_config(max_batch_size: int = 32) -> dict[str, Any]:
    return {
        "name": "cnn",
        "platform": "",
        "backend": "python",
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": max_batch_size,
        "input": [
            {
                "name": "INPUT__0",
                "data_type": "TYPE_FP32",
                "format": "FORMAT_NONE",
                "dims": [3, 32, 32],
                "is_shape_tensor": False,
                "allow_ragged_batch": False,
                "optional": False,
            }
        ],
        "output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [10], "label_filename": "", "is_shape_tensor": False}],
        "dynamic_batching": {"preferred_batch_size": [], "max_queue_delay_microseconds": 1000},
        "instance_group": [{"name": "cnn_0", "kind": "KIND_CPU", "count": 1, "gpus": []}],
    }


def target(**changes: Any) -> Target:
    fields: dict[str, Any] = {
        "name": "triton-cnn",
        "kind": "triton-grpc",
        "address": "127.0.0.1:8001",
        "model": "cnn",
        "inputs": [{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32"}],
        "outputs": ["OUTPUT__0"],
    }
    fields.update(changes)
    return Target.model_validate(fields)


def test_a_matching_target_has_no_problems() -> None:
    assert check_target_against_triton(target(batch_size=32), cnn_metadata(), cnn_config()) == []


def test_the_grpc_json_forms_are_understood() -> None:
    metadata = cnn_metadata()
    metadata["inputs"][0]["shape"] = ["-1", "3", "32", "32"]
    config = cnn_config()
    config["input"][0]["dims"] = ["3", "32", "32"]
    assert check_target_against_triton(target(), metadata, {"config": config}) == []


def test_a_wrong_shape_names_the_target_the_tensor_and_both_shapes() -> None:
    wrong = target(inputs=[{"name": "INPUT__0", "shape": [3, 64, 64], "dtype": "FP32"}])
    assert check_target_against_triton(wrong, cnn_metadata(), cnn_config()) == [
        "target 'triton-cnn': input 'INPUT__0' shape [3, 64, 64] does not match the model's [3, 32, 32]"
    ]


def test_a_wrong_dtype_is_reported() -> None:
    wrong = target(inputs=[{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP16"}])
    assert check_target_against_triton(wrong, cnn_metadata(), cnn_config()) == [
        "target 'triton-cnn': input 'INPUT__0' dtype FP16 does not match the model's FP32"
    ]


def test_variable_dims_accept_any_size() -> None:
    config = cnn_config()
    config["input"][0]["dims"] = [3, -1, -1]
    wide = target(inputs=[{"name": "INPUT__0", "shape": [3, 224, 300], "dtype": "FP32"}])
    assert check_target_against_triton(wide, cnn_metadata(), config) == []


def test_batch_size_above_max_batch_size() -> None:
    assert check_target_against_triton(target(batch_size=64), cnn_metadata(), cnn_config(32)) == [
        "target 'triton-cnn': batch_size 64 is more than the max_batch_size 32 of the model 'cnn'"
    ]


def test_a_model_that_does_not_batch_takes_its_full_shape_and_batch_size_1() -> None:
    metadata = cnn_metadata()
    metadata["inputs"][0]["shape"] = [1, 3, 32, 32]
    config = cnn_config(0)
    config["input"][0]["dims"] = [1, 3, 32, 32]
    full = target(inputs=[{"name": "INPUT__0", "shape": [1, 3, 32, 32], "dtype": "FP32"}])

    assert not triton_model_batches(config)
    assert check_target_against_triton(full, metadata, config) == []
    assert check_target_against_triton(target(), metadata, config) == [
        "target 'triton-cnn': input 'INPUT__0' shape [3, 32, 32] does not match the model's [1, 3, 32, 32]"
    ]
    problems = check_target_against_triton(full.model_copy(update={"batch_size": 4}), metadata, config)
    assert problems == [
        "target 'triton-cnn': batch_size 4 needs a model that batches, but the model 'cnn' has max_batch_size 0"
        " (use batch_size 1 and give the full shape)"
    ]


def test_unknown_inputs_missing_required_inputs_and_unknown_outputs() -> None:
    metadata = cnn_metadata()
    metadata["inputs"].append({"name": "MASK", "datatype": "INT64", "shape": [-1, 4]})
    metadata["inputs"].append({"name": "HINT", "datatype": "FP32", "shape": [-1, 1]})
    config = cnn_config()
    config["input"].append({"name": "MASK", "data_type": "TYPE_INT64", "dims": [4]})
    config["input"].append({"name": "HINT", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    wrong = target(
        inputs=[
            {"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32"},
            {"name": "input0", "shape": [4], "dtype": "INT64"},
        ],
        outputs=["OUTPUT__0", "logits"],
    )

    assert check_target_against_triton(wrong, metadata, config) == [
        "target 'triton-cnn': input 'input0' is not an input of the model 'cnn' (it has: INPUT__0, MASK, HINT)",
        "target 'triton-cnn': the model 'cnn' requires input 'MASK' (INT64 [4]), which the scenario does not give",
        "target 'triton-cnn': output 'logits' is not an output of the model 'cnn' (it has: OUTPUT__0)",
    ]


def test_bytes_inputs_match_type_string() -> None:
    metadata = {
        "name": "echo",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}],
        "outputs": [],
    }
    config = {
        "name": "echo",
        "max_batch_size": 8,
        "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [],
    }
    text = target(model="echo", outputs=[], inputs=[{"name": "TEXT", "shape": [1], "dtype": "BYTES"}])
    assert check_target_against_triton(text, metadata, config) == []


def test_torchserve_targets_are_not_checked_against_triton() -> None:
    torchserve = target(kind="torchserve-rest", address="http://127.0.0.1:8080", outputs=[])
    with pytest.raises(ValueError):
        check_target_against_triton(torchserve, cnn_metadata(), cnn_config())


@pytest.mark.parametrize("kind", ["triton-grpc", "triton-http"])
def test_an_unreachable_server_is_a_server_error(kind: str) -> None:
    closed = target(kind=kind, address="127.0.0.1:1")
    with pytest.raises(ServerError, match=r"cannot reach Triton at 127\.0\.0\.1:1"):
        fetch_triton_model_info(closed, timeout_s=2.0)
