"""The capacity search without a server: its decisions, its curve, its boundary and interval, the
binding constraint, cliffs, verification and where it measures next, against a simulated queue whose
truth is known (tests/support/queue_sim.py: N slots, FIFO, fixed service time). Every draw is seeded,
so these cannot flip."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from inferload.tune.capacity import (
    FAIL,
    PASS,
    UNSURE,
    Bounds,
    CapacitySearch,
    NextRun,
    RunEvidence,
    SearchEnd,
    judge,
    next_run,
    search_capacity,
    verification_rates,
    verify_runs,
)
from inferload.tune.capacity_stats import histogram_of
from tests.support.queue_sim import simulate_run, true_boundary

SLOTS, SERVICE_MS, BOUND_MS = 4, 10.0, 30.0
BOUNDS = Bounds({"p99_ms": BOUND_MS})


def simulated(seed: int, windows: int = 4, **extra: object):
    rng = np.random.default_rng(seed)
    tried: list[tuple[float, str]] = []

    def measure(rate: float, role: str) -> RunEvidence:
        tried.append((rate, role))
        return simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=windows, step=len(tried), **extra)  # type: ignore[arg-type]

    return measure, tried


def test_a_rate_passes_only_under_the_bound_and_fails_only_over_it():
    rng = np.random.default_rng(1)
    runs = [simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=4) for rate in (100, 300, 400)]
    levels = judge(runs, BOUNDS).levels
    assert [level.verdict for level in levels] == [PASS, UNSURE, FAIL]
    p99 = levels[1].metric("p99_ms")
    assert p99 is not None and p99.low <= BOUND_MS < p99.high  # 300 req/s is within the noise of the bound


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_the_interval_contains_the_known_boundary(seed: int):
    """M/D/4 at 10 ms, p99 <= 30 ms: the truth is 305 req/s (a long simulation). Poisson arrivals, 4
    windows of 1 s per run, precision 10 %."""
    truth = true_boundary(SLOTS, SERVICE_MS, BOUND_MS)
    measure, tried = simulated(seed)
    answer = search_capacity(measure, CapacitySearch(start_rps=100, precision_pct=10), BOUNDS)
    boundary = answer.judgement.boundary
    assert boundary.low_rps <= truth <= boundary.high_rps, (boundary, answer.end)
    assert boundary.estimate_rps is not None and abs(boundary.estimate_rps / truth - 1) < 0.1
    assert boundary.binding == "p99_ms" and "p99 ≤ 30 ms" in (boundary.binding_words or "")
    assert [rate for rate, _ in tried[:3]] == [100, 200, 400]  # bracketing: doubled while it passed
    assert len([r for r in tried if r[1] == "search"]) <= 12


def test_a_search_verifies_its_answer_below_and_above():
    """Evenly spaced arrivals: the boundary is sharp (400 req/s), so 0.9x must pass and 1.1x fail."""
    measure, tried = simulated(21, windows=4, poisson=False)
    answer = search_capacity(measure, CapacitySearch(start_rps=100, precision_pct=10), BOUNDS)
    boundary = answer.judgement.boundary
    checks = [rate for rate, role in tried if role == "verify"]
    assert checks == [rate for _, rate in verification_rates(boundary)]
    assert checks[0] <= 0.9 * (boundary.estimate_rps or 0) + 1e-3 and checks[1] >= 1.1 * (boundary.estimate_rps or 0) - 1e-3
    verification = answer.verification
    assert verification is not None and verification.verified is True, verification
    assert verification.words().startswith("verified: 0.") and "meets the SLO" in verification.words()
    assert boundary.low_rps <= 400 <= boundary.high_rps


def test_a_verification_that_goes_the_wrong_way_says_so():
    rng = np.random.default_rng(22)
    boundary = judge([simulate_run(rate, SLOTS, SERVICE_MS, rng, poisson=False) for rate in (380, 420)], BOUNDS).boundary
    wrong = [simulate_run(rate, SLOTS, SERVICE_MS, rng, poisson=False) for rate in (300, 350)]  # "above" at 350 passes
    verification = verify_runs(wrong, boundary, BOUNDS)
    assert verification.verified is False and verification.words().startswith("NOT verified")
    assert "meets it too" in verification.words()


def test_a_cliff_is_said_as_such():
    """Evenly spaced arrivals on 4 slots of 10 ms: 10 ms until 400 req/s, then the queue grows without bound."""
    rng = np.random.default_rng(3)
    runs = [simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=4, poisson=False) for rate in (200, 380, 420)]
    boundary = judge(runs, BOUNDS).boundary
    assert boundary.cliff is not None and "a cliff: p99 jumps" in boundary.cliff and "between 380 and 420" in boundary.cliff
    assert boundary.low_rps == 380 and boundary.high_rps == 420
    assert boundary.estimate_rps == 400  # across a cliff, interpolating means nothing: the midpoint


def test_a_rate_that_failed_below_one_that_passed_is_measured_again():
    rng = np.random.default_rng(4)
    stalled = simulate_run(150, SLOTS, SERVICE_MS, rng, windows=4, stall_ms=400.0, stall_chance=1.0, step=2)
    runs = [simulate_run(100, SLOTS, SERVICE_MS, rng, step=1), stalled, simulate_run(250, SLOTS, SERVICE_MS, rng, step=3)]
    judgement = judge(runs, BOUNDS)
    assert [level.verdict for level in judgement.levels][1:] == [FAIL, PASS]
    step = next_run(judgement, CapacitySearch(start_rps=100), len(runs))
    assert isinstance(step, NextRun) and step.rate == 150 and "measured again" in step.why


def test_a_hard_constraint_binds_when_it_comes_first():
    rng = np.random.default_rng(5)
    runs = [
        simulate_run(100, SLOTS, SERVICE_MS, rng),
        RunEvidence(200, simulate_run(200, SLOTS, SERVICE_MS, rng).windows, (("memory", "server memory 900 MiB > 800 MiB"),)),
    ]
    boundary = judge(runs, BOUNDS).boundary
    assert boundary.binding == "memory" and "server memory 900 MiB > 800 MiB" in (boundary.binding_words or "")
    assert (boundary.highest_pass_rps, boundary.first_over_rps) == (100, 200)


def test_errors_bind_when_the_latency_is_fine():
    rng = np.random.default_rng(6)
    quick = [histogram_of(rng.lognormal(1.0, 0.2, 500)) for _ in range(4)]
    failing = [histogram_of(rng.lognormal(1.0, 0.2, 450), failures=50) for _ in range(4)]
    boundary = judge([RunEvidence(100, tuple(quick)), RunEvidence(200, tuple(failing))], BOUNDS).boundary
    assert boundary.binding == "error_rate" and "errors ≤ 1.00%" in (boundary.binding_words or "")


def test_the_generator_ends_the_search_with_a_lower_bound():
    rng = np.random.default_rng(7)

    def measure(rate: float, role: str) -> RunEvidence:
        run = simulate_run(rate, SLOTS, SERVICE_MS, rng)
        return RunEvidence(run.rate, run.windows, generator="the client used 0.95 cores" if rate >= 200 else None)

    answer = search_capacity(measure, CapacitySearch(start_rps=100), BOUNDS)
    assert answer.end.reason == "generator" and "at 200 req/s: the client used 0.95 cores" in answer.end.words
    assert answer.judgement.boundary.high_rps == math.inf and answer.judgement.boundary.highest_pass_rps == 100


def test_no_rate_above_the_calibrated_ceiling_is_offered():
    measure, tried = simulated(8)
    answer = search_capacity(measure, CapacitySearch(start_rps=100, ceiling_rps=150, verify=False), BOUNDS)
    assert max(rate for rate, _ in tried) == 150 and answer.end.reason == "ceiling"


def test_a_search_with_no_passing_rate_says_so():
    measure, tried = simulated(9)
    answer = search_capacity(measure, CapacitySearch(start_rps=3200, min_share=1 / 8), Bounds({"p99_ms": 5.0}))
    assert answer.end.reason == "no-pass" and answer.verification is None
    assert [rate for rate, _ in tried] == [3200, 1600, 800, 400]


def test_a_resumed_search_carries_on_from_its_runs():
    """Stopped after 3 runs and resumed with them, it measures what an uninterrupted search would."""
    measure, tried = simulated(10)
    first = search_capacity(measure, CapacitySearch(start_rps=100, max_steps=3, verify=False), BOUNDS)
    assert first.end.reason == "steps" and len(tried) == 3
    resumed = search_capacity(measure, CapacitySearch(start_rps=100, max_steps=6, verify=False), BOUNDS, first.runs)
    whole_measure, whole = simulated(10)
    search_capacity(whole_measure, CapacitySearch(start_rps=100, max_steps=6, verify=False), BOUNDS)
    assert len(resumed.runs) == 6 and tried == whole


def test_the_search_stops_within_the_precision_once_the_rates_beside_the_boundary_ran_twice():
    def run(rate: float, seed: int) -> RunEvidence:
        return simulate_run(rate, SLOTS, SERVICE_MS, np.random.default_rng(seed), windows=4, poisson=False)

    runs = [run(380, 380), run(420, 420)]
    step = next_run(judge(runs, BOUNDS), CapacitySearch(start_rps=100, precision_pct=15), 2)
    assert isinstance(step, NextRun) and step.rate == 380 and "run-to-run" in step.why  # one run each shows no variation
    runs.append(run(380, 1380))
    step = next_run(judge(runs, BOUNDS), CapacitySearch(start_rps=100, precision_pct=15), 3)
    assert isinstance(step, NextRun) and step.rate == 420
    runs.append(run(420, 1420))
    step = next_run(judge(runs, BOUNDS), CapacitySearch(start_rps=100, precision_pct=15), 4)
    assert isinstance(step, SearchEnd) and step.reason == "precision"
    single = CapacitySearch(start_rps=100, precision_pct=15, runs_per_rate=1)  # --runs-per-rate 1: no second run
    ended = next_run(judge(runs[:2], BOUNDS), single, 2)
    assert isinstance(ended, SearchEnd) and ended.reason == "precision"
    step = next_run(judge(runs, BOUNDS), CapacitySearch(start_rps=100, precision_pct=5), 4)
    assert isinstance(step, NextRun) and 380 < step.rate < 420


def test_a_run_the_generator_stalled_is_left_out_and_measured_again():
    """A stall of the client's machine (send lag with free senders) says nothing of the server."""
    rng = np.random.default_rng(30)
    stalled_once: set[float] = set()

    def measure(rate: float, role: str) -> RunEvidence:
        run = simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=4, poisson=False, stall_ms=300.0, stall_chance=0.0)
        if rate == 200 and rate not in stalled_once:
            stalled_once.add(rate)
            stalled = simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=4, poisson=False, stall_ms=400.0, stall_chance=1.0)
            return RunEvidence(rate, stalled.windows, invalid="send lag p99 212 ms > 37.5 ms while senders were free")
        return run

    answer = search_capacity(measure, CapacitySearch(start_rps=100, precision_pct=10, verify=False), BOUNDS)
    levels = {level.rate: level for level in answer.judgement.levels}
    assert levels[200].runs == 1 and levels[200].verdict == PASS  # the stalled run is not in it
    assert len([run for run in answer.runs if run.rate == 200]) == 2
    assert answer.judgement.boundary.low_rps <= 400 <= answer.judgement.boundary.high_rps


