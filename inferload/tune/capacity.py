"""Capacity under an SLO: the highest open-loop rate whose stable p99 and error rate meet it.

Bracketing first (from the start rate, double after a pass, halve after a fail, until one rate
passes and a higher one fails), then bisection between the last passing and the first failing rate
until they are within the stated precision. The answer is the last passing rate, with the first
failing rate as its upper bound: the true capacity lies between them. A step where the load
generator was the limit ends the search: the capacity is then at least the last passing rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    PASS = "pass"
    FAIL = "fail"
    GENERATOR = "generator"  # the generator, not the server, bounded this rate
    BROKEN = "broken"  # the step could not run (start checks, a crash): the search stops
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class CapacitySearch:
    """`--find-max-rps`: start rate, the precision to bisect to (%), and a bound on steps."""

    start_rps: float
    precision_pct: float = 5.0
    max_steps: int = 12
    #: never go below this share of the start rate while looking for a passing rate
    min_share: float = 1 / 64


@dataclass(frozen=True)
class CapacityAnswer:
    max_rps: float | None  # the highest rate that passed (None: none did)
    first_failing_rps: float | None
    ended_by: Verdict | None  # what ended the search early (None: it reached the precision or the step bound)
    steps: int

    @property
    def precision_pct(self) -> float | None:
        if self.max_rps is None or self.first_failing_rps is None:
            return None
        return round((self.first_failing_rps - self.max_rps) / self.max_rps * 100.0, 2)


def next_rate(low: float | None, high: float | None, start: float) -> float:
    if low is None and high is None:
        return start
    if high is None:
        return (low or start) * 2
    if low is None:
        return high / 2
    return round((low + high) / 2, 3)


def search_capacity(
    measure: Callable[[float], Verdict],
    search: CapacitySearch,
    low: float | None = None,
    high: float | None = None,
    done: int = 0,
    may_continue: Callable[[], bool] = lambda: True,
) -> CapacityAnswer:
    """Run `measure(rate)` at the rates the search picks; `low`/`high`/`done` resume an earlier search."""
    steps = done
    while steps < search.max_steps and may_continue():
        if low is not None and high is not None and (high - low) / low * 100.0 <= search.precision_pct:
            return CapacityAnswer(low, high, None, steps)
        if low is None and high is not None and high < search.start_rps * search.min_share:
            return CapacityAnswer(None, high, None, steps)
        rate = next_rate(low, high, search.start_rps)
        verdict = measure(rate)
        steps += 1
        if verdict is Verdict.PASS:
            low = rate
        elif verdict is Verdict.FAIL:
            high = rate
        else:
            return CapacityAnswer(low, high, verdict, steps)
    return CapacityAnswer(low, high, None, steps)
