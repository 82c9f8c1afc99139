"""Open-loop arrivals: one iterator interface for every arrival law, and the rate laws.

Every law (`ArrivalLaw`) yields the whole run's `Arrival`s in time order, all targets together,
from its seed: pure, no gevent, no Locust, so it can be checked without a server (a Poisson run
at a set rate must achieve that rate, a ramp must follow its steps) and fed to any sender. Every
process of a run iterates the same global stream (same seed) and keeps its part of it the same
way for every law: arrival i goes to process i mod n (`take_share`), so the processes together
send exactly the law's schedule, and a new split (a worker lost) applies from the next arrival.

Rate laws (constant, Poisson, gamma, ramps, bursts) draw one stream per target at the target's
share of the rate, merged in time order. Rates are piecewise constant; `RateTimeline.next_change(t)`
tells when the rate changes next, so a gap drawn at one rate is re-drawn at the boundary (exact
for Poisson: it is memoryless; gamma gaps come only with a constant rate). The replay law is
`inferload.traffic.arrivals`; `inferload.traffic.arrivals.law_for` picks a scenario's.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from inferload.scenario.replay_file import Pause, ReplayFileError, replay_rows, scan_replay, window_period
from inferload.scenario.schema import Scenario, is_open_loop
from inferload.scenario.shapes import (
    ConstantRateShape,
    GammaShape,
    OpenLoopShape,
    PoissonShape,
    RampingRateShape,
    RateBurstsShape,
    ReplayShape,
)


# The replay law: arrivals at the times a replay file gives (`inferload.scenario.replay_file`).
#
# The file is read as a stream on every pass (bounded memory whatever its length): rows before
# ``start`` are skipped, the window ends at ``start + duration`` (or the file's end), and each
# row's played time is ``(t - start) x scale`` from the run's start, plus one period per earlier pass
# with ``loop``. ``scale`` is ``1 / speed``, or with ``rate`` the window's own mean rate over
# ``rate`` (a first pass counts the window's rows), so the shape is kept and only time stretches.
# The period is `window_period`'s. A row without a target goes to the scenario's targets by weight,
# in a smooth weighted round robin (deterministic: the same on every process).
@dataclass
class WeightedTargets:
    """Smooth weighted round robin: over any run of picks each target's share is its weight's, evenly spread."""

    targets: Sequence[tuple[str, float]]
    _current: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self._current = [0.0] * len(self.targets)

    def next(self) -> str:
        total = 0.0
        best = 0
        for index, (_, weight) in enumerate(self.targets):
            self._current[index] += weight
            total += weight
            if self._current[index] > self._current[best]:
                best = index
        self._current[best] -= total
        return self.targets[best][0]


#: rows of a looped replay window kept in memory after its first pass (about 100 bytes each)
LOOP_ROWS_KEPT = 1_000_000


@dataclass(frozen=True)
class ReplayLaw:
    path: Path
    #: the run's length: no arrival is played at or after it
    run_duration_s: float
    start_s: float = 0.0
    #: trace seconds played from ``start_s`` (None: to the file's end)
    window_s: float | None = None
    loop: bool = False
    speed: float | None = None
    rate: float | None = None
    #: (target name, weight share) for rows that name no target
    targets: Sequence[tuple[str, float]] = ()
    #: called every few thousand rows read (a scheduler under gevent lets the hub run: a pass that
    #: skips to a window deep into a long file, or counts it for ``rate``, must not stall the process)
    pause: Pause | None = None

    @classmethod
    def from_shape(
        cls, shape: ReplayShape, run_duration_s: float, targets: Sequence[tuple[str, float]], pause: Pause | None = None
    ) -> ReplayLaw:
        return cls(
            path=Path(shape.file),
            run_duration_s=run_duration_s,
            start_s=shape.start,
            window_s=shape.duration,
            loop=shape.loop,
            speed=shape.speed,
            rate=shape.rate,
            targets=tuple(targets),
            pause=pause,
        )

    @property
    def window_end_s(self) -> float:
        return math.inf if self.window_s is None else self.start_s + self.window_s

    def timing(self) -> tuple[float, float | None]:
        """(played seconds per trace second, the window's period in trace seconds or None)."""
        scale = 1.0 / (self.speed or 1.0)
        if self.rate is None and not self.loop:
            return scale, None
        facts = scan_replay(self.path, self.start_s, self.window_end_s, self.pause)
        period = window_period(self.start_s, self.window_s, facts)
        if period is None or period <= 0:
            raise ReplayFileError(f"{self.path.name}: the window holds fewer than two arrivals; loop and rate need a period")
        if self.rate is not None:
            scale = (facts.window_rows / period) / self.rate
        return scale, period

    def _window_rows(self) -> Iterator[tuple[float, str | None, int | None, int | None]]:
        """The window's rows, (trace seconds, target, sample, batch), read from the file."""
        for _, row in replay_rows(self.path, self.pause):
            if row.t_s < self.start_s:
                continue
            if row.t_s >= self.window_end_s:
                return
            yield row.t_s, row.target, row.sample, row.batch

    def arrivals(self, seed: int = 0) -> Iterator[Arrival]:
        """The run's arrivals (``seed`` is not used: a replay is the same every time). A looped window
        of at most ``LOOP_ROWS_KEPT`` rows is read once and played from memory (a short file looped
        at a high rate was read again thousands of times a second, and the run fell behind its
        clock); a longer one is read again for each pass."""
        scale, period = self.timing()
        chooser = WeightedTargets(self.targets)
        start, duration = self.start_s, self.run_duration_s
        offset = 0.0  # played seconds of the passes before this one
        kept: list[tuple[float, str | None, int | None, int | None]] | None = [] if self.loop else None
        while True:
            rows: Iterable[tuple[float, str | None, int | None, int | None]] = self._window_rows()
            if kept is not None and offset > 0 and len(kept) <= LOOP_ROWS_KEPT:
                rows = kept
            for row in rows:
                t_s, target, sample, batch = row
                if offset == 0 and kept is not None and len(kept) <= LOOP_ROWS_KEPT:
                    kept.append(row)
                played = offset + (t_s - start) * scale
                if played >= duration:
                    return
                yield Arrival(played, target or chooser.next(), sample, batch)
            if not self.loop or period is None:
                return
            offset += period * scale
            if offset >= duration:
                return


# A scenario's arrival law: the replay law for a replay shape, a rate law for every other open-loop shape.
def target_shares(scenario: Scenario) -> tuple[tuple[str, float], ...]:
    """(target name, share of the run's rate by weight), in the scenario's order."""
    total = sum(target.weight for target in scenario.targets)
    return tuple((target.name, target.weight / total) for target in scenario.targets)


def law_for(scenario: Scenario, pause: Pause | None = None, timeline: Timeline | None = None) -> ArrivalLaw:
    """The arrival law of an open-loop scenario (TypeError for a closed-loop one); a replay's reader
    calls ``pause`` every few thousand rows; ``timeline``: a rate shape's rate over the run in place
    of the shape's (`--ramp-hold`'s adjustable one)."""
    shape = scenario.shape
    if not is_open_loop(shape):
        raise TypeError(f"a closed-loop shape ({shape.kind}) has no arrival law")
    if isinstance(shape, ReplayShape):
        return ReplayLaw.from_shape(shape, scenario.duration, target_shares(scenario), pause)
    return RateLaw(timeline or rate_timeline(shape, scenario.duration), target_shares(scenario))


INFINITY = math.inf
#: a target's stream of a rate law is seeded with seed x this + the target's index
SEED_MULTIPLIER = 1_000_003


class Arrival(NamedTuple):
    """One intended request: when (seconds from the run's start), to which target, and optionally
    which data-set sample it starts from and its batch size (None: the target's own rotation and
    batch_size)."""

    t_s: float
    target: str | None = None
    sample: int | None = None
    batch: int | None = None


class ArrivalLaw(Protocol):
    """An arrival law: the whole run's arrivals from a seed, in time order (the same on every process)."""

    def arrivals(self, seed: int) -> Iterator[Arrival]: ...


@dataclass
class ProcessSplit:
    """This process's part of the global stream: arrival i is its own when i mod workers == index.

    Mutable: the master re-sends the split when the live workers change, and it applies from the
    next arrival on (every process counts i over the whole stream, so the split stays consistent)."""

    workers: int = 1
    index: int = 0

    def owns(self, i: int) -> bool:
        return i % self.workers == self.index


def take_share(arrivals: Iterable[Arrival], split: ProcessSplit) -> Iterator[Arrival]:
    """The arrivals of the global stream this process sends (the split read at each arrival)."""
    for i, arrival in enumerate(arrivals):
        if split.owns(i):
            yield arrival


class Timeline(Protocol):
    """Requests/s at run time t, piecewise constant: what the arrival draws read."""

    @property
    def duration(self) -> float: ...

    @property
    def poisson(self) -> bool: ...

    @property
    def gamma_cv(self) -> float | None: ...

    def rate_at(self, t: float) -> float: ...

    def next_change(self, t: float) -> float: ...


@dataclass(frozen=True)
class RateTimeline:
    """Requests/s at run time t (piecewise constant), for the whole run."""

    duration: float
    #: (start time, rate) steps, sorted by start time, the first at 0
    steps: tuple[tuple[float, float], ...]
    poisson: bool
    #: gamma-distributed gaps with this coefficient of variation (only with one constant rate)
    gamma_cv: float | None = None
    #: the steps' start times, for a binary search (a ramp of 1,000 steps costs log2 steps per arrival)
    starts: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", tuple(start for start, _ in self.steps))

    def rate_at(self, t: float) -> float:
        index = bisect.bisect_right(self.starts, t)
        return self.steps[index - 1][1] if index > 0 else 0.0

    def next_change(self, t: float) -> float:
        index = bisect.bisect_right(self.starts, t)
        return self.starts[index] if index < len(self.starts) else INFINITY


class AdjustableTimeline:
    """A constant (or Poisson) rate whose future a controller changes while the run goes: the
    ramp-and-hold mode (`inferload.run.ramp_hold`). A change applies from its time on and replaces
    any later change; arrivals already drawn keep their times, so a change is made ahead of time
    (the native feed draws half a second ahead). A rate law reads it as it draws, so its stream
    follows the changes."""

    gamma_cv: float | None = None

    def __init__(self, duration: float, rate: float, poisson: bool) -> None:
        self._duration = duration
        self._poisson = poisson
        self._starts: list[float] = [0.0]
        self._rates: list[float] = [rate]

    @property
    def duration(self) -> float:
        return self._duration

    @property
    def poisson(self) -> bool:
        return self._poisson

    def rate_at(self, t: float) -> float:
        index = bisect.bisect_right(self._starts, t)
        return self._rates[index - 1] if index > 0 else 0.0

    def next_change(self, t: float) -> float:
        index = bisect.bisect_right(self._starts, t)
        return self._starts[index] if index < len(self._starts) else INFINITY

    def change(self, at: float, rate: float) -> None:
        """`rate` req/s from run time `at` on."""
        index = bisect.bisect_left(self._starts, at)
        del self._starts[index:], self._rates[index:]
        if not self._starts:
            self._starts, self._rates = [0.0], [rate]
            return
        self._starts.append(max(at, 0.0))
        self._rates.append(rate)

    def steps(self) -> list[tuple[float, float]]:
        return list(zip(self._starts, self._rates, strict=True))


def rate_timeline(shape: OpenLoopShape, duration: float) -> RateTimeline:
    if isinstance(shape, (ConstantRateShape, PoissonShape)):
        return RateTimeline(duration, ((0.0, shape.rate),), isinstance(shape, PoissonShape))
    if isinstance(shape, GammaShape):
        return RateTimeline(duration, ((0.0, shape.rate),), poisson=False, gamma_cv=shape.cv)
    if isinstance(shape, RampingRateShape):
        step_length = shape.over / shape.steps
        ramp = tuple(
            (k * step_length, shape.from_rate + (shape.to_rate - shape.from_rate) * k / shape.steps)
            for k in range(shape.steps + 1)
        )
        return RateTimeline(duration, ramp, shape.arrivals == "poisson")
    if isinstance(shape, RateBurstsShape):
        steps: list[tuple[float, float]] = [(0.0, shape.base_rate)]
        start = shape.first_burst_at
        while start < duration:
            steps.append((start, shape.burst_rate))
            steps.append((start + shape.burst_length, shape.base_rate))
            start += shape.period
        if steps[1][0] == 0.0:
            steps.pop(0)
        return RateTimeline(duration, tuple(steps), shape.arrivals == "poisson")
    raise TypeError(f"no rate timeline for shape {type(shape).__name__} (a replay's times come from its file)")


def next_arrival(timeline: Timeline, t: float, share: float, rng: random.Random) -> float:
    """The next intended send time after t, for `share` (0..1] of the whole run's rate.

    Returns infinity when no arrival comes before the run ends.
    """
    while t < timeline.duration:
        rate = timeline.rate_at(t) * share
        boundary = min(timeline.next_change(t), timeline.duration)
        if rate <= 0:
            t = boundary
            continue
        gap = draw_gap(timeline, rate, rng)
        if t + gap < boundary:
            return t + gap
        t = boundary  # the rate changes first: draw again from there
    return INFINITY


def draw_gap(timeline: Timeline, rate: float, rng: random.Random) -> float:
    """One gap at ``rate``: exponential (Poisson), gamma (mean 1/rate, sd cv/rate) or even."""
    if timeline.poisson:
        return rng.expovariate(rate)
    if timeline.gamma_cv is not None:
        shape_k = 1.0 / (timeline.gamma_cv * timeline.gamma_cv)
        return rng.gammavariate(shape_k, 1.0 / (rate * shape_k))
    return 1.0 / rate


@dataclass(frozen=True)
class RateLaw:
    """A rate timeline's arrivals: one stream per target at its share of the rate, merged in time order."""

    timeline: Timeline
    #: (target name, share of the whole rate) in the scenario's order
    targets: Sequence[tuple[str, float]]

    def arrivals(self, seed: int) -> Iterator[Arrival]:
        streams = [
            self._stream(name, share, random.Random(seed * SEED_MULTIPLIER + index))
            for index, (name, share) in enumerate(self.targets)
        ]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=lambda arrival: arrival.t_s)

    def _stream(self, target: str, share: float, rng: random.Random) -> Iterator[Arrival]:
        if isinstance(self.timeline, RateTimeline):
            yield from _fixed_stream(self.timeline, target, share, rng)
            return
        t = 0.0  # a timeline a controller changes as the run goes: read at every arrival
        while True:
            t = next_arrival(self.timeline, t, share, rng)
            if t == INFINITY:
                return
            yield Arrival(t, target)


def _fixed_stream(timeline: RateTimeline, target: str, share: float, rng: random.Random) -> Iterator[Arrival]:
    """`next_arrival` over and over on a timeline fixed for the run, its rate and next change read once
    per step instead of once per arrival: the same draws in the same order, so the same arrivals (the
    Python share of an open-loop arrival's CPU, docs/benchmarks.md)."""
    t = 0.0
    while t < timeline.duration:
        rate = timeline.rate_at(t) * share
        boundary = min(timeline.next_change(t), timeline.duration)
        if rate > 0:
            while True:
                gap = draw_gap(timeline, rate, rng)
                if t + gap >= boundary:
                    break
                t += gap
                yield Arrival(t, target)
        t = boundary
