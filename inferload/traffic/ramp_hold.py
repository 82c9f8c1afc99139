"""`--ramp-hold SPEC`, pure (no Locust: `inferload sweep` reads it too): capacity in one run.

The open-loop rate starts at the scenario's and grows by a step each window while the window meets the
SLO; once windows break it (`confirm` in a row, default 2) the rate steps back to the last one that
met it and **holds** there for the sustain period. When the hold as a whole
(its windows merged) meets the SLO the run ends and that rate is the answer; when it does not, the
rate steps back once more and holds again (at most `max_backoffs` times).

SPEC is comma-separated KEY=VALUE: `step` (%, default 10), `sustain` (seconds, default 30),
`max_unsent` (share, default 0.01), `backoffs` (default 3), `settle` (windows not judged after each
change, default 1: the queue the previous rate left drains), `confirm` (windows in a row that must
break the SLO while ramping, default 2: a stall breaks one window on its own), and the SLO: `p50_ms`, `p90_ms`,
`p95_ms`, `p99_ms`, `p999_ms`, `error_rate` (at least one latency bound).

A window also breaks it when the server completed more than 5 % fewer requests than were sent in it:
the queue grows, so the rate is over the capacity even before its latency shows it. After a step back
the windows that complete 5 % more than were sent (the backlog of the rate before draining) are not
judged, up to 10 of them: a hold starts once the queue is empty.

A window is judged once it is complete (its end passed; on a master also one worker report interval
more), in order. A change takes effect at the first window that starts at least `LEAD_S` ahead, so
arrivals drawn ahead (the native feed draws half a second ahead) keep their rate. Its decisions go
to `ramp_hold.json` in the results folder; `inferload sweep --ramp-hold` reads it and puts the
hold's percentile interval next to it. Needs an open-loop shape (constant-rate or poisson) and one
target. The rule, its parsing and the window-by-window plan are here; `inferload.run.ramp_hold`
feeds the plan from a run's record and applies its changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from inferload.measure.hdr import LatencyStats
from inferload.scenario.schema import Scenario
from inferload.scenario.shapes import ConstantRateShape, PoissonShape
from inferload.traffic.arrivals import AdjustableTimeline

RATE_MESSAGE = "inferload_ramp_hold_rate"
RAMP_HOLD_JSON = "ramp_hold.json"
#: a change applies from the first window starting at least this far ahead
LEAD_S = 0.6
#: a window whose completions fall this share short of the requests sent: the queue grows (the rate is
#: over the capacity even while the latency is still under its bound) ...
QUEUE_SHORTFALL = 0.05
#: ... judged on windows of at least this many requests sent
QUEUE_MIN_ARRIVALS = 40
#: after a change, windows that complete more than they were sent (a backlog draining) are waited out,
#: at most this many
MAX_DRAIN_WINDOWS = 10
SLO_KEYS = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "error_rate")


@dataclass(frozen=True)
class RampHoldRule:
    slo: dict[str, float]
    step_pct: float = 10.0
    sustain_s: float = 30.0
    max_unsent: float = 0.01
    max_backoffs: int = 3
    settle_windows: int = 1
    #: while ramping, this many windows in a row must break the SLO before the rate steps back (one
    #: window's p99 is a hundred requests' worst: a stall of the machine breaks it on its own)
    confirm_windows: int = 2


def parse_ramp_hold(text: str) -> RampHoldRule:
    """SPEC as a rule; ValueError naming the key and what was expected."""
    slo: dict[str, float] = {}
    values: dict[str, float] = {}
    known = {"step", "sustain", "max_unsent", "backoffs", "settle", "confirm"}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or (key not in known and key not in SLO_KEYS):
            raise ValueError(
                f"--ramp-hold: expected KEY=VALUE with KEY one of {', '.join(sorted(known))}, {', '.join(SLO_KEYS)}; got {part!r}"
            )
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"--ramp-hold {key}: expected a number; got {raw!r}") from None
        least_zero = key == "settle"  # settle may be 0 windows; every other value must be above 0
        if not math.isfinite(number) or number < 0 or (number == 0 and not least_zero):
            raise ValueError(f"--ramp-hold {key}: expected a number above 0; got {raw!r}")
        (slo if key in SLO_KEYS else values)[key] = number
    if not any(key != "error_rate" for key in slo):
        raise ValueError("--ramp-hold: needs a latency bound, e.g. p99_ms=50")
    if ("error_rate" in slo and slo["error_rate"] > 1) or values.get("max_unsent", 0.01) >= 1:
        raise ValueError("--ramp-hold error_rate and max_unsent: expected a share below 1")
    return RampHoldRule(
        slo=slo,
        step_pct=values.get("step", 10.0),
        sustain_s=values.get("sustain", 30.0),
        max_unsent=values.get("max_unsent", 0.01),
        max_backoffs=int(values.get("backoffs", 3)),
        settle_windows=int(values.get("settle", 1)),
        confirm_windows=max(1, int(values.get("confirm", 2))),
    )


def rule_spec(rule: RampHoldRule) -> str:
    """The rule back as SPEC (what `inferload sweep --ramp-hold` passes to Locust)."""
    parts = [
        f"step={rule.step_pct:g}",
        f"sustain={rule.sustain_s:g}",
        f"max_unsent={rule.max_unsent:g}",
        f"backoffs={rule.max_backoffs}",
        f"settle={rule.settle_windows}",
        f"confirm={rule.confirm_windows}",
    ]
    return ",".join(parts + [f"{key}={value:g}" for key, value in rule.slo.items()])


def ramp_problem(scenario: Scenario) -> str | None:
    """Why this scenario cannot ramp and hold, in words; None when it can."""
    shape = scenario.shape
    if not isinstance(shape, (ConstantRateShape, PoissonShape)):
        return f"--ramp-hold: needs a constant-rate or poisson shape; the scenario's is {shape.kind}"
    if len(scenario.targets) != 1:
        return f"--ramp-hold: needs one target; the scenario has {len(scenario.targets)}"
    return None


def ramp_timeline(scenario: Scenario) -> AdjustableTimeline:
    """The scenario's rate, changeable while the run goes."""
    shape: Any = scenario.shape
    return AdjustableTimeline(scenario.duration, float(shape.rate), isinstance(shape, PoissonShape))


