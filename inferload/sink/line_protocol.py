"""InfluxDB line protocol: a `Point` and its encoding, as pure functions.

    measurement,tag1=a,tag2=b field1=1.5,field2=3i,text="hi" 1700000000000000000

Tags with empty values and fields that are None or not finite are left out (InfluxDB rejects
them); a point left without any field encodes to None and is not written. Timestamps are integer
nanoseconds since the epoch (the v1 and v2 APIs' default precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

FieldValue = Union[float, int, bool, str, None]


@dataclass(frozen=True)
class Point:
    """One InfluxDB point. `time_ns` is nanoseconds since the epoch."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    time_ns: int = field(default=0)


def seconds_to_ns(seconds: float) -> int:
    return int(round(seconds * 1_000_000_000))


def _escape(text: str, specials: str) -> str:
    text = text.replace("\\", "\\\\") if "\\" in specials else text
    for char in specials.replace("\\", ""):
        text = text.replace(char, "\\" + char)
    return text.replace("\n", "\\n")


def escape_measurement(name: str) -> str:
    return _escape(name, ", ")


def escape_key(text: str) -> str:
    """Tag keys, tag values and field keys."""
    return _escape(text, ",= ")


def encode_field_value(value: FieldValue) -> str | None:
    """The field value as line protocol text, or None when it cannot be written."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    raise TypeError(f"field values must be float, int, bool or str; got {type(value).__name__}")


def encode_point(point: Point) -> str | None:
    """One line (no trailing newline), or None when the point has no writable field."""
    fields = []
    for key, value in point.fields.items():
        text = encode_field_value(value)
        if text is not None:
            fields.append(f"{escape_key(key)}={text}")
    if not fields:
        return None
    head = escape_measurement(point.measurement)
    for key in sorted(point.tags):
        value = point.tags[key]
        if value is None or value == "":
            continue
        head += f",{escape_key(key)}={escape_key(str(value))}"
    return f"{head} {','.join(fields)} {int(point.time_ns)}"


def encode_points(points: Iterable[Point]) -> list[str]:
    """The lines of the points that have something to write."""
    lines = []
    for point in points:
        line = encode_point(point)
        if line is not None:
            lines.append(line)
    return lines
