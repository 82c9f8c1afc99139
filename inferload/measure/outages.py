"""Outages: streaks of refused connections, found from per-window refusal counts.

Users report each refused attempt (a `ConnectionRefused` failure); the run record keeps, per
window and target, how many there were and when the first and the last happened. An outage runs
from the first refusal of a streak to its last: a streak goes on through windows in which nothing
succeeded (the users back off, so a window may hold no attempt at all) and ends at the first
window with successes and no refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from inferload.measure.hdr import WindowStats


@dataclass(slots=True)
class RefusedWindow:
    """Refused attempts in one window of one target: how many, first and last (wall clock, s)."""

    count: int
    first: float
    last: float

    def add(self, count: int, first: float, last: float) -> None:
        self.count += count
        self.first = min(self.first, first)
        self.last = max(self.last, last)

    def to_wire(self) -> list[float]:
        return [self.count, self.first, self.last]


@dataclass(frozen=True)
class Outage:
    """A streak of refused connections to one target."""

    start: float  # wall clock, seconds: the streak's first refusal
    end: float  # its last refusal
    failures: int  # refused attempts in the streak

    def as_dict(self) -> dict[str, Any]:
        """`{"start": ISO-8601, "end": ISO-8601, "failures": n}` (summary.json's form)."""
        return {"start": _iso(self.start), "end": _iso(self.end), "failures": self.failures}


def find_outages(
    refused: Mapping[tuple[int, str], RefusedWindow], windows: Mapping[tuple[int, str], WindowStats], target: str
) -> list[Outage]:
    """The target's outages, oldest first."""
    indices = sorted({i for i, t in refused if t == target} | {i for i, t in windows if t == target})
    found: list[Outage] = []
    current: Outage | None = None
    for index in indices:
        streak = refused.get((index, target))
        if streak is not None:
            if current is None:
                current = Outage(streak.first, streak.last, streak.count)
            else:
                current = Outage(min(current.start, streak.first), max(current.end, streak.last), current.failures + streak.count)
            continue
        stats = windows.get((index, target))
        if current is not None and stats is not None and stats.successes:
            found.append(current)
            current = None
    if current is not None:
        found.append(current)
    return found


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()
