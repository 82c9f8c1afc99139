"""Every KServe v2 datatype on the wire: the gRPC and HTTP users' pre-encoded requests carry each
tensor with its datatype, shape and raw bytes the way tritonclient sends them."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from inferload.scenario.fields import DTYPES
from inferload.scenario.targets import Target
from inferload.users import user_class_for
from inferload.users.request_pool import RequestSource

ITEM_BYTES = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2, "UINT32": 4, "INT32": 4, "FP32": 4}


def _target(kind: str) -> Target:
    inputs = [{"name": f"IN_{d}", "shape": [3], "dtype": d, "data": {"generator": "random", "seed": 2}} for d in DTYPES]
    address = "127.0.0.1:8001" if kind == "triton-grpc" else "127.0.0.1:8000"
    return Target.model_validate(
        {"name": "all", "kind": kind, "address": address, "model": "m", "batch_size": 2, "inputs": inputs}
    )


def _expected_raw(array: np.ndarray, dtype: str) -> bytes:
    if dtype == "BYTES":
        return b"".join(len(item).to_bytes(4, "little") + item for item in array.reshape(-1))
    return np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("kind", ["triton-grpc", "triton-http"])
def test_every_datatype_is_encoded_with_its_name_shape_and_raw_bytes(tmp_path: Path, kind: str) -> None:
    target = _target(kind)
    cls = user_class_for(target, tmp_path)
    data = RequestSource(target, tmp_path).data(0)
    encoded = cls.encode_request(data)
    arrays = {spec.name: array for spec, array in data.arrays}
    if kind == "triton-grpc":
        request = service_pb2.ModelInferRequest.FromString(encoded)
        tensors = [
            (t.name, t.datatype, list(t.shape), raw) for t, raw in zip(request.inputs, request.raw_input_contents, strict=True)
        ]
    else:
        header = json.loads(encoded.body[: encoded.json_size])
        offset, tensors = encoded.json_size, []
        for entry in header["inputs"]:
            size = entry["parameters"]["binary_data_size"]
            tensors.append((entry["name"], entry["datatype"], entry["shape"], encoded.body[offset : offset + size]))
            offset += size
        assert offset == len(encoded.body)
    assert [name for name, *_ in tensors] == [f"IN_{d}" for d in DTYPES]
    for name, datatype, shape, raw in tensors:
        dtype = name.removeprefix("IN_")
        assert (datatype, shape) == (dtype, [2, 3])
        assert raw == _expected_raw(arrays[name], dtype)
        if dtype in ITEM_BYTES:
            assert len(raw) == 6 * ITEM_BYTES[dtype]


def test_bf16_travels_as_the_high_half_of_each_float32() -> None:
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    raw = values.astype(ml_dtypes.bfloat16).tobytes()
    assert raw == (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def test_a_data_set_request_has_its_samples_shape(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    for name, size in (("a.jpg", 5), ("b.jpg", 9)):
        (tmp_path / "images" / name).write_bytes(bytes(range(size)))
    data = {"dataset": str(tmp_path / "images")}
    target = Target.model_validate(
        {
            "name": "img",
            "kind": "triton-grpc",
            "address": "127.0.0.1:8001",
            "model": "m",
            "inputs": [{"name": "IMAGE", "shape": [-1], "dtype": "UINT8", "data": data}],
        }
    )
    cls = user_class_for(target, tmp_path)
    source = RequestSource(target, tmp_path, model_batches=False)
    shapes = [
        list(service_pb2.ModelInferRequest.FromString(cls.encode_request(source.data(i))).inputs[0].shape) for i in range(2)
    ]
    assert shapes == [[5], [9]]  # no batch dimension: the model does not batch
