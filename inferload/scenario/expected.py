"""``response_check: expected``: the values a target's answers must have, read from a file.

``ExpectedSpec`` is the ``expected`` key (``path``, ``atol``, ``rtol``); ``read_expected`` reads the
file into ``ExpectedValues``, once per process (``inferload.users.expected`` compares answers with
it). Formats, by the file's suffix:

- ``.npz`` (Triton): one array per output name (``numpy.savez``; no pickled objects: BYTES outputs as
  ``S``/``U`` arrays).
- ``.json`` on a Triton target: an object ``{"OUTPUT": nested list, ...}`` (strings for BYTES); on a
  TorchServe target: the answer's JSON itself, whatever its shape.
- ``.jsonl`` (TorchServe, with a data set): one JSON answer per line, line ``i`` for sample ``i``.
- any other suffix (TorchServe, fixed payload): the answer's exact bytes.

With a data set (the target's inputs rotate over samples) each Triton array's first axis is the
sample index (``[N, *item output shape]``): a request carrying samples ``s0..sB-1`` must answer
``array[[s0..sB-1]]``. Without one, each array is the whole answer (batch dimension included when
the model batches).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, StrictStr

from inferload.scenario.fields import FrozenModel, Number
from inferload.scenario.input_files import check_npz_members, not_regular_problem, read_limited
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.messages import Check

#: the largest expected file read (each process keeps one decoded copy per target)
MAX_EXPECTED_BYTES = 256 * 1024 * 1024
TRITON_FORMATS = (".npz", ".json")
ExpectedFormat = Literal["arrays", "json", "jsonl", "raw"]


def _path_shorthand(value: object) -> object:
    return {"path": value} if isinstance(value, str) else value


class ExpectedSpec(FrozenModel):
    """Where the expected answers are, and how close a number must be: ``|got - want| <= atol + rtol * |want|``."""

    path: StrictStr
    atol: Annotated[Number, Field(ge=0)] = 1e-8
    rtol: Annotated[Number, Field(ge=0)] = 1e-5


ExpectedField = Annotated[ExpectedSpec | None, BeforeValidator(_path_shorthand)]


@dataclass(frozen=True)
class ExpectedValues:
    """An expected file, decoded: ``arrays`` (Triton), ``answers`` (TorchServe JSON; one per sample
    for .jsonl) or ``raw`` (TorchServe bytes)."""

    format: ExpectedFormat
    path: Path
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    answers: tuple[Any, ...] = ()
    raw: bytes = b""


def _json_array(name: str, value: object, path: Path) -> np.ndarray:
    try:
        array = np.asarray(value)
    except ValueError:
        raise ValueError(f"{path}: output {name!r} is not a rectangular nested list") from None
    if array.dtype.kind == "U":
        return np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(array) if array.size else array.astype(object)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{path}: output {name!r} must hold numbers, booleans or strings (a rectangular nested list)")
    return array


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        check_npz_members(path, MAX_EXPECTED_BYTES)  # a header that claims more than the file holds is refused
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz file (numpy.savez, no pickled objects): {exc}") from None
    for name, array in arrays.items():
        if array.dtype.kind in "SU":
            arrays[name] = array.astype(object) if array.dtype.kind == "S" else _json_array(name, array.tolist(), path)
        elif array.dtype.kind not in "biuf":
            raise ValueError(f"{path}: output {name!r} has dtype {array.dtype}; expected numbers, booleans or strings")
    return arrays


def read_expected(path: Path, kind: str) -> ExpectedValues:
    """The expected file for a target of ``kind``; ValueError (naming the file) when it cannot be used."""
    problem = not_regular_problem(path)  # a FIFO, a device, a folder
    if problem:
        raise ValueError(problem)
    size = path.stat().st_size
    if size > MAX_EXPECTED_BYTES:
        raise ValueError(f"{path} is {size:,} bytes; at most {MAX_EXPECTED_BYTES:,} are read")
    suffix = path.suffix.lower()
    record = SERVER_KINDS[kind]
    triton = record.v2_tensors or record.generative  # (a generative target refuses expected: said at its key)
    if triton and suffix not in TRITON_FORMATS:
        raise ValueError(f"{path}: a Triton target's expected outputs are an .npz or .json file of output name -> values")
    if suffix == ".npz":
        if not triton:
            raise ValueError(f"{path}: a {record.label} answer is compared as JSON (.json, .jsonl) or as raw bytes, not .npz")
        return ExpectedValues("arrays", path, arrays=_read_npz(path))
    data = read_limited(path, MAX_EXPECTED_BYTES)
    if suffix == ".json":
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"{path} is not JSON: {exc}") from None
        except RecursionError:
            raise ValueError(f"{path} is not JSON this program can read: nested too deeply") from None
        if not triton:
            return ExpectedValues("json", path, answers=(value,))
        if not isinstance(value, dict) or not value:
            raise ValueError(f"{path}: expected a JSON object of output name -> nested list of values")
        return ExpectedValues("arrays", path, arrays={str(k): _json_array(str(k), v, path) for k, v in value.items()})
    if suffix == ".jsonl":
        answers = []
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                answers.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"{path}: line {number} is not JSON: {exc}") from None
            except RecursionError:
                raise ValueError(f"{path}: line {number} is nested too deeply") from None
        if not answers:
            raise ValueError(f"{path} holds no answer (one JSON answer per line)")
        return ExpectedValues("jsonl", path, answers=tuple(answers))
    return ExpectedValues("raw", path, raw=data)


def uses_dataset(inputs: Any) -> bool:
    """Whether a target's inputs rotate over a data set (then answers are expected per sample)."""
    return any(getattr(getattr(spec, "data", None), "dataset", None) is not None for spec in inputs or ())


def expected_problems(values: ExpectedValues, outputs: tuple[str, ...], dataset: bool) -> list[Check]:
    """What does not fit the target in a readable expected file (paths below ``expected``)."""
    checks: list[Check] = []
    name = values.path.name
    if values.format == "arrays" and outputs:
        unknown = [key for key in values.arrays if key not in outputs]
        for key in unknown:
            checks.append(
                (("path",), f"{name} has output {key!r}, which this target does not request (outputs: {', '.join(outputs)})")
            )
    if values.format == "jsonl" and not dataset and len(values.answers) != 1:
        checks.append((("path",), f"{name} has {len(values.answers)} answers; without a data set give one (a .json file)"))
    if dataset and values.format in ("json", "raw"):
        checks.append((("path",), f"{name} is one answer; a target with a data set needs one answer per sample (.jsonl)"))
    return checks


def check_expected(spec: ExpectedSpec, kind: str, outputs: tuple[str, ...], inputs: Any, base_dir: Path) -> list[Check]:
    """Every problem of the expected file of a target (read now); empty when it fits."""
    try:
        values = read_expected(base_dir / spec.path, kind)
    except ValueError as exc:
        return [(("path",), str(exc))]
    return expected_problems(values, outputs, uses_dataset(inputs))


__all__ = [
    "MAX_EXPECTED_BYTES",
    "ExpectedField",
    "ExpectedSpec",
    "ExpectedValues",
    "check_expected",
    "expected_problems",
    "read_expected",
    "uses_dataset",
]
