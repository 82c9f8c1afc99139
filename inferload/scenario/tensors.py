"""Tensor facts of a scenario's inputs: dtypes, sizes, what a data spec can produce, npy files.

Pure and shared by validation (``scenario.targets``) and payload making (``users.payload``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from inferload.scenario.input_files import check_npy_file, not_regular_problem
from inferload.scenario.limits import MAX_INPUT_BYTES

if TYPE_CHECKING:
    from inferload.scenario.inputs import DataSpec, InputSpec

DEFAULT_BYTES_LENGTH = 16

ProblemAt = tuple[tuple[str | int, ...], str]

_NUMPY_NAMES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BYTES": "object",
}
INTEGER_DTYPES = ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a KServe v2 datatype (FP32→float32, BOOL→bool, BYTES→object of bytes elements).

    BF16 is ``ml_dtypes.bfloat16`` (numpy has none; tritonclient takes the same type): its raw bytes
    are the two high bytes of each float32, which is what Triton reads.
    """
    if dtype == "BF16":
        return np.dtype(ml_dtypes.bfloat16)
    if dtype not in _NUMPY_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return np.dtype(_NUMPY_NAMES[dtype])


def default_range(dtype: str) -> tuple[float, float]:
    """The random generator's default ``low``/``high``: 0..1 for floats, 0..100 for integers, 0..2 for BOOL."""
    if dtype == "BOOL":
        return (0.0, 2.0)
    return (0.0, 100.0) if dtype in INTEGER_DTYPES else (0.0, 1.0)


def float_max(dtype: str) -> float:
    """The largest finite value of a float dtype (FP16: 65504)."""
    if dtype == "BF16":
        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    return float(np.finfo(numpy_dtype(dtype)).max)


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
    """How many bytes this input adds to one request (0 for a shape with -1: a data set sizes those)."""
    if any(dim < 0 for dim in spec.shape):
        return 0
    return batch_size * math.prod(spec.shape) * element_nbytes(spec)


def shape_fits(shape: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    """Does an item of ``shape`` fit an input's ``wanted`` shape (-1 matches any size)?"""
    return len(shape) == len(wanted) and all(want == -1 or want == size for size, want in zip(shape, wanted, strict=True))


def data_dtype_problems(data: DataSpec, dtype: str) -> list[ProblemAt]:
    """What in ``data`` cannot be produced as ``dtype``; paths are relative to ``data``."""
    problems: list[ProblemAt] = []
    if data.dataset is not None:
        return problems  # a data set's samples are checked against the dtype when it is read
    if dtype == "BYTES":
        for key in ("low", "high"):
            if getattr(data, key) is not None:
                problems.append(((key,), "does not apply to BYTES inputs (use length)"))
        if data.generator == "npy":
            problems.append(
                (
                    ("generator",),
                    "npy data is not supported for BYTES inputs; use random, zeros or constant, or strings from a file"
                    " as a data set: data: {dataset: PATH} (.npy of numpy strings, one sample per row; .txt lines; .jsonl)",
                )
            )
        if data.generator == "constant" and not isinstance(data.value, str):
            problems.append((("value",), f"expected a string for a BYTES input; got {data.value!r}"))
        return problems
    if data.length is not None:
        problems.append((("length",), f"only applies to BYTES inputs; this input is {dtype}"))
    if data.generator == "constant" and data.value is not None:
        problems.extend(_constant_problems(data.value, dtype))
    if dtype == "BOOL":
        for key in ("low", "high"):
            if getattr(data, key) is not None:
                problems.append(((key,), "does not apply to BOOL inputs (random gives true and false alike)"))
        return problems
    if dtype in INTEGER_DTYPES:
        info = np.iinfo(numpy_dtype(dtype))
        for key in ("low", "high"):
            bound = getattr(data, key)
            if bound is not None and (not float(bound).is_integer() or not info.min <= bound <= info.max + 1):
                problems.append(((key,), f"expected an integer within {dtype}'s range ({info.min}..{info.max}); got {bound:g}"))
    else:
        limit = float_max(dtype)
        for key in ("low", "high"):
            bound = getattr(data, key)
            if bound is not None and abs(bound) > limit:
                problems.append(((key,), f"is outside {dtype}'s range (±{limit:g}); got {bound:g}"))
    low, high = default_range(dtype)
    if data.generator == "random" and data.low is not None and data.high is None and data.low >= high:
        problems.append((("high",), f"required when low ({data.low:g}) is not below the default high ({high:g})"))
    if data.generator == "random" and data.high is not None and data.low is None and data.high <= low:
        problems.append((("low",), f"required when high ({data.high:g}) is not above the default low ({low:g})"))
    return problems


def _constant_problems(value: object, dtype: str) -> list[ProblemAt]:
    if dtype == "BOOL":
        if isinstance(value, bool) or value in (0, 1):
            return []
        return [(("value",), f"expected true, false, 0 or 1 for a BOOL input; got {value!r}")]
    if isinstance(value, (str, bool)):
        return [(("value",), f"expected a number for a {dtype} input; got {value!r}")]
    number = float(value)  # type: ignore[arg-type]
    if dtype in INTEGER_DTYPES:
        info = np.iinfo(numpy_dtype(dtype))
        if not number.is_integer() or not info.min <= int(number) <= info.max:
            return [(("value",), f"expected an integer within {dtype}'s range; got {value!r}")]
        return []
    limit = float_max(dtype)
    if abs(number) > limit:
        return [(("value",), f"is outside {dtype}'s range (±{limit:g}); got {value!r}")]
    return []


def load_npy(spec: InputSpec, batch_size: int, base_dir: Path) -> np.ndarray:
    """Read an npy input; ValueError (with a message naming the file) if it does not fit the spec.

    The file holds either ``(batch_size, *shape)`` or ``shape`` (then repeated over the batch).
    """
    if spec.data.path is None:
        raise ValueError("an npy generator needs a path")
    path = Path(spec.data.path)
    if not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        raise ValueError(
            f"{str(path)!r} is a folder; the npy generator reads one .npy file (one request's data): to send the folder's"
            f" files in turn, use data: {{dataset: {spec.data.path}}} (content_type: raw on TorchServe sends each file as it is)"
        )
    if not path.exists():
        raise ValueError(f"npy file not found: {str(path)!r}")
    problem = not_regular_problem(path)
    if problem:
        raise ValueError(problem)
    try:
        check_npy_file(path, MAX_INPUT_BYTES)  # before numpy allocates what the header claims
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
    samples = ""
    if array.ndim == len(item_shape) + 1 and array.shape[1:] == item_shape:
        samples = (
            f": it holds {array.shape[0]:,} samples of shape {list(item_shape)}; to send them in turn, use"
            f" data: {{dataset: {spec.data.path}}} instead of generator: npy"
        )
    raise ValueError(
        f"{path.name} has shape {list(array.shape)}; expected {[batch_size, *item_shape]}"
        f" (batch_size x shape) or {list(item_shape)}{samples}"
    )
