"""Request payloads: input arrays made from a scenario's data spec, and their TorchServe encodings.

Arrays are made and encoded once per user, never per request. Every array has the batch
dimension first: ``(batch_size, *spec.shape)``. Generation is deterministic for a given seed.
"""

from __future__ import annotations

import io
import json
import math
import string
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    from inferload.scenario import DataSpec, InputSpec

DEFAULT_BYTES_LENGTH = 16

ProblemAt = tuple[tuple[Union[str, int], ...], str]


def http_content_type(content_type: str) -> str:
    """The Content-Type header for a scenario ``content_type``: octet-stream, npy or json."""
    headers = {"octet-stream": "application/octet-stream", "npy": "application/x-npy", "json": "application/json"}
    if content_type not in headers:
        raise ValueError(f"unknown content_type {content_type!r}")
    return headers[content_type]


def numpy_dtype(dtype: str) -> np.dtype:
    """FP32→float32, FP16→float16, INT32→int32, INT64→int64, BYTES→object (elements are bytes)."""
    names = {"FP32": "float32", "FP16": "float16", "INT32": "int32", "INT64": "int64", "BYTES": "object"}
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}")
    return np.dtype(names[dtype])


def default_range(dtype: str) -> tuple[float, float]:
    """The random generator's default ``low``/``high``: 0..1 for floats, 0..100 for integers."""
    return (0.0, 100.0) if dtype in ("INT32", "INT64") else (0.0, 1.0)


def element_nbytes(spec: InputSpec) -> int:
    """Bytes one element takes on the wire (BYTES: its length plus Triton's 4-byte prefix)."""
    if spec.dtype != "BYTES":
        return numpy_dtype(spec.dtype).itemsize
    data = spec.data
    if data.generator == "constant":
        return 4 + len(str(data.value).encode())
    if data.generator == "random":
        return 4 + (data.length or DEFAULT_BYTES_LENGTH)
    return 4


def request_nbytes(spec: InputSpec, batch_size: int) -> int:
    """How many bytes this input adds to one request."""
    return batch_size * math.prod(spec.shape) * element_nbytes(spec)


def data_dtype_problems(data: DataSpec, dtype: str) -> list[ProblemAt]:
    """What in ``data`` cannot be produced as ``dtype``; paths are relative to ``data``."""
    problems: list[ProblemAt] = []
    is_int = dtype in ("INT32", "INT64")
    if dtype == "BYTES":
        for key in ("low", "high"):
            if getattr(data, key) is not None:
                problems.append(((key,), "does not apply to BYTES inputs (use length)"))
        if data.generator == "npy":
            problems.append((("generator",), "npy data is not supported for BYTES inputs; use random, zeros or constant"))
        if data.generator == "constant" and not isinstance(data.value, str):
            problems.append((("value",), f"expected a string for a BYTES input; got {data.value!r}"))
        return problems
    if data.length is not None:
        problems.append((("length",), f"only applies to BYTES inputs; this input is {dtype}"))
    if data.generator == "constant" and data.value is not None:
        problems.extend(_constant_problems(data.value, dtype))
    if is_int:
        info = np.iinfo(numpy_dtype(dtype))
        for key in ("low", "high"):
            bound = getattr(data, key)
            if bound is not None and (not float(bound).is_integer() or not info.min <= bound <= info.max + 1):
                problems.append(((key,), f"expected an integer within {dtype}'s range; got {bound:g}"))
    elif dtype == "FP16":
        for key in ("low", "high"):
            bound = getattr(data, key)
            if bound is not None and abs(bound) > float(np.finfo(np.float16).max):
                problems.append(((key,), f"is outside FP16's range (±65504); got {bound:g}"))
    low, high = default_range(dtype)
    if data.generator == "random" and data.low is not None and data.high is None and data.low >= high:
        problems.append((("high",), f"required when low ({data.low:g}) is not below the default high ({high:g})"))
    if data.generator == "random" and data.high is not None and data.low is None and data.high <= low:
        problems.append((("low",), f"required when high ({data.high:g}) is not above the default low ({low:g})"))
    return problems


def _constant_problems(value: object, dtype: str) -> list[ProblemAt]:
    if isinstance(value, str):
        return [(("value",), f"expected a number for a {dtype} input; got {value!r}")]
    number = float(value)  # type: ignore[arg-type]
    if dtype in ("INT32", "INT64"):
        info = np.iinfo(numpy_dtype(dtype))
        if not number.is_integer() or not info.min <= int(number) <= info.max:
            return [(("value",), f"expected an integer within {dtype}'s range; got {value!r}")]
    if dtype == "FP16" and abs(number) > float(np.finfo(np.float16).max):
        return [(("value",), f"is outside FP16's range (±65504); got {value!r}")]
    return []


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
    if spec.dtype in ("INT32", "INT64"):
        return rng.integers(int(low), int(high), size=shape, dtype=dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


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


def load_npy(spec: InputSpec, batch_size: int, base_dir: Path) -> np.ndarray:
    """Read an npy input; ValueError (with a message naming the file) if it does not fit the spec.

    The file holds either ``(batch_size, *shape)`` or ``shape`` (then repeated over the batch).
    """
    if spec.data.path is None:
        raise ValueError("an npy generator needs a path")
    path = Path(spec.data.path)
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise ValueError(f"npy file not found: {str(path)!r}")
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"cannot read {str(path)!r} as an npy array: {error}") from None
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{str(path)!r} holds several arrays (npz); expected one npy array")
    expected = numpy_dtype(spec.dtype)
    if array.dtype != expected:
        raise ValueError(f"{path.name} holds {array.dtype} values; expected {expected} for {spec.dtype}")
    item_shape = tuple(spec.shape)
    if array.shape == (batch_size, *item_shape):
        return array
    if array.shape == item_shape:
        return np.ascontiguousarray(np.broadcast_to(array, (batch_size, *item_shape)))
    raise ValueError(
        f"{path.name} has shape {list(array.shape)}; expected {[batch_size, *item_shape]}"
        f" (batch_size x shape) or {list(item_shape)}"
    )


def make_inputs(inputs: Sequence[InputSpec], batch_size: int, base_dir: Path) -> dict[str, np.ndarray]:
    """Every input of a target by name, in the scenario's order."""
    return {spec.name: make_input_array(spec, batch_size, base_dir) for spec in inputs}


# --- TorchServe REST bodies --------------------------------------------------------------------


def _raw_bytes(array: np.ndarray) -> bytes:
    if array.dtype == object:
        parts = []
        for item in array.reshape(-1):
            value = item if isinstance(item, bytes) else str(item).encode()
            parts.append(len(value).to_bytes(4, "little") + value)
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def encode_octet_stream(arrays: Union[np.ndarray, Sequence[np.ndarray]]) -> bytes:
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


def encode_torchserve_body(content_type: str, arrays: Sequence[np.ndarray]) -> tuple[bytes, str]:
    """(body, Content-Type header) for a TorchServe request; npy and json take exactly one input."""
    if content_type == "octet-stream":
        return encode_octet_stream(arrays), http_content_type(content_type)
    if len(arrays) != 1:
        raise ValueError(f"content_type {content_type!r} sends one input; this target has {len(arrays)}")
    if content_type == "npy":
        return encode_npy(arrays[0]), http_content_type(content_type)
    if content_type == "json":
        return encode_json(arrays[0]), http_content_type(content_type)
    raise ValueError(f"unknown content_type {content_type!r}")