def test_a_rate_the_generator_cannot_send_on_time_ends_the_search():
    rng = np.random.default_rng(31)

    def measure(rate: float, role: str) -> RunEvidence:
        run = simulate_run(rate, SLOTS, SERVICE_MS, rng)
        return RunEvidence(run.rate, run.windows, invalid="send lag p99 90 ms > 20 ms" if rate >= 200 else None)

    answer = search_capacity(measure, CapacitySearch(start_rps=100), BOUNDS)
    assert answer.end.reason == "generator" and "at 200 req/s: 3 runs in a row" in answer.end.words


def test_late_arrivals_are_the_servers_when_it_did_not_keep_up():
    """Send lag with senders to spare is the client's stall, unless the server fell behind the rate."""
    from inferload.tune.capacity_steps import generator_lag
    from inferload.tune.step import StepResult
    from inferload.tune.stop_rules import StopRules

    rules = StopRules(slo={"p99_ms": 150.0}, max_send_lag_p99_ms=20.0)
    common = {"requests": 800, "error_rate": 0.0, "p99_ms": 90.0, "arrivals": 800, "unsent": 0, "max_in_flight": 128}
    stalled = StepResult(
        1, 200, 0, 10.0, "r", achieved_rps=198.0, p50_ms=25.0, send_lag_p50_ms=1.0, send_lag_p99_ms=80.0, **common
    )
    assert generator_lag(stalled, rules) == "send lag p99 80.0 ms > 37.5 ms while senders were free"
    behind = StepResult(
        2,
        200,
        0,
        10.0,
        "r",
        achieved_rps=164.0,
        p50_ms=560.0,
        send_lag_p50_ms=30.0,
        send_lag_p99_ms=480.0,
        p50_trend=2.2,
        **common,
    )
    assert generator_lag(behind, rules) is None


