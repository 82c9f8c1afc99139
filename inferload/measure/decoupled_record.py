"""Streamed requests' own figures (Triton decoupled models over the gRPC stream), mergeable.

A streamed request is answered by zero or more responses. Its user measures, per request, the
time to its first response, the time between consecutive responses and how many responses came
(`StreamTiming`); the complete-request latency is the request event's own `response_time`, so
every other figure stays what it is. The user hands its `StreamTiming` to the request event in
`context["stream"]`; the run's recorder (`inferload.measure.run_record`) keeps it here, for
successful requests only (like latencies):

- per window and target: time-to-first-response and inter-response histograms (`WindowStore`s,
  so old windows are compressed like the latency windows) and the counts of streamed requests
  and responses;
- per target over the steady state: the same, as `StreamTotals`.

Histograms are HDR (`inferload.measure.hdr.LatencyStats`), so figures from many workers merge
exactly: workers send what they gathered with each report (`drain_to_wire`), the master merges
(`merge_wire`). A request with no response has no time to first response and no gaps; a request
with n responses has n - 1 gaps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.measure.windows import WindowStore

#: the request event's context key that carries a streamed request's `StreamTiming`
STREAM_CONTEXT_KEY = "stream"

WindowKey = tuple[int, str]


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """One streamed request as its user measured it (milliseconds from its send)."""

    responses: int
    first_response_ms: float | None  # None: no response carried data
    gaps_ms: tuple[float, ...] = ()  # between consecutive responses (responses - 1 of them)


@dataclass
class StreamCounts:
    """Streamed requests that succeeded, the responses they got, and the most one request got."""

    requests: int = 0
    responses: int = 0
    max_responses: int = 0

    def add(self, requests: int, responses: int, max_responses: int) -> None:
        self.requests += requests
        self.responses += responses
        self.max_responses = max(self.max_responses, max_responses)

    def to_wire(self) -> list[int]:
        return [self.requests, self.responses, self.max_responses]


@dataclass
class StreamTotals:
    """One target's streamed requests over a phase: both histograms and the counts."""

    first_response: LatencyStats = field(default_factory=LatencyStats)
    inter_response: LatencyStats = field(default_factory=LatencyStats)
    counts: StreamCounts = field(default_factory=StreamCounts)

    def record(self, timing: StreamTiming) -> None:
        if timing.first_response_ms is not None:
            self.first_response.record_success(timing.first_response_ms)
        for gap in timing.gaps_ms:
            self.inter_response.record_success(gap)
        self.counts.add(1, timing.responses, timing.responses)

    def to_wire(self) -> dict[str, Any]:
        return {"first": self.first_response.to_wire(), "gaps": self.inter_response.to_wire(), "n": self.counts.to_wire()}

    def merge_wire(self, data: dict[str, Any]) -> None:
        _merge_stats(data["first"], self.first_response)
        _merge_stats(data["gaps"], self.inter_response)
        self.counts.add(*(int(x) for x in data["n"]))

    def release(self) -> None:
        self.first_response.release()
        self.inter_response.release()


@dataclass(frozen=True)
class StreamWindow:
    """What a window holds of one target's streamed requests (read-only)."""

    first_response: WindowStats
    inter_response: WindowStats
    counts: StreamCounts


@dataclass
class StreamRecord:
    """Streamed requests' figures of a run: per window and target, and steady-state totals."""

    first_windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    gap_windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    count_windows: dict[WindowKey, StreamCounts] = field(default_factory=lambda: defaultdict(StreamCounts))
    steady: dict[str, StreamTotals] = field(default_factory=lambda: defaultdict(StreamTotals))
    #: targets that had at least one streamed request (kept when the record is drained)
    targets: set[str] = field(default_factory=set)

    def record(self, key: WindowKey, timing: StreamTiming, steady: bool) -> None:
        """A successful streamed request that finished in window `key` (`steady`: after the warm-up)."""
        if timing.first_response_ms is not None:
            self.first_windows.writable(key).record_success(timing.first_response_ms)
        if timing.gaps_ms:
            gaps = self.gap_windows.writable(key)
            for gap in timing.gaps_ms:
                gaps.record_success(gap)
        self.count_windows[key].add(1, timing.responses, timing.responses)
        self.targets.add(key[1])
        if steady:
            self.steady[key[1]].record(timing)

    # -- reading --------------------------------------------------------------------------------
    def window(self, key: WindowKey) -> StreamWindow | None:
        """The window's streamed figures; None when no streamed request finished in it."""
        counts = self.count_windows.get(key)
        if counts is None:
            return None
        empty = ClosedStats.empty()
        return StreamWindow(self.first_windows.get(key, empty), self.gap_windows.get(key, empty), counts)

    # -- bounded memory -------------------------------------------------------------------------
    def close_before(self, index: int) -> int:
        """Compress every window older than `index` (see `WindowStore.close_before`)."""
        return self.first_windows.close_before(index) + self.gap_windows.close_before(index)

    @property
    def open_histograms(self) -> int:
        return self.first_windows.open_count + self.gap_windows.open_count

    # -- reports between workers and the master -------------------------------------------------
    def drain_to_wire(self) -> dict[str, Any]:
        """Everything gathered since the last call, as plain (msgpack-friendly) data; leaves it empty."""
        wire = {
            "first": [[index, target, stats.to_wire()] for (index, target), stats in self.first_windows.items()],
            "gaps": [[index, target, stats.to_wire()] for (index, target), stats in self.gap_windows.items()],
            "counts": [[index, target, counts.to_wire()] for (index, target), counts in self.count_windows.items()],
            "steady": {target: totals.to_wire() for target, totals in self.steady.items()},
        }
        for totals in self.steady.values():
            totals.release()
        self.first_windows.clear()
        self.gap_windows.clear()
        self.count_windows.clear()
        self.steady.clear()
        return wire

    def merge_wire(self, wire: dict[str, Any]) -> None:
        for index, target, data in wire.get("first", []):
            _merge_stats(data, self.first_windows.writable((int(index), target)))
        for index, target, data in wire.get("gaps", []):
            _merge_stats(data, self.gap_windows.writable((int(index), target)))
        for index, target, counts in wire.get("counts", []):
            self.count_windows[(int(index), target)].add(*(int(x) for x in counts))
            self.targets.add(target)
        for target, data in wire.get("steady", {}).items():
            self.steady[target].merge_wire(data)


def _merge_stats(data: dict[str, Any], into: LatencyStats) -> None:
    stats = LatencyStats.from_wire(data)
    into.merge(stats)
    stats.release()
