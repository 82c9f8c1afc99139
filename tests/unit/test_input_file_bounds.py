"""Bounds checked before anything starts, on what a scenario points at: devices, FIFOs and
kernel files, files far too big, npy headers that lie, symlink loops under a data set's glob, JSON
nested past Python's stack, BYTES inputs of millions of elements, a body_template that repeats the
request's data past the request bound, and durations that never end. Each is one ``file: key.path:
message`` line from `inferload validate`, and nothing is read that could hang or exhaust it.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferload.scenario.loader import load_scenario
from inferload.scenario.targets import TorchServeTarget
from tests.support.scenario_factory import bare_target, key_problems, steady_one_user, targets_of, write_scenario

HUGE_SHAPE = (10_000_000, 1_000_000)  # 80 TB of FP64, claimed by a header over a few bytes


def lying_npy(shape: tuple[int, ...] = HUGE_SHAPE, dtype: str = "<f8") -> bytes:
    """An npy file whose header claims `shape` and whose data is 8 bytes."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + b"\0" * 8


def problems_of(tmp_path: Path, *targets: dict[str, Any], **top: Any) -> list[tuple[str, str]]:
    return key_problems(tmp_path, {**steady_one_user(*targets), **top})


def torchserve(**extra: Any) -> dict[str, Any]:
    return bare_target("t", "torchserve-rest", "http://127.0.0.1:1", **extra)


def test_a_token_file_that_is_a_device_or_too_big_is_refused(tmp_path: Path):
    [(path, message)] = problems_of(tmp_path, torchserve(token_file="/dev/zero"))
    assert path == "targets[0].token_file" and "/dev/zero is not a regular file: it is a kernel file" in message
    (tmp_path / "big.json").write_bytes(b" " * (2 * 1024 * 1024))
    [(path, message)] = problems_of(tmp_path, torchserve(token_file="big.json"))
    assert path == "targets[0].token_file" and "2,097,152 bytes" in message


def test_tls_files_that_would_block_or_are_kernel_files_are_refused_unread(tmp_path: Path):
    os.mkfifo(tmp_path / "pipe.pem")
    target = bare_target("t", "triton-grpc", "127.0.0.1:1", tls={"ca_file": "pipe.pem"})
    [(path, message)] = problems_of(tmp_path, target)
    assert path == "targets[0].tls.ca_file" and "is not a regular file: it is a named pipe (FIFO)" in message
    target = bare_target("t", "triton-grpc", "127.0.0.1:1", tls={"ca_file": "/proc/kmsg"})
    [(path, message)] = problems_of(tmp_path, target)  # reading it would wait for the kernel, and consume its log
    assert path == "targets[0].tls.ca_file" and "it is a kernel file" in message


def test_an_npy_input_whose_header_lies_is_refused_before_numpy_allocates_it(tmp_path: Path):
    (tmp_path / "lie.npy").write_bytes(lying_npy())
    inputs = [{"name": "x", "shape": [4], "dtype": "FP64", "data": {"generator": "npy", "path": "lie.npy"}}]
    [(path, message)] = problems_of(tmp_path, {**bare_target("t", "triton-grpc", "127.0.0.1:1"), "inputs": inputs})
    assert path == "targets[0].inputs[0].data.path" and "its header says [10000000, 1000000] float64" in message


def test_an_npz_data_set_whose_header_lies_is_refused_before_numpy_allocates_it(tmp_path: Path):
    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as archive:
        archive.writestr("x.npy", lying_npy())
    inputs = [{"name": "x", "shape": [1_000_000], "dtype": "FP64", "data": {"dataset": "lie.npz"}}]
    [(path, message)] = problems_of(tmp_path, {**bare_target("t", "triton-grpc", "127.0.0.1:1"), "inputs": inputs})
    assert path == "targets[0].inputs[0].data.dataset" and "lie.npz['x']: its header says" in message


def test_a_data_set_glob_through_symlink_loops_stops_at_its_bound(tmp_path: Path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.bin").write_bytes(b"x")
    for name in ("loop1", "loop2"):  # two loops: the paths double with each level of the pattern
        (images / name).symlink_to(images, target_is_directory=True)
    deep = "*/" * 20 + "*.bin"  # each level follows both loops: 2**20 paths
    inputs = [{"name": "I", "shape": [-1], "dtype": "UINT8", "data": {"dataset": "images", "pattern": deep}}]
    [(path, message)] = problems_of(tmp_path, {**bare_target("t", "triton-grpc", "127.0.0.1:1"), "inputs": inputs})
    assert path == "targets[0].inputs[0].data.dataset" and "a symlink loop" in message


def test_expected_answers_nested_past_the_stack_are_one_problem(tmp_path: Path):
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    [(path, message)] = problems_of(tmp_path, torchserve(expected="deep.json"))
    assert path.startswith("targets[0].expected") and "nested too deeply" in message


def test_a_bytes_input_of_millions_of_elements_is_refused(tmp_path: Path):
    inputs = [{"name": "s", "shape": [13_000_000], "dtype": "BYTES", "data": {"generator": "random", "length": 1}}]
    [(path, message)] = problems_of(tmp_path, {**bare_target("t", "triton-grpc", "127.0.0.1:1"), "inputs": inputs})
    assert path == "targets[0].inputs[0].shape" and "13,000,000 elements per request; at most 1,000,000" in message


def test_a_body_template_that_repeats_the_data_past_the_request_bound_is_refused(tmp_path: Path):
    template = json.dumps({f"copy{k}": "$data" for k in range(30)}).replace('"$data"', "$data")
    target = torchserve(
        content_type="json", body_template=template, inputs=[{"name": "x", "shape": [1_000_000], "dtype": "FP32"}]
    )
    [(path, message)] = problems_of(tmp_path, target)  # 30 copies of a million numbers: about 750 MB of JSON
    assert path == "targets[0].body_template" and "$data appears 30 times" in message
    fine = write_scenario(tmp_path, steady_one_user(torchserve(content_type="json", body_template='{"a": $data, "b": $data}')))
    assert (
        targets_of(TorchServeTarget, load_scenario(fine))[0].body_template == '{"a": $data, "b": $data}'
    )  # two copies of 4 numbers


@pytest.mark.parametrize(
    ("top", "path", "message"),
    [
        ({"duration": 1.0e308}, "duration", "expected at most 720h (30 days)"),
        ({"duration": "72h", "window": "1s"}, "window", "259,200 windows; at most 200,000"),
    ],
)
def test_durations_and_windows_that_never_end_are_refused(tmp_path: Path, top: dict[str, Any], path: str, message: str):
    found = problems_of(tmp_path, torchserve(), **top)
    assert any(key == path and message in text for key, text in found), found
