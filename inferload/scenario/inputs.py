"""A target's input tensors and how their values are made: `InputSpec` (name, per-item shape, dtype)
and its `DataSpec` (a generator, or a data set read by `inferload.scenario.datasets`).

These models check their own keys; the checks that need the tensors' rules or files (the data
against the dtype, a shape of -1 without a data set, npy files, data sets, request sizes) are the
target's (`inferload.scenario.targets.Target`), which reports each at its key path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from inferload.scenario.fields import DTypeField, FrozenModel, Number, Token
from inferload.scenario.messages import Check, checks_error, custom_error, describe_value

GENERATORS = ("random", "zeros", "constant", "npy")
Generator = Literal["random", "zeros", "constant", "npy"]
DatasetFormat = Literal["folder", "npy", "npz", "jsonl", "lines"]
_DATASET_KEYS = ("dataset", "format", "pattern", "key")

#: generator names a user may try for "send the samples of this file or folder": a data set does that
_DATASET_WORDS = frozenset(
    {"file", "files", "folder", "dir", "directory", "dataset", "data_set", "jsonl", "npz", "lines", "text"}
)
DATASET_HINT = (
    "to send the samples of a file or folder in turn, use data: {dataset: PATH} (a folder, .npy, .npz, .jsonl or .txt;"
    " see docs/scenarios.md, Data sets)"
)

_GENERATOR_KEYS = {
    "random": ("seed", "low", "high", "length"),
    "zeros": (),
    "constant": ("value",),
    "npy": ("path",),
}
_REQUIRED_KEYS = {"constant": ("value",), "npy": ("path",)}


def _data_shorthand(value: object) -> object:
    return {"generator": value} if isinstance(value, str) else value


class DataSpec(FrozenModel):
    """How an input's values are made. ``data: zeros`` is short for ``data: {generator: zeros}``.

    random: ``seed`` (default 0), ``low``/``high`` (default 0..1 for floats, 0..100 for integers,
    high exclusive for integers), ``length`` (BYTES only: characters per element, default 16).
    zeros: no keys (BYTES: empty byte strings). constant: ``value``. npy: ``path`` (relative to
    the scenario file). A data set instead of a generator: ``dataset`` (a path relative to the
    scenario file), ``format``, ``pattern`` (folders), ``key`` (npz, jsonl); see ``scenario.datasets``.
    """

    generator: Generator = "random"
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(default=None, validate_default=True)
    value: bool | float | int | str | None = None
    path: StrictStr | None = None
    low: Number | None = None
    high: Number | None = None
    length: Annotated[StrictInt, Field(ge=1, le=1000000)] | None = None
    #: a data set feeds the input instead of a generator (made absolute when the scenario's folder is known)
    dataset: StrictStr | None = None
    format: DatasetFormat | None = None
    pattern: Token | None = None
    key: Token | None = None

    @field_validator("generator", mode="before")
    @classmethod
    def _generator_name(cls, value: object) -> object:
        """A data-set word (``generator: file``) gets the hint that a data set is what sends files."""
        if isinstance(value, str) and value not in GENERATORS and value.strip().lower() in _DATASET_WORDS:
            raise checks_error([((), f"expected one of {', '.join(GENERATORS)}; got {describe_value(value)}: {DATASET_HINT}")])
        return value

    @field_validator("seed", mode="before")
    @classmethod
    def _default_seed(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.data.get("generator") == "random":
            return 0
        if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
            raise custom_error(f"expected a non-negative integer; got {describe_value(value)}")
        return value

    @field_validator("value", mode="before")
    @classmethod
    def _check_value(cls, value: object) -> object:
        if value is None or isinstance(value, (str, bool)):  # true/false: BOOL inputs (checked against the dtype)
            return value
        if isinstance(value, list):
            raise custom_error(
                f"expected one number or string, every element's value; got {describe_value(value)}:"
                " a list of values per request is a data set: a .jsonl file with one list per line, named in data.dataset"
            )
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise custom_error(f"expected a number or a string; got {describe_value(value)}")
        return value

    @field_validator("dataset")
    @classmethod
    def _dataset_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise custom_error("expected the path of a data set (a folder, .npy, .npz, .jsonl or .txt file); got ''")
        base_dir = (info.context or {}).get("base_dir")
        return str((Path(base_dir) / value).resolve()) if base_dir is not None else value

    @model_validator(mode="after")
    def _check_keys(self) -> DataSpec:
        if self.dataset is not None or self.model_fields_set & set(_DATASET_KEYS[1:]):
            return self._check_dataset_keys()
        allowed = _GENERATOR_KEYS[self.generator]
        checks: list[Check] = []
        for key in sorted(self.model_fields_set - {"generator"}):
            if getattr(self, key) is not None and key not in allowed:
                takes = ", ".join(allowed) if allowed else "no other keys"
                checks.append(((key,), f"does not apply to generator '{self.generator}' (it takes {takes})"))
        for key in _REQUIRED_KEYS.get(self.generator, ()):
            if getattr(self, key) is None:
                checks.append(((key,), f"required key is missing (generator '{self.generator}' needs it)"))
        if self.low is not None and self.high is not None and self.high <= self.low:
            checks.append((("high",), f"must be greater than low ({self.low:g}); got {self.high:g}"))
        if checks:
            raise checks_error(checks)
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A data set's dump leaves out the generator's defaults, so it validates again as a data set."""
        data: dict[str, Any] = handler(self)
        if self.dataset is not None:
            data.pop("generator", None)
            data.pop("seed", None)
        return data

    def _check_dataset_keys(self) -> DataSpec:
        checks: list[Check] = []
        if self.dataset is None:
            checks.append((("dataset",), "required key is missing (format, pattern and key describe a data set)"))
        for key in sorted(self.model_fields_set - set(_DATASET_KEYS)):
            if getattr(self, key) is not None:
                checks.append(((key,), "does not apply to a data set (it takes dataset, format, pattern, key)"))
        if self.pattern is not None and self.format not in (None, "folder"):
            checks.append((("pattern",), f"only applies to folder data sets; this one is {self.format}"))
        if self.key is not None and self.format not in (None, "npz", "jsonl"):
            checks.append((("key",), f"only applies to npz and jsonl data sets; this one is {self.format}"))
        if checks:
            raise checks_error(checks)
        return self


def _dimension(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0 and value != -1:
        raise custom_error(f"must be greater than 0; got {value} (or -1: any size, given by a data set)")
    return value


class InputSpec(FrozenModel):
    """One input tensor: ``shape`` is per item, without the batch dimension."""

    name: Token
    #: -1 (any size) only with a data set: each request then has its samples' own size
    shape: tuple[Annotated[StrictInt, BeforeValidator(_dimension)], ...] = Field(min_length=1)
    dtype: DTypeField
    data: Annotated[DataSpec, BeforeValidator(_data_shorthand)] = Field(
        default_factory=lambda: DataSpec(generator="random", seed=0)
    )

    @model_validator(mode="after")
    def _any_size_needs_a_data_set(self) -> InputSpec:
        if -1 in self.shape and self.data.dataset is None:
            needs = "-1 (any size) needs a data set that gives each sample's size"
            if self.data.generator == "npy" and self.data.path:
                needs += f": use data: {{dataset: {self.data.path}}} instead of generator: npy"
            else:
                needs += " (data: {dataset: PATH})"
            raise checks_error([(("shape",), needs)])
        return self