def test_a_verification_that_goes_the_other_way_takes_its_runs_into_the_answer():
    """The server got slower between the search and its check (a busy machine): 4 slots of 10 ms while
    searching, 4 of 13 ms when verified. The answer says so and its fit takes the checks in."""
    rng = np.random.default_rng(40)

    def measure(rate: float, role: str) -> RunEvidence:
        service = SERVICE_MS if role == "search" else 13.0
        return simulate_run(rate, SLOTS, service, rng, windows=4, poisson=False)

    answer = search_capacity(measure, CapacitySearch(start_rps=100, precision_pct=10), BOUNDS)
    assert answer.verification is not None and answer.verification.verified is False
    assert answer.refit and answer.searched is not None
    below = answer.verification.runs[0].level.rate
    assert answer.judgement.boundary.low_rps < below  # the fail below the old boundary is in the fit
    assert answer.searched.low_rps <= 400 <= answer.searched.high_rps
    # one answer, one reason: the search's "within the precision" is not said of the refitted answer
    assert answer.end.reason == "verification" and "within" not in answer.end.words


def test_the_capacity_is_never_bounded_above_the_most_the_server_answered_at():
    """The demo said 1,200 req/s [800, 1,600] where the server answered 1,204 req/s at 1,600 offered."""
    rng = np.random.default_rng(7)
    under = simulate_run(200.0, SLOTS, SERVICE_MS, rng, windows=4, poisson=False)
    over = simulate_run(1600.0, SLOTS, SERVICE_MS, rng, windows=4, poisson=False, step=2)
    assert judge([under, over], BOUNDS).boundary.high_rps > 420.0  # the offered rates alone bound it loosely
    answered = dataclasses.replace(over, achieved_rps=420.0)  # 4 slots of 10 ms answer at most 400 req/s
    boundary = judge([dataclasses.replace(under, achieved_rps=199.0), answered], BOUNDS).boundary
    assert boundary.high_rps == 420.0
    assert boundary.estimate_rps is None or boundary.estimate_rps <= 420.0
    stalled = dataclasses.replace(answered, generator="the generator fell behind")  # the generator's rate: not the server's
    assert judge([under, stalled], BOUNDS).boundary.high_rps != 420.0