@dataclass(frozen=True)
class RampWindow:
    """One complete window of the run's one target."""

    index: int
    stats: LatencyStats
    arrivals: int = 0
    unsent: int = 0


def breaks(stats: LatencyStats, arrivals: int, unsent: int, rule: RampHoldRule) -> str | None:
    """What in this window (or merged windows) breaks the SLO, in words; None when it meets it."""
    if not stats.requests:
        return "no request completed"
    figures = stats.latency_ms()
    for key, bound in rule.slo.items():
        if key == "error_rate":
            rate = stats.failures / stats.requests
            if rate > bound:
                return f"errors {rate:.2%} > {bound:.2%}"
            continue
        value = figures.get(key.removesuffix("_ms"))
        if value is None or value > bound:
            return f"{key.removesuffix('_ms')} {value if value is None else round(value, 2)} ms > {bound:g} ms"
    if arrivals and unsent / arrivals > rule.max_unsent:
        return f"{unsent} of {arrivals} arrivals unsent (more than {rule.max_unsent:.0%})"
    sent = arrivals - unsent
    if sent >= QUEUE_MIN_ARRIVALS and stats.requests < (1.0 - QUEUE_SHORTFALL) * sent:
        return f"the queue grows: {sent} requests sent, {stats.requests} completed"
    return None


@dataclass(frozen=True)
class RateChange:
    from_index: int  # the first window at the new rate
    rate: float
    why: str


@dataclass(frozen=True)
class RampEnd:
    held_rps: float | None
    why: str


