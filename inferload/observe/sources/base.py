"""The one protocol every metric source follows.

A source is a small stateful object: `scrape(now)` reads its endpoint once and returns InfluxDB
points (rates need the previous reading, so the first scrape may return none). Anything that goes
wrong while reading (refused, timeout, bad answer) is raised as `ScrapeError`
(inferload.errors); the collector logs it once, keeps the others going, and tries again next
interval.
"""

from __future__ import annotations

from typing import Protocol

from inferload.observe.sink.line_protocol import Point


class Source(Protocol):
    """A metric source: `name` for messages, `scrape(now)` for points (`now`: epoch seconds)."""

    name: str

    def scrape(self, now: float) -> list[Point]: ...