def test_an_overload_that_answered_less_than_a_rate_kept_up_with_does_not_bound_the_capacity():
    """The LLM demo said 40.2 req/s [40.2, 40.213], "precision reached", where Triton kept up with 40.2
    and, offered 80.4, answered 29.8: the overload's rate is not the capacity, the bracket stays."""
    rng = np.random.default_rng(9)
    under = dataclasses.replace(simulate_run(200.0, SLOTS, SERVICE_MS, rng, windows=4, poisson=False), achieved_rps=199.0)
    over = simulate_run(1600.0, SLOTS, SERVICE_MS, rng, windows=4, poisson=False, step=2)
    collapsed = dataclasses.replace(over, achieved_rps=150.0)
    boundary = judge([under, collapsed], BOUNDS).boundary
    assert boundary.high_rps > 420.0  # as the offered rates bound it: nothing seen says the capacity is under 1,600
    assert boundary.low_rps <= 200.0 < boundary.high_rps


def test_runs_the_server_kept_up_with_leave_an_open_upper_end_open():
    """A pass at 50 req/s answered at 53: no rate was over the SLO, so nothing bounds the capacity above."""
    rng = np.random.default_rng(8)
    passed = dataclasses.replace(simulate_run(50.0, SLOTS, SERVICE_MS, rng, windows=4), achieved_rps=53.4)
    boundary = judge([passed], BOUNDS).boundary
    assert math.isinf(boundary.high_rps)  # it was capped at 53.4: a bracket, and the search stopped there


