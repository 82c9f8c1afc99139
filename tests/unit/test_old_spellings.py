"""What a user coming from another tool writes first, and the line that says what inferload calls it:
generator: file, a BYTES npy generator, a many-sample .npy or a folder as the npy generator's path,
body_file and body. Each problem names the file and the key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.support.scenario_factory import bare_target, key_problems, steady_one_user


def problems(folder: Path, target: dict[str, Any]) -> dict[str, str]:
    return dict(key_problems(folder, steady_one_user(target)))


def triton(**extra: Any) -> dict[str, Any]:
    return bare_target("t", "triton-http", "127.0.0.1:8000", **extra)


def torchserve(**extra: Any) -> dict[str, Any]:
    return bare_target("t", "torchserve-rest", "http://127.0.0.1:8080", **extra)


def with_data(
    target: dict[str, Any], data: dict[str, Any], shape: list[int] | None = None, dtype: str | None = None
) -> dict[str, Any]:
    target["inputs"][0]["data"] = data
    if shape is not None:
        target["inputs"][0]["shape"] = shape
    if dtype is not None:
        target["inputs"][0]["dtype"] = dtype
    return target


def test_generator_file_points_to_a_data_set(tmp_path: Path) -> None:
    found = problems(tmp_path, with_data(triton(), {"generator": "file", "path": "x.npy"}))
    message = found["targets[0].inputs[0].data.generator"]
    assert message.startswith("expected one of random, zeros, constant, npy; got 'file': ")
    assert "use data: {dataset: PATH}" in message


def test_a_bytes_npy_generator_points_to_a_data_set(tmp_path: Path) -> None:
    found = problems(tmp_path, with_data(triton(), {"generator": "npy", "path": "w.npy"}, shape=[1], dtype="BYTES"))
    assert "or strings from a file as a data set: data: {dataset: PATH}" in found["targets[0].inputs[0].data.generator"]


def test_an_npy_of_many_samples_as_the_generator_points_to_a_data_set(tmp_path: Path) -> None:
    np.save(tmp_path / "ten.npy", np.zeros((10, 4), dtype=np.float32))
    found = problems(tmp_path, with_data(triton(), {"generator": "npy", "path": "ten.npy"}))
    assert found["targets[0].inputs[0].data.path"] == (
        "ten.npy has shape [10, 4]; expected [1, 4] (batch_size x shape) or [4]: it holds 10 samples of shape [4];"
        " to send them in turn, use data: {dataset: ten.npy} instead of generator: npy"
    )


def test_a_folder_as_the_npy_path_points_to_a_data_set(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    found = problems(tmp_path, with_data(triton(), {"generator": "npy", "path": "images"}))
    assert "is a folder; the npy generator reads one .npy file" in found["targets[0].inputs[0].data.path"]
    assert "use data: {dataset: images}" in found["targets[0].inputs[0].data.path"]
    any_size = problems(tmp_path, with_data(triton(), {"generator": "npy", "path": "images"}, shape=[-1], dtype="UINT8"))
    assert any_size["targets[0].inputs[0].shape"].endswith("use data: {dataset: images} instead of generator: npy")


def test_body_file_and_body_point_to_raw_bodies_and_body_template(tmp_path: Path) -> None:
    found = problems(tmp_path, torchserve(body_file="digit.png"))
    assert found["targets[0].body_file"].startswith("unknown key 'body_file': to send a file as each request's body")
    assert "content_type: raw" in found["targets[0].body_file"] and "token_file" not in found["targets[0].body_file"]
    found = problems(tmp_path, torchserve(content_type="json", body='{"x": 1}'))
    assert found["targets[0].body"].startswith("unknown key 'body': a body of your own is content_type: json with body_template")


def test_file_under_data_points_to_dataset(tmp_path: Path) -> None:
    found = problems(tmp_path, with_data(triton(), {"file": "x.npy"}))
    assert found["targets[0].inputs[0].data.file"].startswith("unknown key 'file': to send the samples of a file or folder")


def test_decoupled_needs_no_key_and_says_where_inferload_reads_it(tmp_path: Path) -> None:
    for key in ("decoupled", "streaming"):
        found = problems(tmp_path, triton(**{key: True}))
        assert found[f"targets[0].{key}"].startswith(f"unknown key {key!r}: no key is needed for a decoupled model")


def test_an_inline_list_of_values_points_to_a_data_set(tmp_path: Path) -> None:
    found = problems(tmp_path, with_data(triton(), {"value": [1, 2, 3]}, shape=[3], dtype="INT32"))
    message = found["targets[0].inputs[0].data.value"]
    assert "got [1, 2, 3]" in message and "a .jsonl file with one list per line, named in data.dataset" in message
