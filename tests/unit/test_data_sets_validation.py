"""`inferload validate` on data sets, rotation and the new dtypes: each mistake is one
`file: key.path: message` line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from tests.support.scenario_factory import key_problems


def scenario(inputs: list[dict[str, Any]], **target: Any) -> dict[str, Any]:
    return {
        "name": "data-sets",
        "duration": "10s",
        "targets": [{"name": "t", "kind": "triton-grpc", "address": "127.0.0.1:8001", "model": "m", "inputs": inputs, **target}],
        "shape": {"kind": "steady", "users": 2},
    }


def lines_input(**data: Any) -> dict[str, Any]:
    return {"name": "TEXT", "shape": [1], "dtype": "BYTES", "data": {"dataset": "prompts.txt", **data}}


def problems(tmp_path: Path, data: dict[str, Any]) -> list[tuple[str, str]]:
    return key_problems(tmp_path, data)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "prompts.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "blank.txt").write_text("\n \n")
    (tmp_path / "images").mkdir()
    for size in (10, 20):
        (tmp_path / "images" / f"{size}.jpg").write_bytes(bytes(size))
    np.save(tmp_path / "wide.npy", np.zeros((3, 5), np.float32))
    np.save(tmp_path / "f64.npy", np.zeros((3, 4), np.float64))
    np.save(tmp_path / "two.npy", np.zeros((2, 4), np.float32))
    return tmp_path


def test_a_valid_data_set_scenario_resolves_paths_against_its_file(files: Path) -> None:
    data = scenario(
        [lines_input(), {"name": "IMAGE", "shape": [-1], "dtype": "UINT8", "data": {"dataset": "images"}}],
        rotation="random",
        rotation_seed=5,
    )
    data["targets"][0]["inputs"][1]["data"]["dataset"] = "images"
    (files / "prompts.txt").write_text("one\ntwo\n")  # as many samples as the folder has files
    path = files / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    loaded = load_scenario(path)
    target = loaded.targets[0]
    assert target.inputs[0].data.dataset == str(files / "prompts.txt")
    assert (target.rotation, target.rotation_seed) == ("random", 5)
    again = scenario_from_dict(scenario_to_dict(loaded))  # what a worker gets: paths stand on their own
    assert again.targets[0].inputs[1].data.dataset == str(files / "images")


@pytest.mark.parametrize(
    ("inputs", "target", "key_path", "message"),
    [
        ([lines_input(dataset="gone.txt")], {}, "targets[0].inputs[0].data.dataset", "data set not found"),
        (
            [{"name": "I", "shape": [-1], "dtype": "UINT8", "data": {"dataset": "no-folder/"}}],
            {},
            "targets[0].inputs[0].data.dataset",
            "data set not found",
        ),
        ([lines_input(dataset="blank.txt")], {}, "targets[0].inputs[0].data.dataset", "blank.txt holds no samples"),
        (
            [{"name": "x", "shape": [4], "dtype": "FP32", "data": {"dataset": "wide.npy"}}],
            {},
            "targets[0].inputs[0].data.dataset",
            "wide.npy: sample 0 has shape [5]; input 'x' has shape [4]",
        ),
        (
            [{"name": "x", "shape": [4], "dtype": "FP32", "data": {"dataset": "f64.npy"}}],
            {},
            "targets[0].inputs[0].data.dataset",
            "f64.npy holds float64 values; expected float32 for FP32",
        ),
        (
            [{"name": "I", "shape": [10], "dtype": "UINT8", "data": {"dataset": "images"}}],
            {},
            "targets[0].inputs[0].data.dataset",
            "images: 20.jpg has shape [20]; input 'I' has shape [10]",
        ),
        (
            [{"name": "I", "shape": [-1], "dtype": "UINT8", "data": {"dataset": "images"}}],
            {"batch_size": 2},
            "targets[0].inputs[0].data.dataset",
            "a batch of 2 is one tensor, so its samples need one shape",
        ),
        (
            [lines_input(), {"name": "x", "shape": [4], "dtype": "FP32", "data": {"dataset": "two.npy"}}],
            {},
            "targets[0].inputs[1].data.dataset",
            "two.npy has 2 samples; inputs[0] ('TEXT') has 3",
        ),
        (
            [{"name": "x", "shape": [-1], "dtype": "FP32"}],
            {},
            "targets[0].inputs[0].shape",
            "-1 (any size) needs a data set",
        ),
        ([lines_input()], {"rotation": "shuffle"}, "targets[0].rotation", "expected one of round-robin, random; got 'shuffle'"),
        ([lines_input()], {"rotation": "random", "rotation_seed": -1}, "targets[0].rotation_seed", "must be at least 0; got -1"),
        ([lines_input()], {"rotation": "random", "rotation_seed": "x"}, "targets[0].rotation_seed", "expected an integer"),
        ([lines_input()], {"rotation_seed": 3}, "targets[0].rotation_seed", "only applies to rotation: random"),
        ([lines_input(format="csv")], {}, "targets[0].inputs[0].data.format", "expected one of folder, npy, npz, jsonl, lines"),
        ([lines_input(format="npy", pattern="*.x")], {}, "targets[0].inputs[0].data.pattern", "only applies to folder data sets"),
        ([lines_input(seed=3)], {}, "targets[0].inputs[0].data.seed", "does not apply to a data set"),
        (
            [{"name": "x", "shape": [1], "dtype": "BYTES", "data": {"format": "lines"}}],
            {},
            "targets[0].inputs[0].data.dataset",
            "required key is missing",
        ),
        ([lines_input(dataset="")], {}, "targets[0].inputs[0].data.dataset", "expected the path of a data set"),
        (
            [{"name": "x", "shape": [1], "dtype": "BOOL", "data": {"generator": "constant", "value": 2}}],
            {},
            "targets[0].inputs[0].data.value",
            "expected true, false, 0 or 1 for a BOOL input; got 2",
        ),
        (
            [{"name": "x", "shape": [1], "dtype": "UINT8", "data": {"generator": "constant", "value": 256}}],
            {},
            "targets[0].inputs[0].data.value",
            "expected an integer within UINT8's range; got 256",
        ),
        (
            [{"name": "x", "shape": [1], "dtype": "INT8", "data": {"generator": "random", "low": -200}}],
            {},
            "targets[0].inputs[0].data.low",
            "expected an integer within INT8's range (-128..127); got -200",
        ),
        (
            [{"name": "x", "shape": [1], "dtype": "BF16", "data": {"generator": "constant", "value": 1.0e39}}],
            {},
            "targets[0].inputs[0].data.value",
            "is outside BF16's range",
        ),
        (
            [{"name": "x", "shape": [1], "dtype": "BOOL", "data": {"generator": "random", "low": 0}}],
            {},
            "targets[0].inputs[0].data.low",
            "does not apply to BOOL inputs",
        ),
    ],
)
def test_a_bad_data_set_or_rotation_is_reported_at_its_key(
    files: Path, inputs: list[dict[str, Any]], target: dict[str, Any], key_path: str, message: str
) -> None:
    found = problems(files, scenario(inputs, **target))
    assert [(where, message in text) for where, text in found] == [(key_path, True)], found


def test_a_data_set_over_the_memory_bound_names_the_target_and_its_size(files: Path) -> None:
    # small samples, but each of the 20 distinct requests also carries a generated 16 MB input: 320 MB encoded
    (files / "many.txt").write_text("".join(f"{i}\n" for i in range(20)))
    big = {"name": "big", "shape": [4_000_000], "dtype": "FP32", "data": "zeros"}
    found = problems(files, scenario([lines_input(dataset="many.txt"), big]))
    assert len(found) == 1
    key_path, message = found[0]
    assert key_path == "targets[0].inputs"
    assert "target 't': its 20 distinct requests (20 samples, batch_size 1) take 320,000," in message
    assert "at most 268,435,456 (256 MiB) per target" in message


def test_every_dtype_is_accepted(tmp_path: Path) -> None:
    dtypes = [
        "BOOL",
        "UINT8",
        "UINT16",
        "UINT32",
        "UINT64",
        "INT8",
        "INT16",
        "INT32",
        "INT64",
        "FP16",
        "FP32",
        "FP64",
        "BF16",
        "BYTES",
    ]
    inputs = [{"name": f"in_{d.lower()}", "shape": [2], "dtype": d.lower()} for d in dtypes]
    loaded = scenario_from_dict(scenario(inputs))
    assert [spec.dtype for spec in loaded.targets[0].inputs] == dtypes
