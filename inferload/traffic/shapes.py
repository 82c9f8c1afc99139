"""Traffic shapes: a scenario's shape as a user-count timeline (`inferload.run.traffic` has the Locust shape that plays it).

A timeline is a pure function of the run time: `at(t) -> (users, spawn_rate)` or None once the
run is over. Keeping it pure lets tests check every shape's timeline without running Locust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from inferload.scenario.schema import Scenario, is_open_loop
from inferload.scenario.shapes import BurstShape, RampShape, StagesShape, SteadyShape


class Timeline(Protocol):
    @property
    def duration(self) -> float: ...

    def at(self, t: float) -> tuple[int, float] | None: ...


@dataclass(frozen=True)
class SteadyTimeline:
    duration: float
    users: int
    spawn_rate: float

    def at(self, t: float) -> tuple[int, float] | None:
        return None if t >= self.duration else (self.users, self.spawn_rate)


@dataclass(frozen=True)
class RampTimeline:
    """From `from_users` to `to_users` in `steps` equal steps over `over` seconds, then hold."""

    duration: float
    from_users: int
    to_users: int
    over: float
    steps: int
    spawn_rate: float

    def at(self, t: float) -> tuple[int, float] | None:
        if t >= self.duration:
            return None
        step = min(self.steps, math.floor(t / (self.over / self.steps)))
        users = round(self.from_users + (self.to_users - self.from_users) * step / self.steps)
        return users, self.spawn_rate


@dataclass(frozen=True)
class BurstTimeline:
    """`base_users`, raised to `burst_users` for `burst_length` every `period` from `first_burst_at`."""

    duration: float
    base_users: int
    burst_users: int
    burst_length: float
    period: float
    first_burst_at: float
    spawn_rate: float

    def at(self, t: float) -> tuple[int, float] | None:
        if t >= self.duration:
            return None
        return (self.burst_users if self.in_burst(t) else self.base_users), self.spawn_rate

    def in_burst(self, t: float) -> bool:
        if t < self.first_burst_at:
            return False
        return (t - self.first_burst_at) % self.period < self.burst_length


@dataclass(frozen=True)
class StagesTimeline:
    """Each stage's user count for its duration; the last one holds until `duration`."""

    duration: float
    stages: tuple[tuple[float, int, float], ...]  # (end time, users, spawn_rate)

    def at(self, t: float) -> tuple[int, float] | None:
        if t >= self.duration:
            return None
        for end, users, spawn_rate in self.stages:
            if t < end:
                return users, spawn_rate
        _, users, spawn_rate = self.stages[-1]
        return users, spawn_rate


def timeline_for(scenario: Scenario) -> Timeline:
    """The user-count timeline a scenario's shape describes, over the scenario's duration.

    Spawn rates and ``first_burst_at`` are the validated scenario's (validation fills in every default).
    """
    shape = scenario.shape
    duration = scenario.duration
    if isinstance(shape, SteadyShape):
        return SteadyTimeline(duration, shape.users, shape.spawn_rate)
    if isinstance(shape, RampShape):
        return RampTimeline(duration, shape.from_users, shape.to_users, shape.over, shape.steps, shape.spawn_rate)
    if isinstance(shape, BurstShape):
        return BurstTimeline(
            duration,
            shape.base_users,
            shape.burst_users,
            shape.burst_length,
            shape.period,
            shape.first_burst_at,
            shape.spawn_rate,
        )
    if isinstance(shape, StagesShape):
        end = 0.0
        stages = []
        for stage in shape.stages:
            end += stage.duration
            if stage.spawn_rate is None:
                raise ValueError("stage spawn rates are filled in by validation; build the scenario with scenario_from_dict")
            stages.append((end, stage.users, stage.spawn_rate))
        return StagesTimeline(duration, tuple(stages))
    if is_open_loop(shape):
        # open loop: a fixed pool of senders, all up at once; the arrival rate is the scheduler's
        return SteadyTimeline(duration, shape.max_in_flight, float(shape.max_in_flight * 10))
    raise TypeError(f"no timeline for shape {type(shape).__name__}")
