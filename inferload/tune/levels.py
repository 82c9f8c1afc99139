"""The load levels a sweep steps through: a list, a linear range or a geometric range.

``1,2,4,8``: these levels. ``10:100:+10``: 10, 20, ... 100 (linear). ``1:64:x2``: 1, 2, 4, ... 64
(geometric). The end is included when a step lands on it; a range never goes past it.
"""

from __future__ import annotations

import itertools
import math

#: more steps than this is a typo, not a sweep
MAX_LEVELS = 200


class LevelsError(ValueError):
    """A level list that cannot be read; the message says what was wrong and what was expected."""


def parse_levels(text: str, integer: bool) -> list[float]:
    """The levels of `text` in order; ``integer``: users (whole numbers), else rates (req/s)."""
    text = text.strip()
    if not text:
        raise LevelsError("expected levels like 1,2,4 or 10:100:+10 or 1:64:x2; got an empty string")
    levels = _range(text) if ":" in text else [_number(part, text) for part in text.split(",")]
    if integer:
        for level in levels:
            if not float(level).is_integer():
                raise LevelsError(f"users must be whole numbers; {text!r} gives {level:g}")
    if any(level <= 0 for level in levels):
        raise LevelsError(f"every level must be above 0; {text!r} gives {min(levels):g}")
    if len(levels) > MAX_LEVELS:
        raise LevelsError(f"{text!r} gives {len(levels)} levels; at most {MAX_LEVELS} are allowed")
    if any(b <= a for a, b in itertools.pairwise(levels)):
        raise LevelsError(f"levels must increase; got {text!r}")
    return [float(level) for level in levels]


def _number(part: str, text: str) -> float:
    try:
        value = float(part)
    except ValueError:
        raise LevelsError(f"{part.strip()!r} in {text!r} is not a number") from None
    if not math.isfinite(value):
        raise LevelsError(f"{part.strip()!r} in {text!r} is not a finite number")
    return value


def _range(text: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise LevelsError(f"a range is START:END:+STEP or START:END:xFACTOR; got {text!r}")
    start, end = _number(parts[0], text), _number(parts[1], text)
    step = parts[2].strip()
    if end < start:
        raise LevelsError(f"the end ({end:g}) is below the start ({start:g}) in {text!r}")
    if step[:1] in ("+", "") or step[:1].isdigit():
        increment = _number(step.lstrip("+"), text)
        if increment <= 0:
            raise LevelsError(f"the step must be above 0 in {text!r}")
        count = math.floor((end - start) / increment + 1e-9) + 1
        return [round(start + k * increment, 9) for k in range(min(count, MAX_LEVELS + 1))]
    if step[:1] in ("x", "*"):
        factor = _number(step[1:], text)
        if factor <= 1:
            raise LevelsError(f"the factor must be above 1 in {text!r}")
        if start <= 0:
            raise LevelsError(f"a geometric range starts above 0; got {text!r}")
        levels: list[float] = []
        level = start
        while level <= end * (1 + 1e-9) and len(levels) <= MAX_LEVELS:
            levels.append(round(level, 9))
            level *= factor
        return levels
    raise LevelsError(f"the step of {text!r} must be +N (linear) or xF (geometric); got {step!r}")
