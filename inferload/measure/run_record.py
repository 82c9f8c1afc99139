"""Records every request into per-target, per-window latency statistics, on every Locust process.

Windows are aligned to wall-clock time (`floor(t / window)`), so windows from many workers line
up and merge exactly on the master. Requests finished before the warm-up ends go to the
warm-up figures; the steady-state totals exclude them. Workers send what they gathered since
their last report with each Locust report; the master (or a local runner) holds the run's whole
record and turns it into results when the run stops.

Memory stays bounded over a long run: once the newest window seen starts `close_after_s` after
a window's end (workers report every ~3 s), that window is closed (its histogram compressed,
see `inferload.measure.windows`); a late report into it reopens it and merges exactly.
Refused connections are counted per window too (`refused_windows`), for the run's outages.
"""

from __future__ import annotations

import copy
import logging
import math
from array import array
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from inferload.measure.decoupled_record import StreamRecord, StreamTiming
from inferload.measure.generation_record import GenerationRecord
from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.measure.windows import WindowStore


# Burstiness: the coefficient of variation (sd / mean) of the gaps between consecutive arrivals.
#
# `GapStats` takes times in order and keeps Welford's running mean and variance of their gaps
# (constant memory). A Poisson process has CV 1, evenly spaced arrivals 0, bursty traffic above 1.
@dataclass
class GapStats:
    """The gaps between times given in order: how many, their mean and sum of squared deviations."""

    gaps: int = 0
    mean_s: float = 0.0
    m2: float = 0.0
    last_t: float | None = None

    def add(self, t: float) -> None:
        """The next time (not before the last one)."""
        if self.last_t is not None:
            gap = t - self.last_t
            self.gaps += 1
            delta = gap - self.mean_s
            self.mean_s += delta / self.gaps
            self.m2 += delta * (gap - self.mean_s)
        self.last_t = t

    @property
    def times(self) -> int:
        """How many times were given."""
        return 0 if self.last_t is None else self.gaps + 1

    @property
    def cv(self) -> float | None:
        """sd / mean of the gaps (sample sd); None with fewer than two gaps or a mean of 0."""
        if self.gaps < 2 or self.mean_s <= 0:
            return None
        return math.sqrt(self.m2 / (self.gaps - 1)) / self.mean_s

    def to_wire(self) -> list[Any]:
        return [self.gaps, self.mean_s, self.m2, self.last_t]

    @classmethod
    def from_wire(cls, data: list[Any]) -> GapStats:
        gaps, mean_s, m2, last_t = data
        return cls(int(gaps), float(mean_s), float(m2), None if last_t is None else float(last_t))


def gap_cv(times: list[float]) -> float | None:
    """The CV of the gaps between ``times`` (sorted here)."""
    stats = GapStats()
    for t in sorted(times):
        stats.add(t)
    return stats.cv


# Open-loop requests' actual send times, merged over every process, as each target's sent gaps.
#
# The burstiness a run really sent is the CV of the gaps between its requests' send times, all
# workers together (each worker sends every n-th arrival: its own gaps say nothing of the whole).
# So times are kept per (window, target) until the window closes (when the run record closes its
# histograms: `RunRecord._close_old_windows`, some seconds after the window's end, once every
# worker's report for it is in), then sorted and added in time order to the target's `GapStats`,
# counting only the steady state's. A time for a window already folded (a report later than that)
# is counted in ``late`` and left out. Memory is bounded by the windows still open. Workers drain
# their times with every report (about every 3 s, well before a window closes).
@dataclass
class SendTimes:
    open: dict[WindowKey, array[float]] = field(default_factory=dict)
    gaps: dict[str, GapStats] = field(default_factory=lambda: defaultdict(GapStats))
    #: windows below this index are folded into `gaps`
    folded_before: int | None = None
    #: times that came for a window already folded (left out of `gaps`)
    late: int = 0

    def add(self, index: int, target: str, t: float) -> None:
        if self.folded_before is not None and index < self.folded_before:
            self.late += 1
            return
        times = self.open.get((index, target))
        if times is None:
            times = self.open[(index, target)] = array("d")
        times.append(t)

    def fold_before(self, index: int, steady_from: float | None) -> None:
        """Fold every window below ``index`` into the gaps, in time order (times before ``steady_from`` left out)."""
        for key in sorted(key for key in self.open if key[0] < index):
            _fold(self.gaps[key[1]], self.open.pop(key), steady_from)
        self.folded_before = index if self.folded_before is None else max(self.folded_before, index)

    def figures(self, target: str, steady_from: float | None) -> GapStats:
        """The target's gaps so far, windows still open included (nothing is folded here)."""
        stats = copy.copy(self.gaps.get(target) or GapStats())
        for key in sorted(key for key in self.open if key[1] == target):
            _fold(stats, self.open[key], steady_from)
        return stats

    def drain_to_wire(self) -> list[list[Any]]:
        """Every open window's times as ``[index, target, float64 bytes]``; leaves them empty."""
        wire = [[index, target, times.tobytes()] for (index, target), times in self.open.items()]
        self.open.clear()
        return wire

    def merge_wire(self, wire: list[list[Any]]) -> None:
        for index, target, raw in wire:
            times = array("d")
            times.frombytes(bytes(raw))
            if self.folded_before is not None and int(index) < self.folded_before:
                self.late += len(times)
                continue
            mine = self.open.get((int(index), target))
            if mine is None:
                self.open[(int(index), target)] = times
            else:
                mine.extend(times)


