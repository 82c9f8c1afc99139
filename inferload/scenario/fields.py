"""Field types of the scenario models: names, tokens, versions, dtypes, durations and numbers.

Each is an ``Annotated`` type whose validator raises a ``custom_error`` saying what was expected
and what was found. ``FrozenModel`` is the base of every scenario model (frozen, unknown keys are
errors); ``filled_in`` makes a default that validation computes from the keys before it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from inferload.scenario.limits import MAX_DURATION_S, MAX_NAME_CHARS
from inferload.scenario.messages import (
    DURATION_HINT,
    custom_error,
    describe_value,
    fmt_seconds,
    parse_duration,
    scientific_text_hint,
)

#: every KServe v2 datatype Triton accepts (the first five were inferload's only ones before)
DType = Literal[
    "FP32", "FP16", "INT32", "INT64", "BYTES",
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "FP64", "BF16",
]  # fmt: skip
DTYPES: tuple[str, ...] = get_args(DType)

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_VERSION_RE = re.compile(r"[A-Za-z0-9_.-]+")


class FrozenModel(BaseModel):
    """The base of every scenario model: immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise custom_error(f"expected a name of letters, digits, '_', '.' or '-'; got {describe_value(value)}")
    if len(value) > MAX_NAME_CHARS:
        raise custom_error(
            f"expected a name of at most {MAX_NAME_CHARS} characters; got {len(value):,} ({describe_value(value)})"
        )
    return value


def _token(value: object) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise custom_error(f"expected a non-empty string; got {describe_value(value)}")
    return value


def _duration(value: object) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError:
        hint = scientific_text_hint(value)
        raise custom_error(hint or f"expected {DURATION_HINT}; got {describe_value(value)}") from None
    if seconds > MAX_DURATION_S:
        raise custom_error(f"expected at most {fmt_seconds(MAX_DURATION_S)} (30 days); got {describe_value(value)}")
    return seconds


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise custom_error(scientific_text_hint(value) or f"expected a number; got {describe_value(value)}")
    if not math.isfinite(value):
        raise custom_error(f"expected a finite number; got {describe_value(value)}")
    return float(value)


def _dtype(value: object) -> str:
    if isinstance(value, str) and value.upper() in DTYPES:
        return value.upper()
    raise custom_error(f"expected one of {', '.join(DTYPES)}; got {describe_value(value)}")


def _version(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _VERSION_RE.fullmatch(value):
        return value
    raise custom_error(f"expected a model version like 1 or '1.0'; got {describe_value(value)}")


Name = Annotated[str, BeforeValidator(_name)]
Token = Annotated[str, BeforeValidator(_token)]
Seconds = Annotated[float, BeforeValidator(_duration)]
Number = Annotated[float, BeforeValidator(_number)]
Version = Annotated[str | None, BeforeValidator(_version)]
DTypeField = Annotated[DType, BeforeValidator(_dtype)]


def at_least_seconds(minimum: float) -> Callable[[float], float]:
    """An after-validator for a duration: at least ``minimum`` seconds (after its ``> 0`` check)."""

    def check(value: float) -> float:
        if value < minimum:
            raise custom_error(f"must be at least {fmt_seconds(minimum)}; got {fmt_seconds(value)}")
        return value

    return check


def default_from(rule: Callable[[dict[str, Any]], object]) -> BeforeValidator:
    """A before-validator that fills a missing (None) value from the keys validated before it."""

    def fill(value: object, info: ValidationInfo) -> object:
        return rule(info.data) if value is None else value

    return BeforeValidator(fill)


def filled_in() -> Any:
    """The default of a field whose value ``default_from`` computes (validated like a given value)."""
    return Field(default=None, validate_default=True)


def repeats(names: Iterable[str]) -> list[tuple[int, str, int]]:
    """``(index, name, first index)`` for every name that came before in ``names``."""
    first_index: dict[str, int] = {}
    found: list[tuple[int, str, int]] = []
    for index, name in enumerate(names):
        if name in first_index:
            found.append((index, name, first_index[name]))
        else:
            first_index[name] = index
    return found
