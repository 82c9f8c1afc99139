"""InfluxDB line protocol: a `Point` and its encoding, as pure functions.

    measurement,tag1=a,tag2=b field1=1.5,field2=3i,text="hi" 1700000000000000000

Tags with empty values and fields that are None or not finite are left out (InfluxDB rejects
them); a point left without any field encodes to None and is not written. Timestamps are integer
nanoseconds since the epoch (the v1 and v2 APIs' default precision).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

FieldValue = float | int | bool | str | None


@dataclass(frozen=True)
class Point:
    """One InfluxDB point. `time_ns` is nanoseconds since the epoch."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    time_ns: int = field(default=0)


def seconds_to_ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


_MEASUREMENT_ESCAPES = str.maketrans({",": "\\,", " ": "\\ ", "\n": "\\n"})
_KEY_ESCAPES = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ ", "\n": "\\n"})


def escape_measurement(name: str) -> str:
    return name.translate(_MEASUREMENT_ESCAPES)


def escape_key(text: str) -> str:
    """Tag keys, tag values and field keys."""
    return text.translate(_KEY_ESCAPES)


@lru_cache(maxsize=4096)
def _series_head(measurement: str, tags: tuple[tuple[str, str], ...]) -> str:
    """`measurement,tag=value,...`: the same for every point of a series, so made once."""
    head = escape_measurement(measurement)
    for key, value in tags:
        head += f",{escape_key(key)}={escape_key(value)}"
    return head


@lru_cache(maxsize=4096)
def _field_key(key: str) -> str:
    return escape_key(key) + "="


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
            fields.append(_field_key(key) + text)
    if not fields:
        return None
    tags = tuple(sorted((k, str(v)) for k, v in point.tags.items() if v is not None and v != ""))
    return f"{_series_head(point.measurement, tags)} {','.join(fields)} {int(point.time_ns)}"


def encode_points(points: Iterable[Point]) -> list[str]:
    """The lines of the points that have something to write."""
    lines = []
    for point in points:
        line = encode_point(point)
        if line is not None:
            lines.append(line)
    return lines
