"""A replay shape checked against its file and the scenario's targets (the file read once, as a stream).

Problems land at the shape's keys: the file's own (unsorted or negative times, a bad field, an
unknown column) and its rows against the scenario (a target it does not have, a sample beyond the
target's data set, a batch over the request bound) at ``shape.file``, naming the file's line; a
window with no arrival at ``shape.start``/``shape.duration``; ``rate``/``loop`` without a period,
and a speed beyond the rate bound, at their own keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from inferload.scenario import datasets, tensors
from inferload.scenario.limits import MAX_RATE, MAX_REQUEST_BYTES, mib
from inferload.scenario.messages import Check, fmt_seconds
from inferload.scenario.replay_file import ReplayFacts, ReplayFileError, scan_replay, window_period
from inferload.scenario.shapes import ReplayShape
from inferload.scenario.targets import Target

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
                        " (a sample column needs inputs fed by data: {dataset: ...})",
                    )
                )
            elif sample >= count:
                checks.append(
                    (
                        ("shape", "file"),
                        f"{name} line {line}: sample {sample} is out of range: target {target.name!r}'s data set has"
                        f" {count:,} samples (0 to {count - 1:,})",
                    )
                )
    return checks


def _sample_count(target: Target, base_dir: Path) -> int | None:
    """How many samples the target's data sets hold; None: no input has one; NOT_READ: they cannot
    be read (the target's own checks say why)."""
    if not any(spec.data.dataset is not None for spec in target.inputs):
        return None
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
