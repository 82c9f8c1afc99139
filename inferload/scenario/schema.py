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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeGuard, get_args

from pydantic import AfterValidator, Field, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario import datasets, tensors
from inferload.scenario.fields import FrozenModel, Name, Seconds, at_least_seconds, repeats
from inferload.scenario.limits import MAX_RATE, MAX_REQUEST_BYTES, MAX_WINDOWS, MIN_DURATION_S, MIN_WINDOW_S, mib
from inferload.scenario.messages import Check, checks_error, custom_error, fmt_seconds, format_key_path
from inferload.scenario.replay_file import ReplayFacts, ReplayFileError, scan_replay, window_period
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
from inferload.scenario.targets import AnyTarget, GenerativeTarget, Slo, Target

# A replay shape checked against its file and the scenario's targets (the file read once, as a stream).
#
# Problems land at the shape's keys: the file's own (unsorted or negative times, a bad field, an
# unknown column) and its rows against the scenario (a target it does not have, a sample beyond the
# target's data set, a batch over the request bound) at ``shape.file``, naming the file's line; a
# window with no arrival at ``shape.start``/``shape.duration``; ``rate``/``loop`` without a period,
# and a speed beyond the rate bound, at their own keys.
#: rows of the file named in one problem at most (the first ones)
MAX_NAMED = 5
#: a target's data sets could not be read (its own checks report it)
NOT_READ = -1


def replay_checks(shape: ReplayShape, targets: Sequence[Target], base_dir: Path) -> list[Check]:
    """Every problem of ``shape`` (paths from the scenario's top: ``("shape", "file")``, ...)."""
    path = Path(shape.file)
    end = math.inf if shape.duration is None else shape.start + shape.duration
    try:
        facts = scan_replay(path, shape.start, end)
    except ReplayFileError as error:
        return [(("shape", "file"), str(error))]
    checks = _window_checks(shape, facts)
    checks += _target_checks(path.name, facts, targets)
    checks += _sample_checks(path.name, facts, targets, base_dir)
    checks += _batch_checks(path.name, facts, targets)
    return checks


def _window_checks(shape: ReplayShape, facts: ReplayFacts) -> list[Check]:
    trace = f"the trace's arrivals lie from {fmt_seconds(facts.first_s)} to {fmt_seconds(facts.last_s)}"
    if shape.start > facts.last_s:
        return [(("shape", "start"), f"must not be after the trace's last arrival; {trace}; got {fmt_seconds(shape.start)}")]
    if facts.window_rows == 0:
        assert shape.duration is not None  # without one the window runs to the end and holds the last arrival
        window = f"{fmt_seconds(shape.start)} to {fmt_seconds(shape.start + shape.duration)}"
        return [(("shape", "duration"), f"the window from {window} holds no arrival; {trace}")]
    period = window_period(shape.start, shape.duration, facts)
    checks: list[Check] = []
    if period is None:
        for key in ("rate", "loop"):
            if getattr(shape, key) not in (None, False):
                checks.append(
                    (("shape", key), "needs a window of at least two arrivals, or shape.duration (the window's length)")
                )
        return checks
    if shape.speed is not None:
        played_rps = facts.window_rows / period * shape.speed
        if played_rps > MAX_RATE:
            checks.append(
                (
                    ("shape", "speed"),
                    f"plays the window's {facts.window_rows / period:,.1f} req/s at {played_rps:,.0f} req/s;"
                    f" at most {MAX_RATE:,.0f} are allowed",
                )
            )
    return checks


def _target_checks(name: str, facts: ReplayFacts, targets: Sequence[Target]) -> list[Check]:
    known = {target.name for target in targets}
    unknown = sorted(((line, target) for target, line in facts.targets.items() if target not in known))
    if not unknown:
        return []
    listed = ", ".join(f"{target!r} (line {line})" for line, target in unknown[:MAX_NAMED])
    more = f" and {len(unknown) - MAX_NAMED} more" if len(unknown) > MAX_NAMED else ""
    return [
        (
            ("shape", "file"),
            f"{name}: names targets the scenario does not have: {listed}{more}; its targets are {', '.join(sorted(known))}",
        )
    ]


def _receivers(target: str | None, targets: Sequence[Target]) -> list[Target]:
    """The targets a row goes to: its own, or (no target) any of them (rows without one are split by weight)."""
    if target is None:
        return list(targets)
    return [t for t in targets if t.name == target]


