"""Open-loop arrivals: the request rate over time, and the intended send times it gives.

Pure functions of time and a random generator, so the arrival process can be checked without
a server: a Poisson run at a set rate must achieve that rate, a ramp must follow its steps.
Rates are piecewise constant; `RateTimeline.next_change(t)` tells when the rate changes next,
so a gap drawn at one rate is re-drawn at the boundary (exact for Poisson: it is memoryless).
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from inferload.scenario.shapes import ConstantRateShape, OpenLoopShape, PoissonShape, RampingRateShape, RateBurstsShape

INFINITY = math.inf


@dataclass(frozen=True)
class RateTimeline:
    """Requests/s at run time t (piecewise constant), for the whole run."""

    duration: float
    #: (start time, rate) steps, sorted by start time, the first at 0
    steps: tuple[tuple[float, float], ...]
    poisson: bool
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


def rate_timeline(shape: OpenLoopShape, duration: float) -> RateTimeline:
    if isinstance(shape, (ConstantRateShape, PoissonShape)):
        return RateTimeline(duration, ((0.0, shape.rate),), isinstance(shape, PoissonShape))
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
    raise TypeError(f"not an open-loop shape: {type(shape).__name__}")


def next_arrival(timeline: RateTimeline, t: float, share: float, rng: random.Random) -> float:
    """The next intended send time after t, for `share` (0..1] of the whole run's rate.

    Returns infinity when no arrival comes before the run ends.
    """
    while t < timeline.duration:
        rate = timeline.rate_at(t) * share
        boundary = min(timeline.next_change(t), timeline.duration)
        if rate <= 0:
            t = boundary
            continue
        gap = rng.expovariate(rate) if timeline.poisson else 1.0 / rate
        if t + gap < boundary:
            return t + gap
        t = boundary  # the rate changes first: draw again from there
    return INFINITY
