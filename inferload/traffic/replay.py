"""The replay law: arrivals at the times a replay file gives (`inferload.scenario.replay_file`).

The file is read as a stream on every pass (bounded memory whatever its length): rows before
``start`` are skipped, the window ends at ``start + duration`` (or the file's end), and each
row's played time is ``(t - start) x scale`` from the run's start, plus one period per earlier pass
with ``loop``. ``scale`` is ``1 / speed``, or with ``rate`` the window's own mean rate over
``rate`` (a first pass counts the window's rows), so the shape is kept and only time stretches.
The period is `window_period`'s. A row without a target goes to the scenario's targets by weight,
in a smooth weighted round robin (deterministic: the same on every process).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inferload.scenario.replay_file import Pause, ReplayFileError, replay_rows, scan_replay, window_period
from inferload.scenario.shapes import ReplayShape
from inferload.traffic.arrivals import Arrival


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

    def arrivals(self, seed: int = 0) -> Iterator[Arrival]:
        """The run's arrivals (``seed`` is not used: a replay is the same every time)."""
        scale, period = self.timing()
        chooser = WeightedTargets(self.targets)
        start, end, duration = self.start_s, self.window_end_s, self.run_duration_s
        offset = 0.0  # played seconds of the passes before this one
        while True:
            for _, row in replay_rows(self.path, self.pause):
                if row.t_s < start:
                    continue
                if row.t_s >= end:
                    break
                played = offset + (row.t_s - start) * scale
                if played >= duration:
                    return
                yield Arrival(played, row.target or chooser.next(), row.sample, row.batch)
            if not self.loop or period is None:
                return
            offset += period * scale
            if offset >= duration:
                return
