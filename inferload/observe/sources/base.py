"""The one protocol every metric source follows, and what a failed scrape raises.

A source is a small stateful object: `scrape(now)` reads its endpoint once and returns InfluxDB
points (rates need the previous reading, so the first scrape may return none). Anything that goes
wrong while reading (refused, timeout, bad answer) is raised as `SourceError`; the collector
logs it once, keeps the others going, and tries again next interval.
"""

from __future__ import annotations

from typing import Protocol

from inferload.errors import InferloadError
from inferload.observe.sink.line_protocol import Point


class SourceError(InferloadError):
    """A scrape failed; the message says which endpoint and why."""


class Source(Protocol):
    """A metric source: `name` for messages, `scrape(now)` for points (`now`: epoch seconds)."""

    name: str

    def scrape(self, now: float) -> list[Point]: ...
