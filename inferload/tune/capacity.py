"""Capacity under an SLO: the highest open-loop rate (or, closed loop, the most users) whose latency,
errors and queue meet it, with its interval, the constraint that binds it, and the runs that verify it
(pure: the runs come from a `measure` callback; `inferload.tune.sweep` runs them as steps).

**Levels.** What the search steps is a `LevelUnit`: an offered rate (`RATE`, req/s, any positive
number) or a number of closed-loop users (`USERS`, whole numbers from 1): the same rule judges both;
with users a probe is rounded to a whole number never measured yet, the boundary lies between two user
counts, and its estimate is the highest whole count under the fitted crossing.

**Evidence.** Every run of the search is a `RunEvidence`: its offered rate, its steady windows' HDR
histograms, and the constraints it broke outright (`saturated`: arrivals unsent; `queue`: the queue
grew without bound; `memory`). Runs at one rate are pooled into a `Level`.

**The decision rule, per rate.** Each latency bound's percentile and the error rate come with a
95 % interval (`inferload.tune.capacity_stats`: a bootstrap over windows with a binomial rank). A
rate *passes* only when every interval lies under its bound and no run at it broke a hard constraint;
it *fails* when an interval lies wholly over its bound or every run at it broke one; otherwise it is
*unsure* and is measured again (at most `runs_per_rate` runs pooled), within the step and time budget.

**The curve and the boundary.** The latency of every rate is fitted nondecreasing in the rate
(isotonic regression in log latency, weighted by requests), so one noisy rate cannot reverse the
answer. Under the fit the boundary lies between the last rate under every bound and the first over
one. Its interval comes from the same bootstrap: each replicate refits the curve from every rate's
replicate and finds its own pair (last under, first over); the interval runs from the 2.5 % quantile
of the lower ends to the 97.5 % quantile of the upper ends, so it is never narrower than the rates
measured around the boundary. The estimate interpolates the fitted curve (linear in log latency)
between the pair. The search ends when the interval is within `precision_pct`.

**Verification**: two independent runs, below and above the boundary, each judged on its own. When
one goes the other way (a pass above, a fail below), the machine moved between the search and its
check: the answer then takes those runs into its fit too, and says so.

**Runs that say nothing of the server** (the generator sent late while senders were free: its
machine stalled it) are left out of the fit and measured again; a rate that lags three times is the
generator's limit.

**Where to measure next**: a rate that contradicts a higher one (failed below a pass) is measured
again first (perf_analyzer's "two trials agree"); then the start rate, doubled after a pass and
halved after a fail until the boundary is bracketed; an unsure rate in the interval again; then the
estimate steers: just under it (within the bracket's middle half while the bracket is wide), then
just over it, so two runs can close a bracket that bisection needs four or five for. When every gap
in the interval is already finer than the precision but the interval is not, the boundary is as
sharp as the machine's noise allows: the search says so and stops.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from inferload.scenario.limits import MAX_RATE, MAX_USERS
from inferload.tune.capacity_stats import (
    REPLICATES,
    WindowHistogram,
    error_rate,
    error_rate_replicates,
    interval,
    isotonic_increasing,
    isotonic_increasing_rows,
    log_crossing,
    missed_goodput,
    missed_goodput_replicates,
    percentile_interval,
)

#: the SLO's latency keys and the percentile each names
PERCENTILE_OF = {"p50_ms": 50.0, "p90_ms": 90.0, "p95_ms": 95.0, "p99_ms": 99.0, "p999_ms": 99.9}
#: hard constraints a run can break outright, and how each is named to the user
HARD_NAMES = {
    "saturated": "unsent arrivals (every sender busy, the queue full)",
    "queue": "the server's queue grew without bound",
    "memory": "memory",
}
#: latencies above this many times their bound weigh in the fit as this (a replicate's +inf stays finite)
_CAP_FACTOR = 100.0

PASS, FAIL, UNSURE = "pass", "fail", "unsure"
#: a rate whose runs the generator could not send on time this many times is the generator's limit
MAX_INVALID_RUNS = 3


@dataclass(frozen=True)
class LevelUnit:
    """What a capacity search steps: its name for people, its key in sweep.json, whether it is whole."""

    name: str  # "req/s" | "users"
    key: str  # "rps" | "users": sweep.json's capacity keys end in it (interval_rps, interval_users)
    whole: bool
    most: float  # the most a scenario may ask

    def probe(self, value: float) -> float:
        """A level to measure: a rate to the millisecond of req/s, users as a whole number from 1."""
        return float(max(1, round(value))) if self.whole else round(value, 3)


RATE = LevelUnit("req/s", "rps", whole=False, most=MAX_RATE)
USERS = LevelUnit("users", "users", whole=True, most=float(MAX_USERS))


@dataclass(frozen=True)
class CapacitySearch:
    """`--find-max-rps` (or `--find-max-users`): where to start, when to stop, how hard to look."""

    #: the first level tried (req/s, or users)
    start_rps: float
    #: stop when the boundary's interval is within this (%): (high - low) / low
    precision_pct: float = 5.0
    #: runs the search may make (repeats included, verification not)
    max_steps: int = 12
    #: never go below this share of the start rate while looking for a passing rate
    min_share: float = 1 / 64
    #: an unsure or contradicted rate is measured again until this many runs are pooled at it
    runs_per_rate: int = 2
    #: latency jumping by more than this factor between adjacent rates is a cliff
    cliff_factor: float = 3.0
    #: independent runs below and above the boundary once it is found
    verify: bool = True
    #: no rate above this is offered (the generator's calibrated roofline x processes); None: no ceiling
    ceiling_rps: float | None = None
    #: below this rate a run cannot hold the requests its highest percentile needs (set by the sweep)
    lowest_decidable_rps: float = 0.0
    #: what the search steps: open-loop rates or closed-loop users
    unit: LevelUnit = RATE


#: the goodput bound's key: the share of requests that were not good (failed, or missed a threshold)
GOODPUT = "goodput"


@dataclass(frozen=True)
class Bounds:
    """What a rate must meet: latency percentiles (ms) by SLO key, the error rate, and (a generative
    target with goodput thresholds) the least share of requests that were good (%)."""

    latency_ms: dict[str, float]
    error_rate: float = 0.01
    min_goodput_pct: float | None = None

    @property
    def missed_goodput(self) -> float:
        """The most requests that may miss the goodput thresholds, as a share (1.0: no bound)."""
        return 1.0 if self.min_goodput_pct is None else 1.0 - self.min_goodput_pct / 100.0

    def words(self) -> str:
        parts = [f"{key.removesuffix('_ms')} ≤ {bound:g} ms" for key, bound in self.latency_ms.items()]
        if self.min_goodput_pct is not None:
            parts.append(f"goodput ≥ {self.min_goodput_pct:g} % of requests")
        return ", ".join([*parts, f"errors ≤ {self.error_rate:.2%}"])


@dataclass(frozen=True)
class RunEvidence:
    """One run at one offered rate (or number of users), as the search sees it."""

    rate: float  # the level run: req/s offered, or users (the search's `LevelUnit`)
    windows: tuple[WindowHistogram, ...]
    #: hard constraints this run broke: (name in HARD_NAMES, why in words)
    broken: tuple[tuple[str, str], ...] = ()
    #: why the load generator, not the server, bounded this run (None: it did not); never fitted
    generator: str | None = None
    #: why this run says nothing of the server (the generator sent late while senders were free: a
    #: stall of the client's machine, not the server's queue); never fitted, measured again
    invalid: str | None = None
    #: the sweep step it was (for the reports)
    step: int = 0
    #: the rate the server answered at in the run (None: not known); the capacity is never above the
    #: most any run achieved
    achieved_rps: float | None = None


@dataclass(frozen=True)
class MetricInterval:
    """One bound at one rate: the figure over the pooled windows and its 95 % interval."""

    key: str  # "p99_ms", ..., "error_rate", or GOODPUT (the share of requests not good)
    bound: float
    estimate: float | None
    low: float
    high: float

    @property
    def verdict(self) -> str:
        if self.high <= self.bound:
            return PASS
        if self.low > self.bound:
            return FAIL
        return UNSURE

    def words(self) -> str:
        if self.key == "error_rate":
            return f"errors {_pct(self.estimate)} [{_pct(self.low)}, {_pct(self.high)}]"
        if self.key == GOODPUT:  # as the attainment: the good share
            good = None if self.estimate is None else 1.0 - self.estimate
            return f"goodput {_pct(good)} [{_pct(1.0 - self.high)}, {_pct(1.0 - self.low)}] of requests"
        name = self.key.removesuffix("_ms")
        return f"{name} {_ms(self.estimate)} [{_ms(self.low)}, {_ms(self.high)}] ms"


@dataclass(frozen=True)
class Level:
    """Everything measured at one rate (or number of users), judged."""

    rate: float  # req/s, or users
    steps: tuple[int, ...]
    windows: int
    requests: int
    metrics: tuple[MetricInterval, ...]
    #: each hard constraint broken here: name -> (share of the runs that broke it, why)
    broken: dict[str, tuple[float, str]]
    #: the fitted (isotonic) latency of each bound here, ms
    fitted_ms: dict[str, float]
    verdict: str  # PASS, FAIL, UNSURE

    @property
    def runs(self) -> int:
        return len(self.steps)

    def metric(self, key: str) -> MetricInterval | None:
        return next((m for m in self.metrics if m.key == key), None)

    def words(self) -> str:
        parts = [m.words() for m in self.metrics]
        parts += [f"{HARD_NAMES.get(name, name)} in {share:.0%} of runs" for name, (share, _) in self.broken.items()]
        return ", ".join(parts)


@dataclass(frozen=True)
class Boundary:
    """Where the SLO stops being met, with its interval (req/s, or users: the search's `LevelUnit`;
    the `_rps` names are the rate search's, kept)."""

    low_rps: float  # 0.0: no rate was under every bound
    high_rps: float  # math.inf: no rate was over one
    estimate_rps: float | None  # None: not bracketed
    highest_pass_rps: float | None  # the highest rate under the boundary that passed on its own interval
    first_over_rps: float | None  # the first rate over a bound under the fitted curve
    under_rps: float | None  # the rate just below it (the fitted curve's last rate under every bound)
    binding: str | None  # the constraint that binds: an SLO key, "error_rate", GOODPUT or a HARD_NAMES key
    binding_words: str | None
    cliff: str | None  # the latency jump at the boundary, when it is a cliff

    @property
    def width_pct(self) -> float | None:
        if self.low_rps <= 0 or not math.isfinite(self.high_rps):
            return None
        return (self.high_rps - self.low_rps) / self.low_rps * 100.0


@dataclass(frozen=True)
class Judgement:
    levels: tuple[Level, ...]
    boundary: Boundary
    #: the runs the generator bounded (not in the fit)
    generator_runs: tuple[RunEvidence, ...] = ()
    #: the runs that said nothing of the server (not in the fit), in the order they ran
    invalid_runs: tuple[RunEvidence, ...] = ()
    #: the last run was one of those
    last_invalid: RunEvidence | None = None


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "∞"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _group(runs: Sequence[RunEvidence]) -> list[list[RunEvidence]]:
    by_rate: dict[float, list[RunEvidence]] = {}
    for run in runs:
        by_rate.setdefault(round(run.rate, 6), []).append(run)
    return [by_rate[rate] for rate in sorted(by_rate)]


def _first_over(over: Sequence[bool]) -> int | None:
    return next((i for i, flag in enumerate(over) if flag), None)


def judge(
    runs: Sequence[RunEvidence],
    bounds: Bounds,
    cliff_factor: float = 3.0,
    replicates: int = REPLICATES,
    seed: int = 0,
    unit: LevelUnit = RATE,
) -> Judgement:
    """Every level's verdict, the fitted curve, and the boundary with its interval."""
    rng = np.random.default_rng(seed)
    groups = _group([r for r in runs if r.generator is None and r.invalid is None])
    rates = [group[0].rate for group in groups]
    keys = list(bounds.latency_ms)
    caps = {key: bounds.latency_ms[key] * _CAP_FACTOR for key in keys}
    estimates: dict[str, list[float]] = {key: [] for key in keys}
    reps: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    error_reps: list[np.ndarray] = []
    missed_reps: list[np.ndarray] = []
    weights: list[float] = []
    request_weights: list[float] = []
    partial: list[tuple[list[RunEvidence], tuple[MetricInterval, ...], dict[str, tuple[float, str]]]] = []
    for group in groups:
        windows = [w for run in group for w in run.windows]
        run_sizes = [len(run.windows) for run in group if run.windows]
        metrics = []
        for key in keys:
            estimate, replicate = percentile_interval(windows, PERCENTILE_OF[key], rng, replicates, run_sizes)
            low, high = interval(replicate)
            metrics.append(MetricInterval(key, bounds.latency_ms[key], estimate, low, high))
            estimates[key].append(min(estimate, caps[key]) if estimate is not None else caps[key])
            reps[key].append(np.minimum(replicate, caps[key]))
        errors = error_rate_replicates(windows, rng, replicates, run_sizes)
        low, high = interval(errors)
        metrics.append(MetricInterval("error_rate", bounds.error_rate, error_rate(windows), low, high))
        error_reps.append(errors)
        if bounds.min_goodput_pct is not None:
            missed = missed_goodput_replicates(windows, rng, replicates, run_sizes)
            low, high = interval(missed)
            metrics.append(MetricInterval(GOODPUT, bounds.missed_goodput, missed_goodput(windows), low, high))
            missed_reps.append(missed)
        weights.append(max(1.0, float(sum(w.successes for w in windows))))
        request_weights.append(max(1.0, float(sum(w.requests for w in windows))))
        broken: dict[str, tuple[float, str]] = {}
        for name in HARD_NAMES:
            reasons = [why for run in group for broken_name, why in run.broken if broken_name == name]
            if reasons:
                broken[name] = (len(reasons) / len(group), reasons[-1])
        partial.append((group, tuple(metrics), broken))
    # the fitted curve of each bound (log latency), the error rate, and the point verdicts
    fitted = {key: isotonic_increasing([math.log(v) for v in estimates[key]], weights) for key in keys}

    def fitted_share(key: str) -> list[float]:
        return isotonic_increasing(
            [next((m.estimate or 0.0 for m in metrics if m.key == key), 0.0) for _, metrics, _ in partial], request_weights
        )

    fitted_errors = fitted_share("error_rate")
    fitted_missed = fitted_share(GOODPUT)
    levels: list[Level] = []
    over_full: list[bool] = []
    for index, (group, judged, broken) in enumerate(partial):
        hard_all = any(share >= 1.0 for share, _ in broken.values())
        if any(m.verdict == FAIL for m in judged) or hard_all:
            verdict = FAIL
        elif all(m.verdict == PASS for m in judged) and not broken:
            verdict = PASS
        else:
            verdict = UNSURE
        levels.append(
            Level(
                rate=group[0].rate,
                steps=tuple(run.step for run in group),
                windows=sum(len(run.windows) for run in group),
                requests=sum(w.requests for run in group for w in run.windows),
                metrics=judged,
                broken=broken,
                fitted_ms={key: math.exp(fitted[key][index]) for key in keys},
                verdict=verdict,
            )
        )
        over_full.append(
            any(fitted[key][index] > math.log(bounds.latency_ms[key]) for key in keys)
            or fitted_errors[index] > bounds.error_rate
            or (bounds.min_goodput_pct is not None and fitted_missed[index] > bounds.missed_goodput)
            or any(share >= 0.5 for share, _ in broken.values())
        )
    low, high = _bootstrap_bracket(
        rates, keys, reps, (error_reps, missed_reps), weights, request_weights, partial, bounds, rng, replicates
    )
    boundary = _boundary(levels, over_full, bounds, low, high, cliff_factor, unit)
    if not unit.whole:  # users have no offered rate to fall behind
        boundary = _within_achieved(boundary, runs)
    return Judgement(
        tuple(levels),
        boundary,
        tuple(r for r in runs if r.generator is not None),
        tuple(r for r in runs if r.invalid is not None),
        runs[-1] if runs and runs[-1].invalid is not None else None,
    )


def _bootstrap_bracket(
    rates: list[float],
    keys: list[str],
    reps: dict[str, list[np.ndarray]],
    share_reps: tuple[list[np.ndarray], list[np.ndarray]],
    weights: list[float],
    request_weights: list[float],
    partial: list[tuple[list[RunEvidence], tuple[MetricInterval, ...], dict[str, tuple[float, str]]]],
    bounds: Bounds,
    rng: np.random.Generator,
    replicates: int,
) -> tuple[float, float]:
    """The boundary's interval: per replicate, the curve refitted and its pair (last rate under every
    bound, first over one) found; from the 2.5 % quantile of the lower ends to the 97.5 % of the upper."""
    if not rates:
        return 0.0, math.inf
    shares = np.array([max((s for s, _ in broken.values()), default=0.0) for _, _, broken in partial])
    logs = {key: np.log(np.vstack(reps[key])) for key in keys}  # levels x replicates
    error_reps, missed_reps = share_reps
    errors = np.vstack(error_reps)
    over = rng.random((replicates, len(rates))) < shares[None, :]
    for key in keys:
        over |= isotonic_increasing_rows(logs[key].T, weights) > math.log(bounds.latency_ms[key])
    over |= isotonic_increasing_rows(errors.T, request_weights) > bounds.error_rate
    if missed_reps:
        over |= isotonic_increasing_rows(np.vstack(missed_reps).T, request_weights) > bounds.missed_goodput
    any_over = over.any(axis=1)
    first = np.where(any_over, over.argmax(axis=1), len(rates))
    levels = np.asarray([*rates, math.inf])
    below = np.concatenate([[0.0], np.asarray(rates)])
    highs = levels[first]
    lows = np.where(any_over, below[first], rates[-1])
    tail = 0.025
    return float(np.quantile(lows, tail, method="lower")), float(np.quantile(highs, 1 - tail, method="higher"))


def _boundary(
    levels: list[Level], over: list[bool], bounds: Bounds, low: float, high: float, cliff_factor: float, unit: LevelUnit
) -> Boundary:
    if not levels:
        return Boundary(0.0, math.inf, None, None, None, None, None, None, None)
    first = _first_over(over)
    below = levels[:first] if first is not None else levels
    passing = [level.rate for level in below if level.verdict == PASS]
    highest_pass = max(passing) if passing else None
    if first is None or first == 0:
        binding, words = (None, None) if first is None else _binding(levels[0], None, bounds, unit)[1:]
        top = levels[-1].rate if first is None else None
        return Boundary(low, high, None, highest_pass, levels[0].rate if first == 0 else None, top, binding, words, None)
    a, b = levels[first - 1], levels[first]
    crossing, binding, words = _binding(b, a, bounds, unit)
    cliff = _cliff(a, b, cliff_factor, unit)
    estimate = (a.rate + b.rate) / 2.0 if cliff else crossing
    if unit.whole:  # the most users under the crossing, never fewer than the last count under every bound
        estimate = max(a.rate, float(math.floor(estimate + 1e-9)))
    return Boundary(low, high, estimate, highest_pass, b.rate, a.rate, binding, words, cliff)


#: a run whose server answered less than this share of the offered rate did not keep up with it
KEPT_UP_SHARE = 0.9


def _within_achieved(boundary: Boundary, runs: Sequence[RunEvidence]) -> Boundary:
    """A bracketed boundary with its upper end and estimate at most the highest rate the server
    answered at in a run it could not keep up with (offered 1,600 req/s, it answered 1,204: a
    capacity above that was never seen). A run the server kept up with bounds nothing: its achieved
    rate is its offered one, give or take the measurement; an open upper end stays open. Nor does an
    overloaded run that answered less than the boundary's lower end, a rate the server kept up with
    (an LLM server offered 80 req/s answered 30 after keeping up with 40: its throughput fell under
    the overload, or the client's in-flight cap bounded what it could send; either way that rate is
    not the capacity). Runs the generator bounded or that said nothing of the server are left out."""
    measured = [r for r in runs if r.achieved_rps is not None and r.generator is None and r.invalid is None]
    behind = [r.achieved_rps or 0.0 for r in measured if (r.achieved_rps or 0.0) < KEPT_UP_SHARE * r.rate]
    if not behind or not math.isfinite(boundary.high_rps):
        return boundary
    top = max(behind)
    if top <= boundary.low_rps or boundary.high_rps <= top:
        return boundary
    estimate = None if boundary.estimate_rps is None else min(boundary.estimate_rps, top)
    return replace(boundary, high_rps=top, estimate_rps=estimate)


def _binding(over: Level, under: Level | None, bounds: Bounds, unit: LevelUnit) -> tuple[float, str | None, str | None]:
    """(the lowest crossing between `under` and `over`, the constraint that gives it, in words)."""
    found: list[tuple[float, str, str]] = []
    midpoint = (under.rate + over.rate) / 2.0 if under is not None else over.rate
    for key, bound in bounds.latency_ms.items():
        if over.fitted_ms[key] > bound:
            crossing = (
                log_crossing(under.rate, under.fitted_ms[key], over.rate, over.fitted_ms[key], bound)
                if under is not None
                else over.rate
            )
            metric = over.metric(key)
            measured = metric.words() if metric else ""
            found.append((crossing, key, f"{key.removesuffix('_ms')} ≤ {bound:g} ms: {measured} at {over.rate:g} {unit.name}"))
    shares = [("error_rate", bounds.error_rate, f"errors ≤ {bounds.error_rate:.2%}")]
    if bounds.min_goodput_pct is not None:
        shares.append((GOODPUT, bounds.missed_goodput, f"goodput ≥ {bounds.min_goodput_pct:g} %"))
    for key, bound, named in shares:
        measured_share = over.metric(key)
        if measured_share is None or measured_share.estimate is None or measured_share.estimate <= bound:
            continue
        under_share = (under.metric(key) or measured_share).estimate if under is not None else None
        if under is not None and under_share is not None and under_share < bound < measured_share.estimate:
            share = (bound - under_share) / (measured_share.estimate - under_share)
            crossing = under.rate + share * (over.rate - under.rate)
        else:
            crossing = midpoint
        found.append((crossing, key, f"{named}: {measured_share.words()} at {over.rate:g} {unit.name}"))
    for name, (share, why) in over.broken.items():
        if share >= 0.5:
            found.append((midpoint, name, why))
    if not found and not bounds.latency_ms:  # over only in the fit's pooling, and no latency bound
        return midpoint, GOODPUT if bounds.min_goodput_pct is not None else "error_rate", f"(fitted) at {over.rate:g} {unit.name}"
    if not found:  # over only in the fit's pooling: the latency named by its fitted value
        key = max(bounds.latency_ms, key=lambda k: over.fitted_ms[k] / bounds.latency_ms[k])
        return (
            midpoint,
            key,
            f"{key.removesuffix('_ms')} ≤ {bounds.latency_ms[key]:g} ms (fitted) at {over.rate:g} {unit.name}",
        )
    crossing, key, words = min(found, key=lambda item: item[0])
    return crossing, key, words


def _cliff(under: Level, over: Level, factor: float, unit: LevelUnit) -> str | None:
    jumps = [(over.fitted_ms[key] / under.fitted_ms[key], key) for key in under.fitted_ms if under.fitted_ms[key] > 0]
    if not jumps:
        return None
    jump, key = max(jumps)
    if jump <= factor:
        return None
    name = key.removesuffix("_ms")
    return (
        f"a cliff: {name} jumps {jump:.1f}x ({_ms(under.fitted_ms[key])} → {_ms(over.fitted_ms[key])} ms) between"
        f" {under.rate:g} and {over.rate:g} {unit.name}"
    )


# -- where to measure next ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NextRun:
    rate: float
    why: str


@dataclass(frozen=True)
class SearchEnd:
    """Why the search ended: precision, noise, no-pass, ceiling, steps, budget, generator, broken, interrupted,
    or verification (its check went the other way and the answer was refitted)."""

    reason: str
    words: str


#: runs at each rate beside the boundary before the search may end within its precision (at most --runs-per-rate)
BRACKET_RUNS = 2


def _far_from(rate: float, rates: Sequence[float], share: float) -> bool:
    return all(abs(rate - other) > share * other for other in rates)


def _fresh(probe: float, rates: Sequence[float], gap: float, unit: LevelUnit) -> float | None:
    """`probe` as a level to measure (`unit.probe`), None when it is within `gap` of a level measured
    already (for users: it rounds to one)."""
    level = unit.probe(probe)
    if unit.whole:
        return None if level in rates else level
    return level if _far_from(level, rates, gap) else None


def next_run(judgement: Judgement, search: CapacitySearch, steps_done: int) -> NextRun | SearchEnd:
    """The next level (rate or users) to measure, or why the search is over."""
    unit = search.unit
    name = unit.name
    word = "user count" if unit.whole else "rate"
    if judgement.generator_runs:
        run = judgement.generator_runs[-1]
        return SearchEnd("generator", f"the load generator is the limit at {run.rate:g} {name}: {run.generator}")
    levels = judgement.levels
    precision = search.precision_pct / 100.0
    # the generator's calibrated roofline, and never above what a scenario may ask (a step there is refused)
    ceiling = min(search.ceiling_rps if search.ceiling_rps is not None else math.inf, unit.most)
    if steps_done >= search.max_steps:
        return SearchEnd("steps", f"the search made its {search.max_steps} runs")
    lagged = judgement.last_invalid
    if lagged is not None:
        tries = [run for run in judgement.invalid_runs if round(run.rate, 6) == round(lagged.rate, 6)]
        if len(tries) >= MAX_INVALID_RUNS:
            return SearchEnd(
                "generator",
                f"the load generator is the limit at {lagged.rate:g} {name}: {len(tries)} runs in a row, {lagged.invalid}",
            )
        return NextRun(lagged.rate, f"the generator lagged ({lagged.invalid}): measured again")
    if not levels:
        return NextRun(unit.probe(min(search.start_rps, ceiling)), f"the start {word}")
    again = search.runs_per_rate
    for level in levels:  # a fail below a pass: measure the fail again (two trials must agree)
        higher_pass = [other for other in levels if other.rate > level.rate and other.verdict == PASS]
        if level.verdict == FAIL and higher_pass and level.runs < again:
            return NextRun(level.rate, f"failed below {higher_pass[0].rate:g} {name}, which passed: measured again")
    boundary = judgement.boundary
    rates = [level.rate for level in levels]
    step_out = 1.0 + max(2.0 * precision, 0.2)
    if not math.isfinite(boundary.high_rps):  # nothing is surely over: go up
        top = levels[-1]
        if top.verdict == UNSURE and top.runs < again:
            return NextRun(top.rate, "unsure: measured again")
        if top.rate >= ceiling:
            why = "the most a scenario may ask" if ceiling >= unit.most else "the generator's calibrated roofline"
            return SearchEnd("ceiling", f"no {word} above {ceiling:g} {name} is offered ({why})")
        factor = 2.0 if top.verdict == PASS else step_out
        up = min(top.rate * factor, ceiling)
        up = min(max(unit.probe(up), top.rate + 1.0), ceiling) if unit.whole else up
        return NextRun(up, f"bracketing: above every {word} so far")
    if boundary.low_rps <= 0:  # nothing is surely under: go down
        bottom = levels[0]
        if bottom.verdict == UNSURE and bottom.runs < again:
            return NextRun(bottom.rate, "unsure: measured again")
        rate = bottom.rate / (2.0 if bottom.verdict == FAIL else step_out)
        if unit.whole:
            if bottom.rate <= 1.0:
                return SearchEnd("no-pass", f"no {word} down to {bottom.rate:g} {name} met the SLO")
            return NextRun(min(unit.probe(rate), bottom.rate - 1.0), f"bracketing: below every {word} so far")
        if rate < search.start_rps * search.min_share:
            return SearchEnd("no-pass", f"no rate down to {bottom.rate:g} req/s met the SLO")
        floor = search.lowest_decidable_rps
        if rate < floor:
            if bottom.rate > floor * 1.0001:
                return NextRun(round(floor, 3), "bracketing: the lowest rate a run can decide")
            return SearchEnd(
                "no-pass",
                f"no rate down to {bottom.rate:g} req/s was surely under the SLO, and a run at a lower rate cannot hold the"
                " requests its percentile needs (longer runs: --max-windows, --window)",
            )
        return NextRun(rate, "bracketing: below every rate so far")
    low, high = boundary.low_rps, boundary.high_rps
    under = boundary.under_rps or low
    over = boundary.first_over_rps or high

    def narrow(a: float, b: float) -> bool:  # no level between a and b is worth measuring
        return b / a - 1.0 <= precision + 1e-9 or (unit.whole and b - a <= 1.0 + 1e-9)

    if narrow(low, high) and narrow(under, over):
        # one run per level shows no run-to-run variation: the pair around the boundary is measured again,
        # each a run of its own later in time, before the interval may say it is within the precision
        beside = [each for each in levels if each.rate in (boundary.under_rps, boundary.first_over_rps)]
        for each in beside:
            if each.runs < min(again, BRACKET_RUNS):
                return NextRun(each.rate, f"a run-to-run check: the {word} beside the boundary measured again")
        within = (
            "lies between two user counts" if unit.whole and high - low <= 1.0 + 1e-9 else f"is within {search.precision_pct:g} %"
        )
        return SearchEnd("precision", f"the boundary's interval [{low:.4g}, {high:.4g}] {name} {within}")
    estimate = boundary.estimate_rps or math.sqrt(low * high)
    inside = [level for level in levels if min(low, under) <= level.rate <= max(high, over)]
    unsure = [level for level in inside if level.verdict == UNSURE and level.runs < again]
    if unsure:
        nearest = min(unsure, key=lambda level: abs(level.rate - estimate))
        return NextRun(nearest.rate, "unsure: measured again")
    gap = max(precision / 4.0, 0.01)
    if over / under - 1.0 > 2.0 * precision and not (unit.whole and over - under <= 2.0):
        # a wide bracket: the estimate steers, within its middle half
        quarter = (over - under) / 4.0
        probe = _fresh(min(max(estimate / (1.0 + 0.4 * precision), under + quarter), over - quarter), rates, gap, unit)
        if probe is not None and under < probe < over:
            return NextRun(probe, f"just under the estimate {estimate:.4g} {name}, inside the bracket")
    for near, why in ((estimate / (1.0 + 0.4 * precision), "just under"), (estimate * (1.0 + 0.4 * precision), "just over")):
        probe = _fresh(near, rates, gap, unit)
        if probe is not None and max(low, under / (1.0 + precision)) < probe < min(high, over * (1.0 + precision)):
            return NextRun(probe, f"{why} the estimate {estimate:.4g} {name}")
    span = [r for r in rates if low <= r <= high]
    gaps = [(b / a, a, b) for a, b in itertools.pairwise(span) if not narrow(a, b)]
    if not narrow(under, over):
        gaps.append((over / under, under, over))
    for _, a, b in sorted(gaps, reverse=True):
        middle = _fresh((a + b) / 2.0, rates, 0.0, unit)
        if middle is not None and a < middle < b:
            return NextRun(middle, "bisecting the widest gap in the interval")
    return SearchEnd(
        "noise",
        f"the boundary's interval [{low:.4g}, {high:.4g}] {name} is wider than {search.precision_pct:g} % although the"
        f" {word}s measured in it are closer than that: it is as sharp as this machine's noise allows at this step length",
    )


# -- the search and its verification --------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyRun:
    """An independent run below or above the boundary, judged on its own."""

    side: str  # "below" | "above"
    factor: float  # its level / the estimate
    level: Level
    unit: LevelUnit = RATE

    @property
    def as_expected(self) -> bool:
        return self.level.verdict == (PASS if self.side == "below" else FAIL)

    def words(self) -> str:
        rate = self.level.rate
        verdict = {PASS: "meets the SLO", FAIL: "does not", UNSURE: "is within the noise of it"}[self.level.verdict]
        if self.side == "above" and self.level.verdict == PASS:
            verdict = "meets it too"
        return f"{self.factor:.2g}x ({rate:g} {self.unit.name}) {verdict} ({self.level.words()})"


@dataclass(frozen=True)
class Verification:
    runs: tuple[VerifyRun, ...]

    @property
    def verified(self) -> bool | None:
        """True when every run went its side's way, False when one went the other way, None otherwise."""
        if not self.runs:
            return None
        if all(run.as_expected for run in self.runs):
            return True
        if any(run.level.verdict not in (UNSURE,) and not run.as_expected for run in self.runs):
            return False
        return None

    def words(self) -> str:
        lead = {True: "verified", False: "NOT verified", None: "not verified (within noise)"}[self.verified]
        return f"{lead}: " + ", ".join(run.words() for run in self.runs)


def verification_rates(boundary: Boundary, unit: LevelUnit = RATE) -> list[tuple[str, float]]:
    """The independent runs: 0.9x the estimate (or the interval's low end, if lower) and 1.1x (or its
    high end, if higher); below only when the boundary has no upper end. Users: the whole counts
    outside those (never the estimate itself)."""
    if boundary.estimate_rps is None:
        base = boundary.low_rps if boundary.low_rps > 0 else None
        if base is None or (unit.whole and base <= 1.0):
            return []
        return [("below", float(math.floor(base * 0.9)) if unit.whole else round(base * 0.9, 3))]
    estimate = boundary.estimate_rps
    below = min(estimate * 0.9, boundary.low_rps) if boundary.low_rps > 0 else estimate * 0.9
    above = max(estimate * 1.1, boundary.high_rps) if math.isfinite(boundary.high_rps) else None
    if unit.whole:
        below = float(min(math.floor(below), estimate - 1.0))
        above = None if above is None else float(max(math.ceil(above), estimate + 1.0))
        out = [("below", below)] if below >= 1.0 else []
    else:
        out = [("below", round(below, 3))]
    if above is not None:
        out.append(("above", above if unit.whole else round(above, 3)))
    return out


@dataclass
class CapacityAnswer:
    judgement: Judgement
    end: SearchEnd
    runs: list[RunEvidence] = field(default_factory=list)
    verification: Verification | None = None
    #: the verification went the other way, so the answer (`judgement`) took its runs into the fit; the
    #: verification was made around `searched` (the search's own boundary)
    refit: bool = False
    searched: Boundary | None = None


Measure = Callable[[float, str], "RunEvidence | SearchEnd"]


def search_capacity(
    measure: Measure,
    search: CapacitySearch,
    bounds: Bounds,
    runs: Sequence[RunEvidence] = (),
    may_continue: Callable[[], bool] = lambda: True,
    verified: Sequence[RunEvidence] = (),
) -> CapacityAnswer:
    """Measure (`measure(rate, role)`, role "search" or "verify") until the boundary is within the
    precision or a budget ends it, then verify it. `runs` and `verified` resume an earlier search."""
    evidence = list(runs)
    while True:
        judgement = judge(evidence, bounds, search.cliff_factor, unit=search.unit)
        step = next_run(judgement, search, len(evidence))
        if isinstance(step, SearchEnd):
            end = step
            break
        if not may_continue():
            end = SearchEnd("budget", "the time budget would end during the next run")
            break
        outcome = measure(step.rate, "search")
        if isinstance(outcome, SearchEnd):
            end = outcome
            break
        evidence.append(outcome)
    answer = CapacityAnswer(judgement, end, evidence)
    if not search.verify or end.reason in ("broken", "interrupted", "no-pass"):
        return answer
    checks = list(verified)
    valid = [run for run in checks if run.invalid is None and run.generator is None]
    for _side, rate in verification_rates(judgement.boundary, search.unit)[len(valid) :]:
        for _attempt in range(MAX_INVALID_RUNS):  # a run the generator stalled is measured again
            if not may_continue():
                break
            outcome = measure(rate, "verify")
            if isinstance(outcome, SearchEnd):
                if outcome.reason in ("broken", "interrupted"):
                    answer.end = outcome
                answer.verification = verify_runs(checks, judgement.boundary, bounds, search.unit)
                return answer
            checks.append(outcome)
            if outcome.invalid is None:
                break
    answer.verification = verify_runs(checks, judgement.boundary, bounds, search.unit)
    if answer.verification.verified is False:
        # a run went the other way: the machine's noise moved between the search and its check. The
        # answer takes every run into its fit (its interval widens to what they say together)
        answer.searched = judgement.boundary
        answer.judgement = judge([*evidence, *checks], bounds, search.cliff_factor, unit=search.unit)
        answer.refit = True
        # the search's reason for its answer (an interval within the precision, or as sharp as the noise
        # allows) no longer holds once the answer moved: the verification is why it ended. A budget's or
        # a generator's end still holds and is kept.
        if answer.end.reason in ("precision", "noise", "steps"):
            answer.end = SearchEnd(
                "verification",
                "the verification runs went the other way (the machine's noise moved between the search and its"
                " check); the answer takes them into its fit",
            )
    return answer


def verify_runs(checks: Sequence[RunEvidence], boundary: Boundary, bounds: Bounds, unit: LevelUnit = RATE) -> Verification:
    """Each verification run judged on its own, with its side and factor."""
    out = []
    base = boundary.estimate_rps or boundary.low_rps or 1.0
    sides = [side for side, _ in verification_rates(boundary, unit)]
    valid = [run for run in checks if run.invalid is None and run.generator is None]
    for side, run in zip(sides, valid, strict=False):
        level = judge([run], bounds, replicates=REPLICATES, unit=unit).levels
        if level:
            out.append(VerifyRun(side, run.rate / base, level[0], unit))
    return Verification(tuple(out))