@pytest.mark.parametrize("seed", [31, 32])
def test_a_goodput_bound_finds_the_rate_where_the_good_share_falls_under_it(seed: int):
    """Streams judged good when they take at most 30 ms, at least 90 % good: on M/D/4 at 10 ms the
    truth is the rate whose p90 is 30 ms (a long simulation); no latency bound at all."""
    truth = true_boundary(SLOTS, SERVICE_MS, BOUND_MS, percentile=90.0)
    rng = np.random.default_rng(seed)

    def measure(rate: float, role: str) -> RunEvidence:
        return simulate_run(rate, SLOTS, SERVICE_MS, rng, windows=4, good_under_ms=BOUND_MS)

    bounds = Bounds({}, min_goodput_pct=90.0)
    answer = search_capacity(measure, CapacitySearch(start_rps=100, precision_pct=10), bounds)
    boundary = answer.judgement.boundary
    assert boundary.low_rps <= truth <= boundary.high_rps, (boundary, answer.end)
    assert boundary.binding == "goodput" and "goodput ≥ 90 %" in (boundary.binding_words or "")
    under = [level for level in answer.judgement.levels if level.rate < boundary.low_rps]
    good = under[0].metric("goodput")
    assert good is not None and good.estimate is not None and good.estimate < 0.1  # the share missed
    assert "goodput" in under[0].words() and "of requests" in under[0].words()
    assert bounds.words() == "goodput ≥ 90 % of requests, errors ≤ 1.00%"


def test_a_window_that_judged_no_request_counts_every_request_as_missed():
    rng = np.random.default_rng(5)
    judged = simulate_run(100, SLOTS, SERVICE_MS, rng, windows=4, good_under_ms=1000.0)
    unjudged = simulate_run(100, SLOTS, SERVICE_MS, rng, windows=4)
    bounds = Bounds({}, min_goodput_pct=50.0)
    assert [level.verdict for level in judge([judged], bounds).levels] == [PASS]
    assert [level.verdict for level in judge([unjudged], bounds).levels] == [FAIL]


def test_a_goodput_miss_names_the_threshold_over_at_the_bounds_percentile_else_the_next_one_over():
    from types import SimpleNamespace
    from typing import cast

    from inferload.results.schema import TargetSummary
    from inferload.tune.capacity_steps import threshold_misses

    def latency(**values: float) -> SimpleNamespace:
        return SimpleNamespace(**{key: values.get(key) for key in ("p50", "p90", "p95", "p99", "p999")})

    figures = SimpleNamespace(
        decoupled=SimpleNamespace(first_response_ms=latency(p50=20, p90=120, p95=400, p99=900, p999=950)),
        generation=SimpleNamespace(tpot_ms=latency(p50=5, p90=8, p95=9, p99=30, p999=40)),
        latency_ms=latency(p50=300, p90=500, p95=900, p99=1500, p999=1600),
    )
    step = cast(TargetSummary, figures)
    thresholds = {"ttft_ms": 100.0, "tpot_ms": 10.0}
    assert threshold_misses(step, thresholds, 90.0) == ["TTFT p90 120 ms > 100 ms"]
    assert threshold_misses(step, thresholds, 95.0) == ["TTFT p95 400 ms > 100 ms"]
    # the misses split: nothing over at p50 for a 50 % bound, so the first percentile where one is
    assert threshold_misses(step, {"tpot_ms": 10.0}, 50.0) == ["TPOT p99 30 ms > 10 ms"]
    assert threshold_misses(step, {"ttft_ms": 5000.0}, 90.0) == []