def _sample_checks(name: str, facts: ReplayFacts, targets: Sequence[Target], base_dir: Path) -> list[Check]:
    checks: list[Check] = []
    counts: dict[str, int | None] = {}
    for row_target, (sample, line) in sorted(facts.max_sample.items(), key=lambda item: item[1][1]):
        for target in _receivers(row_target, targets):
            if target.name not in counts:
                counts[target.name] = _sample_count(target, base_dir)
            count = counts[target.name]
            if count == NOT_READ:
                continue  # the target's own data-set checks say why
            if count is None:
                checks.append(
                    (
                        ("shape", "file"),
                        f"{name} line {line}: sample {sample}: target {target.name!r} has no data set"
                        " (a sample column needs inputs fed by data: {dataset: ...}, or a generative target's"
                        " generation.lengths or generation.dataset)",
                    )
                )
            elif sample >= count:
                checks.append(
                    (
                        ("shape", "file"),
                        f"{name} line {line}: sample {sample} is out of range: target {target.name!r}'s data set has"
                        f" {count:,} samples (0 to {count - 1:,})"
                        + (
                            " (is its generation.lengths.file the one trace-to-replay wrote?)"
                            if _distinct_requests(target)
                            else ""
                        ),
                    )
                )
    return checks


def _distinct_requests(target: Target) -> int | None:
    """A generative target's distinct requests (its lengths' or data set's: a replay's sample picks
    one); None: it has none of its own."""
    generation = getattr(target, "generation", None)
    if generation is None:
        return None
    try:
        drawn = generation.distinct_requests()
    except (OSError, ValueError):
        return None  # the target's own checks say why
    return None if drawn is None else len(drawn)


def _sample_count(target: Target, base_dir: Path) -> int | None:
    """How many samples the target's data sets hold (a generative target's distinct requests when
    no input has a data set); None: none; NOT_READ: they cannot be read (the target's own checks
    say why)."""
    if not any(spec.data.dataset is not None for spec in target.inputs):
        return _distinct_requests(target)
    read, problems = datasets.read_target_datasets(target.inputs, target.batch_size, base_dir, target.name)
    if problems or not read:
        return NOT_READ
    return len(next(iter(read.values())).samples)


def targets_given_batches(shape: ReplayShape, targets: Sequence[Target]) -> list[Target]:
    """The targets some row of the replay gives a batch size other than their own ``batch_size``
    (each such request is made when first asked for; see ``users.request_pool.RequestPool.index_for``)."""
    end = math.inf if shape.duration is None else shape.start + shape.duration
    facts = scan_replay(Path(shape.file), shape.start, end)
    given: dict[str, Target] = {}
    for row_target, (largest, _line) in facts.max_batch.items():
        smallest = facts.min_batch.get(row_target, largest)
        for target in _receivers(row_target, targets):
            if smallest != target.batch_size or largest != target.batch_size:
                given[target.name] = target
    return list(given.values())


def _batch_checks(name: str, facts: ReplayFacts, targets: Sequence[Target]) -> list[Check]:
    checks: list[Check] = []
    for row_target, (batch, line) in sorted(facts.max_batch.items(), key=lambda item: item[1][1]):
        for target in _receivers(row_target, targets):
            size = sum(tensors.request_nbytes(spec, batch) for spec in target.inputs)
            if size > MAX_REQUEST_BYTES:
                checks.append(
                    (
                        ("shape", "file"),
                        f"{name} line {line}: batch {batch} makes target {target.name!r}'s requests {size:,} bytes;"
                        f" at most {MAX_REQUEST_BYTES:,} ({mib(MAX_REQUEST_BYTES)}) are allowed",
                    )
                )
    return checks


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
    targets: tuple[AnyTarget, ...] = Field(min_length=1)
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
    def _conversations_need_users(self) -> Scenario:
        """A conversation is held by a user from turn to turn: only a closed-loop shape has users."""
        if is_open_loop(self.shape):
            checks: list[Check] = [
                (
                    ("targets", index, "generation", "conversation"),
                    f"needs a closed-loop shape (users hold the conversations, one each); this scenario's shape is {self.shape.kind}",
                )
                for index, target in enumerate(self.targets)
                if isinstance(target, GenerativeTarget) and target.generation.conversation is not None
            ]
            if checks:
                raise checks_error(checks)
        return self

    @model_validator(mode="after")
    def _replay_file_fits(self, info: ValidationInfo) -> Scenario:
        """A replay shape's file, read once against the targets (only when the scenario's folder is known)."""
        base_dir = (info.context or {}).get("base_dir")
        if isinstance(self.shape, ReplayShape) and base_dir is not None:
            checks = replay_checks(self.shape, self.targets, Path(base_dir))
            if checks:
                raise checks_error(checks)
        return self


def idle_targets_problem(scenario: Scenario) -> str | None:
    """Why some target of a run of ``scenario`` would never send, or None: Locust shares the users
    (open loop: the senders) among the targets by weight, in whole users, so with fewer users than
    targets some target gets none. (A scenario file may hold more targets than its users when a
    sweep picks one of them: this is the run's rule, not the file's.)"""
    most, path = scenario.shape.most_users()
    if most >= len(scenario.targets):
        return None
    senders = "senders" if is_open_loop(scenario.shape) else "users"
    return (
        f"{format_key_path(('shape', *path))}: {most} {senders} for {len(scenario.targets)} targets: they are shared"
        f" among the targets by weight, whole {senders}, so {len(scenario.targets) - most} would never send; give at"
        f" least {len(scenario.targets)}"
    )


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
