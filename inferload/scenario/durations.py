"""Durations in scenario files: ``"90s"``, ``"2m"``, ``"1m30s"``, ``"500ms"``, ``"1h"`` or a number.

A plain number (or a numeric string such as ``"30"``) counts seconds. Units are ``h``, ``m``, ``s``
and ``ms``, each at most once and from the largest to the smallest, with optional decimals
(``"1.5s"``). Parsing returns float seconds; whether a value is in range (``> 0`` ...) is for the
caller to decide.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

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
