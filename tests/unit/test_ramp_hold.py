"""The ramp-and-hold mode without a server: its spec, the plan's decisions window by
window (up a step while a window meets the SLO, back to the last rate that met it at the first that
breaks it, a hold judged as a whole, one more step back when the hold breaks), and the timeline whose
future it changes while the arrivals are drawn."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from inferload.measure.hdr import LatencyStats
from inferload.traffic.arrivals import AdjustableTimeline, RateLaw, next_arrival
from inferload.traffic.ramp_hold import RampEnd, RampHoldPlan, RampHoldRule, RampWindow, RateChange, parse_ramp_hold, rule_spec


def window(index: int, p99_like_ms: float, requests: int = 200, failures: int = 0, unsent: int = 0) -> RampWindow:
    stats = LatencyStats()
    rng = np.random.default_rng(index)
    for value in rng.uniform(p99_like_ms * 0.3, p99_like_ms * 0.98, requests):
        stats.record_success(float(value))
    for _ in range(failures):
        stats.record_failure()
    return RampWindow(index, stats, arrivals=requests + failures + unsent, unsent=unsent)


RULE = RampHoldRule(slo={"p99_ms": 50.0, "error_rate": 0.01}, step_pct=10.0, sustain_s=3.0, settle_windows=1, confirm_windows=1)


def test_the_spec_reads_and_writes_back():
    rule = parse_ramp_hold("p99_ms=50,step=20,sustain=10,backoffs=2,settle=0,error_rate=0.02,confirm=3")
    assert rule == RampHoldRule({"p99_ms": 50.0, "error_rate": 0.02}, 20.0, 10.0, 0.01, 2, 0, 3)
    assert parse_ramp_hold(rule_spec(rule)) == rule


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("step=10", "needs a latency bound"),
        ("p99_ms=fast", "--ramp-hold p99_ms: expected a number; got 'fast'"),
        ("p99_ms=50,speed=3", "expected KEY=VALUE with KEY one of"),
        ("p99_ms=50,step=0", "--ramp-hold step: expected a number above 0"),
        ("p99_ms=50,error_rate=2", "expected a share below 1"),
    ],
)
def test_a_bad_spec_says_what_was_expected(spec: str, message: str):
    with pytest.raises(ValueError, match=message):
        parse_ramp_hold(spec)


def test_the_rate_climbs_while_windows_meet_the_slo_and_holds_the_last_good_one():
    plan = RampHoldPlan(RULE, rate=100.0, window_s=1.0)
    first = plan.on_window(window(10, 20.0), next_index=12)
    assert isinstance(first, RateChange) and first.from_index == 12 and first.rate == pytest.approx(110.0)
    assert plan.on_window(window(11, 20.0), next_index=13) is None  # still at 100: before the change
    assert plan.on_window(window(12, 20.0), next_index=14) is None  # the change's settling window
    up = plan.on_window(window(13, 30.0), next_index=15)
    assert isinstance(up, RateChange) and up.rate == pytest.approx(121.0)
    plan.on_window(window(14, 20.0), next_index=16)
    plan.on_window(window(15, 20.0), next_index=17)  # settling
    back = plan.on_window(window(16, 90.0), next_index=18)  # 121 req/s breaks the SLO
    assert isinstance(back, RateChange) and back.rate == pytest.approx(110.0) and "holding 110 req/s" in back.why
    assert plan.phase == "hold"
    decisions = [plan.on_window(window(index, 30.0), next_index=index + 2) for index in range(17, 22)]
    end = decisions[-1]
    assert isinstance(end, RampEnd) and end.held_rps == pytest.approx(110.0)
    assert decisions[:-1] == [None] * 4  # still at 121, settling at 110, then the hold's three windows
    assert "held 110 req/s for 3 s within the SLO" in end.why
    assert [entry["rate"] for entry in plan.history[:4]] == [100.0, 100.0, pytest.approx(110.0), pytest.approx(110.0)]


def test_a_hold_that_breaks_the_slo_steps_back_once_more_and_gives_up_after_its_backoffs():
    rule = RampHoldRule(slo={"p99_ms": 50.0}, step_pct=10.0, sustain_s=2.0, max_backoffs=1, settle_windows=0, confirm_windows=1)
    plan = RampHoldPlan(rule, rate=100.0, window_s=1.0)
    assert isinstance(plan.on_window(window(0, 90.0), next_index=1), RateChange)  # the first window breaks it
    assert plan.rate == pytest.approx(100 / 1.1)
    plan.on_window(window(1, 40.0), next_index=2)
    again = plan.on_window(window(2, 80.0, requests=400), next_index=3)  # the hold's windows merged break it
    assert isinstance(again, RateChange) and again.rate == pytest.approx(100 / 1.1 / 1.1) and "one step back" in again.why
    plan.on_window(window(3, 90.0), next_index=4)
    end = plan.on_window(window(4, 90.0), next_index=5)
    assert isinstance(end, RampEnd) and end.held_rps is None and "no rate held after 1 steps back" in end.why


def test_errors_and_unsent_arrivals_break_a_window():
    plan = RampHoldPlan(RULE, rate=100.0, window_s=1.0)
    broke = plan.on_window(window(0, 20.0, failures=10), next_index=2)
    assert isinstance(broke, RateChange) and plan.phase == "hold" and "errors 4.76% > 1.00%" in broke.why
    plan = RampHoldPlan(RULE, rate=100.0, window_s=1.0)
    broke = plan.on_window(window(0, 20.0, unsent=20), next_index=2)
    assert isinstance(broke, RateChange) and "20 of 220 arrivals unsent" in broke.why


def test_the_timeline_takes_a_new_rate_from_its_time_on():
    timeline = AdjustableTimeline(duration=10.0, rate=100.0, poisson=False)
    timeline.change(2.0, 200.0)
    timeline.change(5.0, 50.0)
    assert [timeline.rate_at(t) for t in (0.0, 1.99, 2.0, 4.9, 5.0)] == [100.0, 100.0, 200.0, 200.0, 50.0]
    timeline.change(3.0, 300.0)  # replaces every later change
    assert timeline.steps() == [(0.0, 100.0), (2.0, 200.0), (3.0, 300.0)]
    times, t = [], 0.0
    while True:
        t = next_arrival(timeline, t, 1.0, random.Random(0))
        if t > 4.0:
            break
        times.append(t)
    assert len([x for x in times if x < 2.0]) == 199 and len([x for x in times if 3.0 <= x < 4.0]) in (299, 300)


def test_a_rate_law_on_the_timeline_follows_a_change_made_while_its_stream_is_read():
    """The scheduler iterates the law's stream as the run goes: a change the ramp makes ahead of time
    applies to the arrivals drawn after it."""
    timeline = AdjustableTimeline(duration=10.0, rate=100.0, poisson=False)
    stream = RateLaw(timeline, [("t", 1.0)]).arrivals(seed=1)
    first = [next(stream).t_s for _ in range(100)]  # the first second at 100 req/s
    assert first[-1] == pytest.approx(1.0)
    timeline.change(2.0, 400.0)
    rest = [arrival.t_s for arrival in itertools.takewhile(lambda a: a.t_s < 3.0, stream)]
    assert len([t for t in rest if t < 2.0]) == 99  # 1.01 .. 1.99 at the old rate
    assert len([t for t in rest if 2.0 <= t < 3.0]) in (399, 400)


def test_a_window_that_completes_fewer_requests_than_were_sent_breaks_it():
    """Over the capacity the queue grows before the latency shows it: 214 sent, 200 completed."""
    plan = RampHoldPlan(RULE, rate=214.0, window_s=1.0)
    short = window(0, 20.0, requests=200)
    broke = plan.on_window(RampWindow(0, short.stats, arrivals=214), next_index=2)
    assert isinstance(broke, RateChange) and "the queue grows: 214 requests sent, 200 completed" in broke.why


def test_one_window_that_breaks_the_slo_while_ramping_is_confirmed_before_the_rate_steps_back():
    """A stall breaks one window on its own: with confirm=2 the rate stays for one more window."""
    rule = RampHoldRule(slo={"p99_ms": 50.0}, step_pct=10.0, sustain_s=2.0, settle_windows=0)
    plan = RampHoldPlan(rule, rate=100.0, window_s=1.0)
    assert plan.on_window(window(0, 90.0), next_index=1) is None  # a stall: not yet
    up = plan.on_window(window(1, 20.0), next_index=2)
    assert isinstance(up, RateChange) and up.rate == pytest.approx(110.0) and plan.phase == "ramp"
    assert plan.on_window(window(2, 90.0), next_index=3) is None
    back = plan.on_window(window(3, 90.0), next_index=4)  # two in a row: 110 req/s is over it
    assert isinstance(back, RateChange) and back.rate == pytest.approx(100.0) and plan.phase == "hold"


def test_a_hold_waits_for_the_backlog_of_the_rate_before_to_drain():
    rule = RampHoldRule(slo={"p99_ms": 50.0}, step_pct=10.0, sustain_s=2.0, settle_windows=0, confirm_windows=1)
    plan = RampHoldPlan(rule, rate=200.0, window_s=1.0)
    plan.last_passing = 180.0
    back = plan.on_window(RampWindow(0, window(0, 900.0, requests=180).stats, arrivals=200), next_index=1)
    assert isinstance(back, RateChange) and back.rate == 180.0
    draining = RampWindow(1, window(1, 900.0, requests=200).stats, arrivals=180)  # 200 done, 180 sent: it drains
    assert plan.on_window(draining, next_index=2) is None and plan.history[-1]["phase"] == "settling"
    plan.on_window(RampWindow(2, window(2, 30.0, requests=180).stats, arrivals=180), next_index=3)
    end = plan.on_window(RampWindow(3, window(3, 30.0, requests=180).stats, arrivals=180), next_index=4)
    assert isinstance(end, RampEnd) and end.held_rps == 180.0
