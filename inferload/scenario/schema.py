"""The scenario: what to load, how hard, for how long; a frozen pydantic model.

Every model is frozen and forbids unknown keys. Durations are float seconds stored under the YAML
key's own name. The parts live next door: ``scenario.targets`` (targets, inputs, data, SLO),
``scenario.shapes`` (the ten load shapes), ``scenario.fields`` (field types),
``scenario.messages`` (how problems are raised and worded) and ``scenario.limits`` (the bounds).

Build a scenario from a file with ``inferload.scenario.loader.load_scenario``, or from a dict with
``scenario_from_dict`` there; constructing ``Scenario`` directly works too (validation runs, but
npy files are only checked when a ``base_dir`` is given in the validation context).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeGuard, get_args

from pydantic import AfterValidator, Field, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario.fields import FrozenModel, Name, Seconds, at_least_seconds, repeats
from inferload.scenario.limits import MAX_WINDOWS, MIN_DURATION_S, MIN_WINDOW_S
from inferload.scenario.messages import Check, checks_error, custom_error, fmt_seconds
from inferload.scenario.replay_checks import replay_checks
from inferload.scenario.shapes import (
    BurstShape,
    ConstantRateShape,
    GammaShape,
    OpenLoopBase,
    OpenLoopShape,
    PoissonShape,
    RampingRateShape,
    RampShape,
    RateBurstsShape,
    ReplayShape,
    StagesShape,
    SteadyShape,
)
from inferload.scenario.targets import Slo, Target

Shape = Annotated[
    SteadyShape
    | RampShape
    | BurstShape
    | StagesShape
    | ConstantRateShape
    | PoissonShape
    | RampingRateShape
    | RateBurstsShape
    | GammaShape
    | ReplayShape,
    Field(discriminator="kind"),
]
CLOSED_LOOP_SHAPES = (SteadyShape, RampShape, BurstShape, StagesShape)
OPEN_LOOP_SHAPES = (ConstantRateShape, PoissonShape, RampingRateShape, RateBurstsShape, GammaShape, ReplayShape)


def shape_kind(model: type[FrozenModel]) -> str:
    """The ``kind`` a shape model is written with (its ``kind`` literal)."""
    return str(get_args(model.model_fields["kind"].annotation)[0])


SHAPE_KINDS = tuple(shape_kind(model) for model in (*CLOSED_LOOP_SHAPES, *OPEN_LOOP_SHAPES))
OPEN_LOOP_KINDS = tuple(shape_kind(model) for model in OPEN_LOOP_SHAPES)


def is_open_loop(shape: object) -> TypeGuard[OpenLoopShape]:
    """True for arrival-rate shapes (requests arrive on the clock, not when a user is free)."""
    return isinstance(shape, OpenLoopBase)


class Scenario(FrozenModel):
    """A whole scenario. ``source_path`` is the file it came from (None when built in code)."""

    name: Name
    description: StrictStr | None = None
    duration: Annotated[Seconds, Field(gt=0), AfterValidator(at_least_seconds(MIN_DURATION_S))]
    warmup: Annotated[Seconds, Field(ge=0)] = 0.0
    window: Annotated[Seconds, Field(gt=0), AfterValidator(at_least_seconds(MIN_WINDOW_S))] = 1.0
    targets: tuple[Target, ...] = Field(min_length=1)
    shape: Shape
    source_path: Path | None = Field(default=None, exclude=True)

    @property
    def base_dir(self) -> Path:
        """Where relative paths (npy data) are resolved: the scenario file's folder, or the cwd."""
        return self.source_path.parent if self.source_path is not None else Path.cwd()

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.name == name:
                return target
        raise KeyError(name)

    @field_validator("warmup")
    @classmethod
    def _warmup_shorter(cls, value: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration")
        if duration is not None and value >= duration:
            raise custom_error(f"must be shorter than duration ({fmt_seconds(duration)}); got {fmt_seconds(value)}")
        return value

    @field_validator("window")
    @classmethod
    def _window_fits(cls, value: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration")
        if duration is not None and value > duration:
            raise custom_error(f"must not be longer than duration ({fmt_seconds(duration)}); got {fmt_seconds(value)}")
        if duration is not None and duration / value > MAX_WINDOWS:
            raise custom_error(
                f"duration {fmt_seconds(duration)} / window {fmt_seconds(value)} is {duration / value:,.0f} windows;"
                f" at most {MAX_WINDOWS:,} (each keeps a histogram per target): make the window longer"
            )
        return value

    @field_validator("targets")
    @classmethod
    def _unique_target_names(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        checks: list[Check] = [
            ((index, "name"), f"duplicate target name {name!r} (also targets[{first}])")
            for index, name, first in repeats(target.name for target in targets)
        ]
        if checks:
            raise checks_error(checks)
        return targets

    @field_validator("shape")
    @classmethod
    def _shape_fits_duration(cls, shape: Any, info: ValidationInfo) -> Any:
        duration = info.data.get("duration")
        checks = [] if duration is None else shape.duration_checks(duration)
        if checks:
            raise checks_error(checks)
        return shape

    @model_validator(mode="after")
    def _replay_file_fits(self, info: ValidationInfo) -> Scenario:
        """A replay shape's file, read once against the targets (only when the scenario's folder is known)."""
        base_dir = (info.context or {}).get("base_dir")
        if isinstance(self.shape, ReplayShape) and base_dir is not None:
            checks = replay_checks(self.shape, self.targets, Path(base_dir))
            if checks:
                raise checks_error(checks)
        return self


@dataclass(frozen=True)
class RunOutline:
    """What a run's figures need to know of a run that no scenario shaped (``inferload.attach``: a
    locustfile's own users and Locust's own flags made the load): its name, warm-up and window, the
    targets its requests are known by, and SLO thresholds by request name (a target's or not)."""

    name: str
    warmup: float = 0.0
    window: float = 1.0
    targets: tuple[Target, ...] = ()
    slo: Mapping[str, Slo] = field(default_factory=dict)
