"""Input arrays made from a scenario's data spec, and the bodies sent to TorchServe."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferload.scenario.inputs import InputSpec
from inferload.scenario.tensors import load_npy, request_nbytes
from inferload.users.payload import (
    encode_json,
    encode_npy,
    encode_octet_stream,
    make_input_array,
)


def spec(dtype: str = "FP32", shape: tuple[int, ...] = (3, 4), **data: Any) -> InputSpec:
    return InputSpec.model_validate(
        {"name": "INPUT__0", "shape": list(shape), "dtype": dtype, "data": data or {"generator": "random"}}
    )


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype"),
    [("FP32", np.float32), ("FP16", np.float16), ("INT32", np.int32), ("INT64", np.int64), ("BYTES", np.object_)],
)
def test_arrays_have_the_batch_dimension_first_and_the_mapped_dtype(tmp_path: Path, dtype: str, numpy_dtype: type) -> None:
    array = make_input_array(spec(dtype), batch_size=5, base_dir=tmp_path)
    assert array.shape == (5, 3, 4)
    assert array.dtype == np.dtype(numpy_dtype)


def test_random_data_is_deterministic_per_seed(tmp_path: Path) -> None:
    first = make_input_array(spec(generator="random", seed=7), 2, tmp_path)
    again = make_input_array(spec(generator="random", seed=7), 2, tmp_path)
    other = make_input_array(spec(generator="random", seed=8), 2, tmp_path)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_random_data_stays_within_low_and_high(tmp_path: Path) -> None:
    floats = make_input_array(spec(generator="random", low=-2.0, high=-1.0), 64, tmp_path)
    ints = make_input_array(spec("INT64", generator="random", low=5, high=8), 64, tmp_path)
    assert floats.min() >= -2.0 and floats.max() < -1.0
    assert set(np.unique(ints)) <= {5, 6, 7}
    default_floats = make_input_array(spec(), 64, tmp_path)
    assert default_floats.min() >= 0.0 and default_floats.max() < 1.0


def test_zeros_and_constant(tmp_path: Path) -> None:
    assert not make_input_array(spec(generator="zeros"), 2, tmp_path).any()
    constant = make_input_array(spec("INT32", generator="constant", value=3), 2, tmp_path)
    assert constant.dtype == np.int32 and (constant == 3).all()


def test_bytes_inputs_are_object_arrays_of_bytes(tmp_path: Path) -> None:
    random_bytes = make_input_array(spec("BYTES", (2,), generator="random", seed=1, length=10), 3, tmp_path)
    assert all(isinstance(item, bytes) and len(item) == 10 and item.isalnum() for item in random_bytes.flat)
    assert np.array_equal(random_bytes, make_input_array(spec("BYTES", (2,), generator="random", seed=1, length=10), 3, tmp_path))
    default_length = make_input_array(spec("BYTES", (1,)), 1, tmp_path)
    assert len(default_length[0, 0]) == 16
    constant = make_input_array(spec("BYTES", (2,), generator="constant", value="héllo"), 2, tmp_path)
    assert constant.tolist() == [["héllo".encode()] * 2] * 2
    assert make_input_array(spec("BYTES", (1,), generator="zeros"), 1, tmp_path).tolist() == [[b""]]


def test_npy_data_with_or_without_the_batch_dimension(tmp_path: Path) -> None:
    item = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "item.npy", item)
    np.save(tmp_path / "batch.npy", np.stack([item, item + 1]))

    tiled = make_input_array(spec(generator="npy", path="item.npy"), 2, tmp_path)
    assert tiled.shape == (2, 3, 4) and np.array_equal(tiled[1], item)
    batch = make_input_array(spec(generator="npy", path=str(tmp_path / "batch.npy")), 2, Path("/elsewhere"))
    assert np.array_equal(batch[1], item + 1)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (np.zeros((3, 5), dtype=np.float32), "item.npy has shape [3, 5]; expected [2, 3, 4] (batch_size x shape) or [3, 4]"),
        (np.zeros((3, 4), dtype=np.float64), "item.npy holds float64 values; expected float32 for FP32"),
        (None, "npy file not found"),
    ],
    ids=["shape", "dtype", "missing"],
)
def test_npy_data_that_does_not_fit(tmp_path: Path, content: Any, message: str) -> None:
    if content is not None:
        np.save(tmp_path / "item.npy", content)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")):
        load_npy(spec(generator="npy", path="item.npy"), 2, tmp_path)


def test_request_size_counts_the_batch() -> None:
    assert request_nbytes(spec("FP32", (3, 32, 32)), 8) == 8 * 3 * 32 * 32 * 4
    assert request_nbytes(spec("BYTES", (2,), generator="random", length=10), 3) == 3 * 2 * (4 + 10)


# --- encodings ----------------------------------------------------------------------------------


def test_octet_stream_is_the_raw_c_order_bytes() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert encode_octet_stream(array) == array.tobytes()
    assert encode_octet_stream([array, array.T]) == array.tobytes() + np.ascontiguousarray(array.T).tobytes()


def test_octet_stream_of_bytes_is_length_prefixed() -> None:
    array = np.array([b"ab", b"xyz"], dtype=object)
    assert encode_octet_stream(array) == b"\x02\x00\x00\x00ab\x03\x00\x00\x00xyz"


def test_npy_body_loads_back_to_the_same_array() -> None:
    array = np.arange(6, dtype=np.int64).reshape(1, 6)
    loaded = np.load(io.BytesIO(encode_npy(array)), allow_pickle=False)
    assert loaded.dtype == np.int64 and np.array_equal(loaded, array)


def test_json_body_is_a_nested_list() -> None:
    array = np.array([[1.5, 2.0]], dtype=np.float32)
    assert json.loads(encode_json(array)) == [[1.5, 2.0]]
    assert json.loads(encode_json(np.array([[b"hi"]], dtype=object))) == [["hi"]]