def _fold(stats: GapStats, times: array[float], steady_from: float | None) -> None:
    for t in sorted(times):
        if steady_from is None or t >= steady_from:
            stats.add(t)


# Outages: streaks of refused connections, found from per-window refusal counts.
#
# Users report each refused attempt (a `ConnectionRefused` failure); the run record keeps, per
# window and target, how many there were and when the first and the last happened. An outage runs
# from the first refusal of a streak to its last: a streak goes on through windows in which nothing
# succeeded (the users back off, so a window may hold no attempt at all) and ends at the first
# window with successes and no refusal.
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


logger = logging.getLogger(__name__)

CLOSE_AFTER_S = 6.0  # two worker report intervals: later figures still merge, only slower

WindowKey = tuple[int, str]


@dataclass
class RunRecord:
    """What a run measured: the figures a summary and the per-window series are made from."""

    window_s: float
    warmup_s: float
    started_at: float | None = None  # wall clock, seconds
    stopped_at: float | None = None
    windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    steady: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    warmup: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    users_by_window: dict[int, int] = field(default_factory=dict)
    # open-loop only: send lag (intended -> actual send) and arrivals [intended, unsent]
    lag_windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    lag_steady: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    arrival_windows: dict[WindowKey, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    arrivals_steady: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    #: open loop: the requests' actual send times, merged over processes into each target's sent gaps
    send_times: SendTimes = field(default_factory=SendTimes)
    #: open loop: the gaps of the whole run's schedule per target over the steady state, as the arrival
    #: law drew it (every process draws the whole schedule: a worker's figures are the run's)
    schedule_gaps: dict[str, GapStats] = field(default_factory=lambda: defaultdict(GapStats))
    # on the master: each worker's own windows too, by worker id (for the per-worker stream)
    worker_windows: WindowStore[tuple[int, str, str]] = field(default_factory=WindowStore)
    # the server's own mean request duration per window (master or local only)
    server_request_ms: dict[WindowKey, float] = field(default_factory=dict)
    #: the server's gauges as each window closed (master or local only): requests waiting, running, the
    #: KV cache's share in use (0 to 1; an LLM server's), each None where the server reports no such gauge
    server_gauges: dict[WindowKey, tuple[float | None, float | None, float | None]] = field(default_factory=dict)
    # refused connections per window: how many, first and last (the run's outages)
    refused_windows: dict[WindowKey, RefusedWindow] = field(default_factory=dict)
    #: streamed requests (Triton decoupled models): time to first response, between responses, counts
    streams: StreamRecord = field(default_factory=StreamRecord)
    #: generations (the generative kinds, from the engine): TTST, TPOT, token-weighted ITL, output tokens
    generations: GenerationRecord = field(default_factory=GenerationRecord)
    #: the scenario's target names: every one gets a row per window, even one that never answered
    targets: tuple[str, ...] = ()
    #: a window is closed (compressed) once the newest window seen starts this long after its end
    close_after_s: float = CLOSE_AFTER_S
    _newest_index: int | None = field(default=None, repr=False)

    @property
    def warmup_ends_at(self) -> float | None:
        return None if self.started_at is None else self.started_at + self.warmup_s

    def record(self, target: str, latency_ms: float, failed: bool, now: float, refused: bool = False) -> None:
        index = int(now // self.window_s)
        window = self.windows.writable((index, target))
        ends = self.warmup_ends_at
        phase = self.warmup if ends is not None and now < ends else self.steady
        totals = phase[target]
        if failed:
            window.record_failure()
            totals.record_failure()
            if refused:
                self._add_refused(index, target, 1, now, now)
        else:
            window.record_success(latency_ms)
            totals.record_success(latency_ms)
        if self._newest_index is None or index > self._newest_index:
            self._newest_index = index
            self._close_old_windows()

    def _in_steady(self, t: float) -> bool:
        ends = self.warmup_ends_at
        return ends is None or t >= ends

    def record_stream(self, target: str, timing: StreamTiming, now: float) -> None:
        """A successful streamed request's own figures (its latency is recorded by `record`)."""
        self.streams.record((int(now // self.window_s), target), timing, self._in_steady(now))

    def record_send_lag(self, target: str, lag_ms: float, now: float) -> None:
        self.lag_windows.writable((int(now // self.window_s), target)).record_success(max(lag_ms, 0.0))
        if self._in_steady(now):
            self.lag_steady[target].record_success(max(lag_ms, 0.0))

    def record_arrival(self, target: str, intended: float) -> None:
        self.arrival_windows[(int(intended // self.window_s), target)][0] += 1
        if self._in_steady(intended):
            self.arrivals_steady[target][0] += 1

    def record_send(self, target: str, sent: float) -> None:
        """An open-loop request's actual send time (wall clock), for the burstiness sent."""
        self.send_times.add(int(sent // self.window_s), target, sent)

    def record_scheduled(self, target: str, intended: float) -> None:
        """An arrival of the whole run's schedule (before the split over processes), in time order."""
        if self._in_steady(intended):
            self.schedule_gaps[target].add(intended)

    def record_unsent(self, target: str, intended: float) -> None:
        self.arrival_windows[(int(intended // self.window_s), target)][1] += 1
        if self._in_steady(intended):
            self.arrivals_steady[target][1] += 1

    def _add_refused(self, index: int, target: str, count: int, first: float, last: float) -> None:
        window = self.refused_windows.get((index, target))
        if window is None:
            self.refused_windows[(index, target)] = RefusedWindow(count, first, last)
        else:
            window.add(count, first, last)

    # -- bounded memory -------------------------------------------------------------------------
    def _close_old_windows(self) -> None:
        if self._newest_index is None:
            return
        if math.isinf(self.close_after_s):
            return
        before = self._newest_index - max(1, math.ceil(self.close_after_s / self.window_s))
        for store in (self.windows, self.lag_windows, self.worker_windows):
            store.close_before(before)
        self.streams.close_before(before)
        self.generations.close_before(before)
        self.send_times.fold_before(before, self.warmup_ends_at)

    @property
    def open_histograms(self) -> int:
        """Windows that hold a full histogram now (bounded: the rest are compressed)."""
        open_count = self.windows.open_count + self.lag_windows.open_count + self.worker_windows.open_count
        return open_count + self.streams.open_histograms + self.generations.open_histograms

    # -- reading --------------------------------------------------------------------------------
    def all_windows(self, first_index: int | None = None, last_index: int | None = None) -> list[tuple[WindowKey, WindowStats]]:
        """Every window of every target from the run's start to its stop, oldest first, targets
        by name: windows in which nothing finished included (with no requests and no figures).

        Without a start or stop, the first or last window with data bounds the range;
        `first_index` and `last_index` (window indices) cut it, e.g. for a run still going."""
        keys = set(self.windows) | set(self.arrival_windows)
        targets = sorted(set(self.targets) | {target for _, target in keys})
        indices = [index for index, _ in keys]
        start = None if self.started_at is None else int(self.started_at // self.window_s)
        if start is not None:
            indices.append(start)
        if self.stopped_at is not None:  # the last window that starts before the stop
            stop = math.ceil(self.stopped_at / self.window_s) - 1
            indices.append(stop if start is None else max(stop, start))
        if not indices or not targets:
            return []
        first, last = min(indices), max(indices)
        if first_index is not None:
            first = max(first, first_index)
        if last_index is not None:
            last = min(last, last_index)
        empty = ClosedStats.empty()
        return [
            ((index, target), self.windows.get((index, target), empty)) for index in range(first, last + 1) for target in targets
        ]

    def outages(self, target: str) -> list[Outage]:
        """The target's streaks of refused connections (see `inferload.measure.run_record`)."""
        return find_outages(self.refused_windows, self.windows, target)

    # -- reports between workers and the master -------------------------------------------------
    def drain_to_wire(self) -> dict[str, Any]:
        """Everything gathered since the last call, as plain data; leaves the record empty."""
        wire = {
            "windows": [[index, target, stats.to_wire()] for (index, target), stats in self.windows.items()],
            "steady": {t: s.to_wire() for t, s in self.steady.items()},
            "warmup": {t: s.to_wire() for t, s in self.warmup.items()},
            "lag_windows": [[index, target, stats.to_wire()] for (index, target), stats in self.lag_windows.items()],
            "lag_steady": {t: s.to_wire() for t, s in self.lag_steady.items()},
            "arrival_windows": [[index, target, counts] for (index, target), counts in self.arrival_windows.items()],
            "arrivals_steady": dict(self.arrivals_steady),
            "refused_windows": [[index, target, *window.to_wire()] for (index, target), window in self.refused_windows.items()],
            "streams": self.streams.drain_to_wire(),
            "generations": self.generations.drain_to_wire(),
            "send_times": self.send_times.drain_to_wire(),
            "schedule_gaps": {target: stats.to_wire() for target, stats in self.schedule_gaps.items()},
        }
        for totals in (self.steady, self.warmup, self.lag_steady):
            for stats in totals.values():
                stats.release()
        for part in (
            self.windows,
            self.steady,
            self.warmup,
            self.lag_windows,
            self.lag_steady,
            self.arrival_windows,
            self.arrivals_steady,
            self.refused_windows,
        ):
            part.clear()
        return wire

    def merge_wire(self, wire: dict[str, Any], worker: str | None = None) -> None:
        newest = self._newest_index
        for index, target, data in wire.get("windows", []):
            key = (int(index), target)
            if worker is None:
                _merge_from_wire(data, self.windows.writable(key))
            else:
                _merge_from_wire(data, self.windows.writable(key), self.worker_windows.writable((*key, worker)))
            newest = key[0] if newest is None else max(newest, key[0])
        for target, data in wire.get("steady", {}).items():
            _merge_from_wire(data, self.steady[target])
        for target, data in wire.get("warmup", {}).items():
            _merge_from_wire(data, self.warmup[target])
        for index, target, data in wire.get("lag_windows", []):
            _merge_from_wire(data, self.lag_windows.writable((int(index), target)))
        for target, data in wire.get("lag_steady", {}).items():
            _merge_from_wire(data, self.lag_steady[target])
        for index, target, (arrivals, unsent) in wire.get("arrival_windows", []):
            counts = self.arrival_windows[(int(index), target)]
            counts[0] += arrivals
            counts[1] += unsent
        for target, (arrivals, unsent) in wire.get("arrivals_steady", {}).items():
            counts = self.arrivals_steady[target]
            counts[0] += arrivals
            counts[1] += unsent
        for index, target, count, first, last in wire.get("refused_windows", []):
            self._add_refused(int(index), target, int(count), float(first), float(last))
        self.streams.merge_wire(wire.get("streams", {}))
        self.generations.merge_wire(wire.get("generations", {}))
        self.send_times.merge_wire(wire.get("send_times", []))
        for target, data in wire.get("schedule_gaps", {}).items():  # every worker draws the whole schedule
            stats = GapStats.from_wire(data)
            if stats.gaps > self.schedule_gaps[target].gaps:
                self.schedule_gaps[target] = stats
        self._newest_index = newest
        self._close_old_windows()  # late figures reopened a window: closed again at once

    @property
    def steady_duration_s(self) -> float:
        if self.started_at is None or self.stopped_at is None:
            return 0.0
        return max(0.0, self.stopped_at - (self.started_at + self.warmup_s))


def _merge_from_wire(data: dict[str, Any], *into: LatencyStats) -> None:
    stats = LatencyStats.from_wire(data)
    for part in into:
        part.merge(stats)
    stats.release()  # a report's histograms go at once, not at the next cyclic collection
