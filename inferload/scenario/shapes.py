"""The ten load shapes: four closed-loop (a number of users) and six open-loop (requests on the clock).

Rules that several shapes share are written once: the spawn-rate default (``spawn_rate_for``: a
change completes within a second), ``greater_than`` / ``longer_than`` / ``differs_from`` checks
against an earlier key, ``first_burst_at``'s default, and the bounds in ``scenario.limits``.
Validation fills every ``spawn_rate`` and ``first_burst_at``, so a validated shape never holds
None there. ``duration_checks(duration)`` is what the scenario checks against its duration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario.fields import FrozenModel, Number, Seconds, default_from, filled_in
from inferload.scenario.limits import MAX_CV, MAX_IN_FLIGHT, MAX_RATE, MAX_SPAWN_RATE, MAX_STEPS, MAX_USERS
from inferload.scenario.messages import Check, Loc, checks_error, custom_error, fmt_seconds
from inferload.scenario.replay_file import REPLAY_FORMATS

Users = Annotated[StrictInt, Field(ge=0, le=MAX_USERS)]
SomeUsers = Annotated[StrictInt, Field(ge=1, le=MAX_USERS)]
SpawnRate = Annotated[Number, Field(gt=0, le=MAX_SPAWN_RATE)]
Rate = Annotated[Number, Field(ge=0, le=MAX_RATE)]
PositiveRate = Annotated[Number, Field(gt=0, le=MAX_RATE)]
Length = Annotated[Seconds, Field(gt=0)]


def spawn_rate_for(change: float) -> float:
    """The default spawn rate: a change of ``change`` users completes within 1 s (at least 1 user/s)."""
    return max(float(change), 1.0)


def _spawn_rate_default(change: Callable[[dict[str, Any]], float]) -> Any:
    return default_from(lambda data: spawn_rate_for(change(data)))


def _first_burst_default(data: dict[str, Any]) -> float:
    """Each period ends with its burst: ``period - burst_length``."""
    return max(data.get("period", 0.0) - data.get("burst_length", 0.0), 0.0)


def greater_than(other: str) -> AfterValidator:
    """The value must be greater than the earlier key ``other``."""

    def check(value: float, info: ValidationInfo) -> float:
        base = info.data.get(other)
        if base is not None and value <= base:
            raise custom_error(f"must be greater than {other} ({base}); got {value}")
        return value

    return AfterValidator(check)


def longer_than(other: str) -> AfterValidator:
    """The duration must be longer than the earlier duration ``other``."""

    def check(value: float, info: ValidationInfo) -> float:
        length = info.data.get(other)
        if length is not None and value <= length:
            raise custom_error(f"must be longer than {other} ({fmt_seconds(length)}); got {fmt_seconds(value)}")
        return value

    return AfterValidator(check)


def differs_from(other: str, advice: str) -> AfterValidator:
    """The value must differ from the earlier key ``other`` (a ramp must go somewhere)."""

    def check(value: float, info: ValidationInfo) -> float:
        start = info.data.get(other)
        if start is not None and value == start:
            raise custom_error(f"must differ from {other} ({start}); {advice}")
        return value

    return AfterValidator(check)


Steps = Annotated[StrictInt, Field(ge=1, le=MAX_STEPS)]
FirstBurstAt = Annotated[Seconds, Field(ge=0), default_from(_first_burst_default)]


class _Shape(FrozenModel):
    def duration_checks(self, duration: float) -> list[Check]:
        """Problems of this shape in a run of ``duration`` seconds (paths relative to the shape)."""
        return []

    def most_users(self) -> tuple[int, Loc]:
        """The most Locust users the shape runs at once (open loop: its senders), and the key that
        gives that number (a path relative to the shape)."""
        raise NotImplementedError


def _over_checks(over: float, duration: float) -> list[Check]:
    if over > duration:
        return [(("over",), f"must not be longer than duration ({fmt_seconds(duration)}); got {fmt_seconds(over)}")]
    return []


def _first_burst_checks(first_burst_at: float, duration: float) -> list[Check]:
    if first_burst_at >= duration:
        return [
            (
                ("first_burst_at",),
                f"must be before the end of the run ({fmt_seconds(duration)}); got {fmt_seconds(first_burst_at)}",
            )
        ]
    return []


# --- closed loop: a number of users ------------------------------------------------------------


class SteadyShape(_Shape):
    """A constant number of users; ``spawn_rate`` defaults to ``users`` (all started within 1 s)."""

    kind: Literal["steady"]
    users: SomeUsers
    spawn_rate: Annotated[SpawnRate, _spawn_rate_default(lambda data: data.get("users", 1))] = filled_in()

    def most_users(self) -> tuple[int, Loc]:
        return self.users, ("users",)


class RampShape(_Shape):
    """From ``from_users`` to ``to_users`` in ``steps`` equal steps over ``over``, then hold.

    ``spawn_rate`` defaults to one step's change per second (each step completes within 1 s).
    """

    kind: Literal["ramp"]
    from_users: Users
    to_users: Annotated[Users, differs_from("from_users", "for a constant load use kind: steady")]
    over: Length
    steps: Steps = 5
    spawn_rate: Annotated[
        SpawnRate,
        _spawn_rate_default(lambda data: abs(data.get("to_users", 1) - data.get("from_users", 0)) / data.get("steps", 1)),
    ] = filled_in()

    def duration_checks(self, duration: float) -> list[Check]:
        return _over_checks(self.over, duration)

    def most_users(self) -> tuple[int, Loc]:
        return (self.to_users, ("to_users",)) if self.to_users > self.from_users else (self.from_users, ("from_users",))


class BurstShape(_Shape):
    """``base_users`` with bursts to ``burst_users`` lasting ``burst_length`` every ``period``.

    ``first_burst_at`` defaults to ``period - burst_length`` (each period ends with its burst);
    ``spawn_rate`` defaults to ``burst_users`` (a burst is fully up within 1 s).
    """

    kind: Literal["burst"]
    base_users: Users
    burst_users: Annotated[SomeUsers, greater_than("base_users")]
    burst_length: Length
    period: Annotated[Length, longer_than("burst_length")]
    first_burst_at: FirstBurstAt = filled_in()
    spawn_rate: Annotated[SpawnRate, _spawn_rate_default(lambda data: data.get("burst_users", 1))] = filled_in()

    def duration_checks(self, duration: float) -> list[Check]:
        return _first_burst_checks(self.first_burst_at, duration)

    def most_users(self) -> tuple[int, Loc]:
        return self.burst_users, ("burst_users",)


class Stage(FrozenModel):
    """Hold ``users`` for ``duration``; ``spawn_rate`` is filled in by ``StagesShape``."""

    duration: Length
    users: Users
    spawn_rate: SpawnRate | None = None


class StagesShape(_Shape):
    """Stages one after another; after the last, its user count holds until the scenario ends.

    A stage's ``spawn_rate`` defaults to its change in users per second (done within 1 s).
    """

    kind: Literal["stages"]
    stages: tuple[Stage, ...] = Field(min_length=1)

    @field_validator("stages")
    @classmethod
    def _default_spawn_rates(cls, stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
        filled = []
        previous = 0
        for stage in stages:
            if stage.spawn_rate is None:
                stage = stage.model_copy(update={"spawn_rate": spawn_rate_for(abs(stage.users - previous))})
            filled.append(stage)
            previous = stage.users
        return tuple(filled)

    def duration_checks(self, duration: float) -> list[Check]:
        total = sum(stage.duration for stage in self.stages)
        if total > duration + 1e-9:
            return [
                (("stages",), f"the stages last {fmt_seconds(total)} in total, longer than duration ({fmt_seconds(duration)})")
            ]
        return []

    def most_users(self) -> tuple[int, Loc]:
        index = max(range(len(self.stages)), key=lambda i: self.stages[i].users)
        return self.stages[index].users, ("stages", index, "users")


# --- open loop: requests arrive on the clock ---------------------------------------------------


class OpenLoopBase(_Shape):
    """Requests arrive on the clock (requests/s for the whole run, split across workers).

    ``max_in_flight`` senders (Locust users) send the arrivals; an arrival that finds every
    sender busy waits in a queue of at most ``max_queue`` (default: ``max_in_flight``), and one
    that finds the queue full is counted as unsent. Latency is measured from the intended send
    time. ``seed`` makes Poisson arrivals repeatable.
    """

    max_in_flight: Annotated[StrictInt, Field(ge=1, le=MAX_IN_FLIGHT)] = 64
    max_queue: Annotated[StrictInt, Field(ge=0), default_from(lambda data: data.get("max_in_flight", 64))] = filled_in()
    seed: Annotated[StrictInt, Field(ge=0)] | None = None

    def most_users(self) -> tuple[int, Loc]:
        return self.max_in_flight, ("max_in_flight",)


class ConstantRateShape(OpenLoopBase):
    """``rate`` requests/s, evenly spaced."""

    kind: Literal["constant-rate"]
    rate: PositiveRate


class PoissonShape(OpenLoopBase):
    """``rate`` requests/s on average, exponential gaps (a Poisson process)."""

    kind: Literal["poisson"]
    rate: PositiveRate


class RampingRateShape(OpenLoopBase):
    """From ``from_rate`` to ``to_rate`` requests/s in ``steps`` equal steps over ``over``, then hold."""

    kind: Literal["ramping-rate"]
    from_rate: Rate
    to_rate: Annotated[Rate, differs_from("from_rate", "for a constant rate use kind: poisson or constant-rate")]
    over: Length
    steps: Steps = 10
    arrivals: Literal["poisson", "constant"] = "poisson"

    def duration_checks(self, duration: float) -> list[Check]:
        return _over_checks(self.over, duration)


class RateBurstsShape(OpenLoopBase):
    """``base_rate`` requests/s with bursts of ``burst_rate`` for ``burst_length`` every ``period``."""

    kind: Literal["rate-bursts"]
    base_rate: Rate
    burst_rate: Annotated[PositiveRate, greater_than("base_rate")]
    burst_length: Length
    period: Annotated[Length, longer_than("burst_length")]
    first_burst_at: FirstBurstAt = filled_in()
    arrivals: Literal["poisson", "constant"] = "poisson"

    def duration_checks(self, duration: float) -> list[Check]:
        checks = _first_burst_checks(self.first_burst_at, duration)
        bursts = math.ceil((duration - self.first_burst_at) / self.period)
        if not checks and bursts > MAX_STEPS:
            checks.append(
                (
                    ("period",),
                    f"gives {bursts:,} bursts in a {fmt_seconds(duration)} run; at most {MAX_STEPS:,} are allowed"
                    f" (a period of at least {fmt_seconds(math.ceil(duration / MAX_STEPS * 1000) / 1000)})",
                )
            )
        return checks


class GammaShape(OpenLoopBase):
    """``rate`` requests/s on average, gamma-distributed gaps whose coefficient of variation is ``cv``.

    ``cv`` is the burstiness: 1 is a Poisson process, below 1 more even, above 1 bursty (many
    short gaps, a few long ones; vLLM's ``--burstiness`` is 1 / cv^2, the gamma's shape).
    """

    kind: Literal["gamma"]
    rate: PositiveRate
    cv: Annotated[Number, Field(gt=0, le=MAX_CV)]


class ReplayShape(OpenLoopBase):
    """Arrivals at the times a replay file gives (``inferload.scenario.replay_file``), sent open loop.

    ``speed`` scales time (2: twice as fast), or ``rate`` rescales the window to that mean rate
    keeping its shape (one of the two); ``start`` and ``duration`` pick a window of the trace (in
    its own seconds); ``loop`` plays the window again and again until the run ends. The file is
    read as a stream, once to validate it and once per pass.
    """

    kind: Literal["replay"]
    #: the replay file (made absolute once the scenario's folder is known)
    file: StrictStr
    speed: Annotated[Number, Field(gt=0, le=MAX_RATE)] | None = None
    rate: PositiveRate | None = None
    start: Annotated[Seconds, Field(ge=0)] = 0.0
    duration: Length | None = None
    loop: StrictBool = False

    @field_validator("file")
    @classmethod
    def _file_path(cls, value: str, info: ValidationInfo) -> str:
        suffixes = ", ".join(REPLAY_FORMATS)
        if not value.strip():
            raise custom_error(f"expected the path of a replay file ({suffixes}); got ''")
        if Path(value).suffix.lower() not in REPLAY_FORMATS:
            raise custom_error(f"expected a replay file named *.csv, *.jsonl or *.ndjson; got {value!r}")
        base_dir = (info.context or {}).get("base_dir")
        if base_dir is None:
            return value
        path = (Path(base_dir) / value).resolve()
        if not path.is_file():
            raise custom_error(f"replay file not found: {str(path)!r}" if not path.exists() else f"{str(path)!r} is not a file")
        return str(path)

    @model_validator(mode="after")
    def _speed_or_rate(self) -> ReplayShape:
        if self.speed is not None and self.rate is not None:
            raise checks_error([(("rate",), "give speed (a time scale) or rate (a mean rate), not both")])
        return self

    @property
    def time_scale(self) -> float:
        """Played seconds per trace second without ``rate`` (1 / speed)."""
        return 1.0 / (self.speed or 1.0)


OpenLoopShape = ConstantRateShape | PoissonShape | RampingRateShape | RateBurstsShape | GammaShape | ReplayShape
