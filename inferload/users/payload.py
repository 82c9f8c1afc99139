"""Request payloads: input arrays made from a scenario's data spec, and the raw encodings TorchServe
bodies are built from (`inferload.users.torchserve`).

Arrays are made and encoded once per process, up front, by the target's request pool
(`inferload.users.request_pool`), never per request. Every array has the batch dimension first:
``(batch_size, *spec.shape)``. Generation is deterministic for a given seed.
"""

from __future__ import annotations

import io
import json
import math
import string
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from inferload.scenario.tensors import DEFAULT_BYTES_LENGTH, INTEGER_DTYPES, default_range, load_npy, numpy_dtype

if TYPE_CHECKING:
    from inferload.scenario.inputs import InputSpec


def make_input_array(spec: InputSpec, batch_size: int, base_dir: Path) -> np.ndarray:
    """The array for one request: shape ``(batch_size, *spec.shape)``, dtype per ``spec.dtype``."""
    shape = (batch_size, *spec.shape)
    data = spec.data
    if data.generator == "npy":
        return load_npy(spec, batch_size, base_dir)
    if spec.dtype == "BYTES":
        return _bytes_array(spec, shape)
    dtype = numpy_dtype(spec.dtype)
    if data.generator == "zeros":
        return np.zeros(shape, dtype=dtype)
    if data.generator == "constant":
        return np.full(shape, data.value, dtype=dtype)
    low, high = default_range(spec.dtype)
    low = data.low if data.low is not None else low
    high = data.high if data.high is not None else high
    rng = np.random.default_rng(data.seed or 0)
    if spec.dtype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(bool)
    if spec.dtype in INTEGER_DTYPES:
        return rng.integers(int(low), int(high), size=shape, dtype=dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)  # FP16/BF16: rounded from float64


def _bytes_array(spec: InputSpec, shape: tuple[int, ...]) -> np.ndarray:
    data = spec.data
    array = np.empty(shape, dtype=object)
    if data.generator == "zeros":
        array.fill(b"")
    elif data.generator == "constant":
        array.fill(str(data.value).encode())
    else:
        alphabet = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)
        length = data.length or DEFAULT_BYTES_LENGTH
        rng = np.random.default_rng(data.seed or 0)
        codes = rng.choice(alphabet, size=(math.prod(shape), length))
        array.reshape(-1)[:] = [row.tobytes() for row in codes]
    return array


# --- TorchServe REST bodies --------------------------------------------------------------------


def _raw_bytes(array: np.ndarray) -> bytes:
    if array.dtype == object:
        parts = []
        for item in array.reshape(-1):
            value = item if isinstance(item, bytes) else str(item).encode()
            parts.append(len(value).to_bytes(4, "little") + value)
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def encode_octet_stream(arrays: np.ndarray | Sequence[np.ndarray]) -> bytes:
    """Raw C-order bytes of each array, concatenated (BYTES elements: 4-byte little-endian length + bytes)."""
    if isinstance(arrays, np.ndarray):
        arrays = [arrays]
    return b"".join(_raw_bytes(array) for array in arrays)


def encode_npy(array: np.ndarray) -> bytes:
    """The ``.npy`` file format of ``array`` (BYTES arrays are stored as fixed-width ``S`` strings)."""
    if array.dtype == object:
        array = array.astype(bytes)
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def encode_json(array: np.ndarray) -> bytes:
    """A JSON nested list of ``array``'s values (BYTES elements as UTF-8 strings)."""
    if array.dtype == object:
        values = np.vectorize(lambda item: item.decode("utf-8", "replace"), otypes=[object])(array).tolist()
    else:
        values = array.tolist()
    return json.dumps(values, separators=(",", ":")).encode()
