"""How scenario problems are worded: values as YAML shows them, and the errors validators raise.

A validator raises ``custom_error(message)`` for one problem at the key being validated, or
``checks_error([(sub_path, message), ...])`` for several problems at keys below it; the loader
turns both into ``Problem`` lines (``file: key.path: message``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from pydantic_core import PydanticCustomError

# Durations in scenario files: ``"90s"``, ``"2m"``, ``"1m30s"``, ``"500ms"``, ``"1h"`` or a number.
#
# A plain number (or a numeric string such as ``"30"``) counts seconds. Units are ``h``, ``m``, ``s``
# and ``ms``, each at most once and from the largest to the smallest, with optional decimals
# (``"1.5s"``). Parsing returns float seconds; whether a value is in range (``> 0`` ...) is for the
# caller to decide.
DURATION_HINT = "a duration like '30s', '2m' or '1m30s'"

_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_UNIT_SECONDS = (("h", Decimal(3600)), ("m", Decimal(60)), ("s", Decimal(1)), ("ms", Decimal("0.001")))


def _duration_pattern() -> re.Pattern[str]:
    return re.compile(rf"^(?:{_NUMBER}h)?(?:{_NUMBER}m(?!s))?(?:{_NUMBER}s)?(?:{_NUMBER}ms)?$")


def parse_duration(value: object) -> float:
    """Return ``value`` in seconds, or raise ``ValueError`` saying what a duration looks like.

    >>> parse_duration("1m30s"), parse_duration("500ms"), parse_duration(2)
    (90.0, 0.5, 2.0)
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected {DURATION_HINT}")
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"expected {DURATION_HINT}")
        return seconds
    if not isinstance(value, str):
        raise ValueError(f"expected {DURATION_HINT}")
    text = value.strip().replace(" ", "")
    try:
        return float(Decimal(text)) if re.fullmatch(_NUMBER, text) else _parse_units(text)
    except InvalidOperation as error:  # pragma: no cover - the regexes only let digits through
        raise ValueError(f"expected {DURATION_HINT}") from error


def _parse_units(text: str) -> float:
    match = _duration_pattern().match(text)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"expected {DURATION_HINT}")
    total = Decimal(0)
    for amount, (_, unit_seconds) in zip(match.groups(), _UNIT_SECONDS, strict=False):
        if amount is not None:
            total += Decimal(amount) * unit_seconds
    return float(total)


def format_duration(seconds: float) -> str | float:
    """The shortest ``"1m30s"``-style text that parses back to exactly ``seconds``.

    Falls back to the number itself when no millisecond-exact text exists.
    """
    if not math.isfinite(seconds) or seconds < 0:
        return seconds
    millis = round(Decimal(repr(seconds)) * 1000)
    if float(Decimal(millis) / 1000) != seconds:
        return seconds
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


#: the error type of ``checks_error``; its context holds ``checks``
CHECKS_ERROR = "inferload_checks"
#: the error type of ``custom_error``; its message is the problem's message
CUSTOM_ERROR = "inferload"

#: (sub-path relative to the model or field being validated, message)
Check = tuple[tuple[str | int, ...], str]

Loc = tuple[str | int, ...]

#: what YAML 1.1 (PyYAML) reads as text although it looks like a number: 1e10, 1.5e3, 2E-3 without a
#: decimal point or without a signed exponent (1.0e+10 is a number)
_SCIENTIFIC_TEXT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def describe_value(value: object) -> str:
    """A short YAML-ish rendering of a value for messages: ``'FP64'``, ``12``, ``null``, ``a mapping``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return repr(text)
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        if len(value) <= 8 and all(_is_scalar(item) for item in value):
            return "[" + ", ".join(describe_value(item) for item in value) + "]"
        return "a list"
    return f"a {type(value).__name__}"


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def custom_error(message: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``message``."""
    return PydanticCustomError(CUSTOM_ERROR, message.replace("{", "(").replace("}", ")"))


def checks_error(checks: list[Check]) -> PydanticCustomError:
    """One validation error carrying several problems, each at its own sub-path."""
    summary = "; ".join(f"{'.'.join(str(p) for p in path) or '.'}: {msg}" for path, msg in checks)
    return PydanticCustomError(CHECKS_ERROR, summary.replace("{", "(").replace("}", ")"), {"checks": tuple(checks)})


def fmt_seconds(seconds: float) -> str:
    """``90.0`` → ``'1m30s'``; a value with no millisecond-exact text → ``'1e-06s'``."""
    text = format_duration(seconds)
    return text if isinstance(text, str) else f"{text}s"


def format_key_path(loc: Loc) -> str:
    """``('targets', 0, 'inputs', 1, 'dtype')`` → ``targets[0].inputs[1].dtype``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def scientific_text_hint(value: object, integer: bool = False) -> str | None:
    """For text YAML read from ``1e10``: how to write it as a number; None for anything else.

    PyYAML follows YAML 1.1, where a number with an exponent needs a decimal point and a signed
    exponent (``1.0e+10``); ``1e10`` stays the text ``'1e10'``.
    """
    if not isinstance(value, str) or not _SCIENTIFIC_TEXT_RE.fullmatch(value.strip()):
        return None
    text = value.strip()
    if integer:
        number = float(text)
        if number.is_integer() and abs(number) < 1e18:
            return f"expected an integer; YAML reads {text} as text: write it out ({int(number)})"
        return f"expected an integer; got {describe_value(value)}"
    mantissa, exponent = re.split("[eE]", text)
    if "." not in mantissa:
        mantissa += ".0"
    elif mantissa.endswith("."):
        mantissa += "0"
    if exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"a number written as {text} needs a decimal point and a signed exponent in YAML ({mantissa}e{exponent})"