@dataclass
class RampHoldPlan:
    """The mode's decisions, window by window (pure: windows in, changes out)."""

    rule: RampHoldRule
    rate: float
    window_s: float
    phase: str = "ramp"  # "ramp" | "hold" | "done"
    judged_from: int | None = None  # windows before this index are at an older rate, or settling
    last_passing: float | None = None
    backoffs: int = 0
    hold_from: int | None = None
    held: LatencyStats = field(default_factory=LatencyStats)
    held_arrivals: list[int] = field(default_factory=lambda: [0, 0])
    held_windows: int = 0
    breaking_in_a_row: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    #: (first window index, rate) of every rate offered, oldest first
    schedule: list[tuple[int, float]] = field(default_factory=list)
    #: windows waited since the last change for a backlog to drain
    drained_windows: int = 0

    def rate_of(self, index: int) -> float:
        """The rate offered during window `index`."""
        offered = [rate for first, rate in self.schedule if first <= index]
        return offered[-1] if offered else (self.schedule[0][1] if self.schedule else self.rate)

    @property
    def hold_windows(self) -> int:
        return max(1, math.ceil(self.rule.sustain_s / self.window_s - 1e-9))

    def draining(self, window: RampWindow) -> bool:
        """More completed than sent (by over 5 %): a backlog drains; at most `MAX_DRAIN_WINDOWS` after a change."""
        sent = window.arrivals - window.unsent
        return (
            self.drained_windows < MAX_DRAIN_WINDOWS
            and sent >= QUEUE_MIN_ARRIVALS
            and window.stats.requests > (1.0 + QUEUE_SHORTFALL) * sent
        )

    def _change(self, from_index: int, rate: float, why: str) -> RateChange:
        self.rate = rate
        self.drained_windows = 0
        self.schedule.append((from_index, rate))
        self.judged_from = from_index + self.rule.settle_windows
        return RateChange(from_index, rate, why)

    def _start_hold(self, from_index: int, rate: float, why: str) -> RateChange:
        self.phase = "hold"
        self.held = LatencyStats()
        self.held_arrivals = [0, 0]
        self.held_windows = 0
        self.breaking_in_a_row = 0
        change = self._change(from_index, rate, why)
        self.hold_from = self.judged_from
        return change

    def _back_off(self, next_index: int, why: str) -> RateChange | RampEnd:
        self.backoffs += 1
        if self.backoffs > self.rule.max_backoffs:
            self.phase = "done"
            return RampEnd(None, f"{why}; no rate held after {self.rule.max_backoffs} steps back")
        return self._start_hold(next_index, self.rate / (1.0 + self.rule.step_pct / 100.0), f"{why}: one step back")

    def on_window(self, window: RampWindow, next_index: int) -> RateChange | RampEnd | None:
        """Judge one complete window (in order); `next_index` is the first window a change can start at."""
        if self.phase == "done":
            return None
        if self.judged_from is None:
            self.judged_from = window.index
            self.schedule.append((window.index, self.rate))
        judged = window.index >= self.judged_from
        if judged and self.draining(window):
            # the queue a higher rate left is still draining: the window says nothing of this rate yet,
            # and a hold counted so far started too early: it starts again
            self.drained_windows += 1
            self.judged_from = window.index + 1
            judged = False
            if self.phase == "hold":
                self.held, self.held_arrivals, self.held_windows, self.breaking_in_a_row = LatencyStats(), [0, 0], 0, 0
                self.hold_from = window.index + 1
        why = breaks(window.stats, window.arrivals, window.unsent, self.rule) if judged else None
        self.history.append(
            {
                "index": window.index,
                "start": window.index * self.window_s,
                "rate": self.rate_of(window.index),
                "phase": self.phase if judged else "settling",
                "p99_ms": window.stats.latency_ms()["p99"],
                "requests": window.stats.requests,
                "breaks": why,
            }
        )
        if not judged:
            return None
        step = 1.0 + self.rule.step_pct / 100.0
        if self.phase == "ramp":
            if why is None:
                self.breaking_in_a_row = 0
                self.last_passing = self.rate
                return self._change(next_index, self.rate * step, f"{self.rate:g} req/s met the SLO: one step up")
            self.breaking_in_a_row += 1
            if self.breaking_in_a_row < self.rule.confirm_windows:
                return None  # one more window at this rate before stepping back
            back = self.last_passing if self.last_passing is not None else self.rate / step
            return self._start_hold(next_index, back, f"{self.rate:g} req/s broke it ({why}): holding {back:g} req/s")
        self.held.merge(window.stats)
        self.held_arrivals[0] += window.arrivals
        self.held_arrivals[1] += window.unsent
        self.held_windows += 1
        self.breaking_in_a_row = self.breaking_in_a_row + 1 if why else 0
        if self.breaking_in_a_row >= 3:
            return self._back_off(next_index, f"3 windows in a row broke the SLO at {self.rate:g} req/s ({why})")
        if self.held_windows < self.hold_windows:
            return None
        verdict = breaks(self.held, self.held_arrivals[0], self.held_arrivals[1], self.rule)
        if verdict is None:
            self.phase = "done"
            return RampEnd(self.rate, f"held {self.rate:g} req/s for {self.held_windows * self.window_s:g} s within the SLO")
        return self._back_off(next_index, f"the hold at {self.rate:g} req/s broke the SLO ({verdict})")
