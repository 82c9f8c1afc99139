"""Per-window latency statistics that keep memory bounded over a run of any length.

A `WindowStore` maps a key whose first item is the window index (`(index, target)`, or
`(index, target, worker)`) to that window's statistics. Open windows hold a full `LatencyStats`
(~184 KB each); `close_before(index)` turns every older window into a `ClosedStats` (its
compressed histogram and figures, a few hundred bytes). Data that arrives for a closed window
reopens it (the histogram is decoded), so a late worker report still merges exactly.

Reading is a read-only `Mapping`: `store[key]`, `.get`, `.items()`; the values have
`requests`, `failures`, `latency_ms()` and `to_wire()` whether open or closed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats

KeyT = TypeVar("KeyT", bound=tuple)


class WindowStore(Mapping[KeyT, WindowStats], Generic[KeyT]):
    """Open windows as full histograms, closed ones compressed; keys start with the window index."""

    def __init__(self) -> None:
        self._open: dict[KeyT, LatencyStats] = {}
        self._closed: dict[KeyT, ClosedStats] = {}

    # -- reading ------------------------------------------------------------------------------
    def __getitem__(self, key: KeyT) -> WindowStats:
        stats = self._open.get(key)
        if stats is not None:
            return stats
        return self._closed[key]

    def __iter__(self) -> Iterator[KeyT]:
        yield from list(self._open)
        yield from list(self._closed)

    def __len__(self) -> int:
        return len(self._open) + len(self._closed)

    def __contains__(self, key: object) -> bool:
        return key in self._open or key in self._closed

    @property
    def open_count(self) -> int:
        """How many windows hold a full histogram now."""
        return len(self._open)

    @property
    def closed_count(self) -> int:
        return len(self._closed)

    # -- writing ------------------------------------------------------------------------------
    def writable(self, key: KeyT) -> LatencyStats:
        """The window's full statistics to record into: created, or reopened when closed."""
        stats = self._open.get(key)
        if stats is None:
            closed = self._closed.pop(key, None)
            stats = closed.reopen() if closed is not None else LatencyStats()
            self._open[key] = stats
        return stats

    def merge(self, key: KeyT, stats: LatencyStats) -> None:
        self.writable(key).merge(stats)

    def close_before(self, index: int) -> int:
        """Close every open window whose index is below `index`; how many were closed."""
        old = [key for key in self._open if key[0] < index]
        for key in old:
            stats = self._open.pop(key)
            self._closed[key] = stats.close()
            stats.release()
        return len(old)

    def clear(self) -> None:
        for stats in self._open.values():
            stats.release()
        self._open.clear()
        self._closed.clear()
