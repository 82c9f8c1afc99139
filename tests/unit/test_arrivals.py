"""Open-loop arrival processes: the rate they achieve and the shape they follow (no server)."""

from __future__ import annotations

import itertools
import random
from typing import cast

import pytest

from inferload.scenario.shapes import OpenLoopShape
from inferload.traffic.arrivals import INFINITY, SEED_MULTIPLIER, RateLaw, RateTimeline, next_arrival, rate_timeline
from tests.support.scenario_factory import scenario


def arrivals(shape: dict, duration: str = "60s", share: float = 1.0, seed: int = 3) -> list[float]:
    s = scenario(shape, duration=duration)
    timeline = rate_timeline(cast(OpenLoopShape, s.shape), s.duration)  # the tests give open-loop kinds only
    rng = random.Random(seed)
    times: list[float] = []
    t = 0.0
    while True:
        t = next_arrival(timeline, t, share, rng)
        if t == INFINITY:
            return times
        times.append(t)


def test_poisson_achieves_its_rate_within_2_percent_over_a_minute():
    times = arrivals({"kind": "poisson", "rate": 200})
    assert len(times) / 60 == pytest.approx(200, rel=0.02)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    variance = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert variance**0.5 == pytest.approx(mean, rel=0.1)  # exponential gaps: sd == mean


def test_constant_rate_is_evenly_spaced_and_exact():
    times = arrivals({"kind": "constant-rate", "rate": 50}, duration="10s")
    assert len(times) == pytest.approx(500, abs=1)  # 50/s for 10 s
    assert {round(b - a, 9) for a, b in itertools.pairwise(times)} == {0.02}


def test_shares_across_workers_add_up_to_the_whole_rate():
    workers = [arrivals({"kind": "poisson", "rate": 300}, share=1 / 3, seed=seed) for seed in (1, 2, 3)]
    assert sum(map(len, workers)) / 60 == pytest.approx(300, rel=0.02)


def test_a_ramping_rate_follows_its_steps():
    times = arrivals(
        {"kind": "ramping-rate", "from_rate": 0, "to_rate": 100, "over": "40s", "steps": 4, "arrivals": "constant"},
        duration="50s",
    )
    per_10s = [sum(1 for t in times if lo <= t < lo + 10) for lo in range(0, 50, 10)]
    assert per_10s == pytest.approx([0, 250, 500, 750, 1000], abs=2)


def test_rate_bursts_raise_the_rate_only_inside_bursts():
    times = arrivals(
        {
            "kind": "rate-bursts",
            "base_rate": 10,
            "burst_rate": 100,
            "burst_length": "2s",
            "period": "10s",
            "first_burst_at": "5s",
            "arrivals": "constant",
        },
        duration="30s",
    )
    in_bursts = sum(1 for t in times if any(start <= t < start + 2 for start in (5, 15, 25)))
    assert in_bursts == pytest.approx(3 * 2 * 100, abs=3)
    assert len(times) - in_bursts == pytest.approx(24 * 10, abs=3)


@pytest.mark.parametrize(
    "shape",
    [
        {"kind": "poisson", "rate": 500},
        {"kind": "constant-rate", "rate": 300},
        {"kind": "gamma", "rate": 400, "cv": 3},
        {"kind": "ramping-rate", "from_rate": 0, "to_rate": 900, "over": "8s", "steps": 40, "arrivals": "poisson"},
        {"kind": "rate-bursts", "base_rate": 0, "burst_rate": 700, "burst_length": "1s", "period": "3s", "first_burst_at": "1s"},
    ],
    ids=lambda shape: shape["kind"],
)
def test_a_rate_laws_stream_is_next_arrival_drawn_over_and_over(shape):
    """The law reads a fixed timeline once per step, not per arrival: the same arrivals, to the bit."""
    s = scenario(shape, duration="10s")
    timeline = rate_timeline(cast(OpenLoopShape, s.shape), s.duration)
    assert isinstance(timeline, RateTimeline)
    for share in (1.0, 0.37):
        law = RateLaw(timeline, (("t", share),))
        drawn = [arrival.t_s for arrival in law.arrivals(5)]
        rng, t, expected = random.Random(5 * SEED_MULTIPLIER), 0.0, []
        while (t := next_arrival(timeline, t, share, rng)) != INFINITY:
            expected.append(t)
        assert len(drawn) > 500 and drawn == expected


def test_no_arrival_is_scheduled_after_the_run_ends():
    times = arrivals({"kind": "poisson", "rate": 1000}, duration="2s")
    assert max(times) < 2.0


def test_rate_and_next_change_at_step_boundaries_and_between_them():
    timeline = RateTimeline(10.0, ((0.0, 5.0), (2.0, 7.0), (4.0, 0.0), (6.0, 9.0)), poisson=False)
    assert [timeline.rate_at(t) for t in (0.0, 1.99, 2.0, 3.0, 4.0, 5.9, 6.0, 9.9)] == [5.0, 5.0, 7.0, 7.0, 0.0, 0.0, 9.0, 9.0]
    assert [timeline.next_change(t) for t in (0.0, 2.0, 3.0, 5.0, 6.0, 9.0)] == [2.0, 4.0, 4.0, 6.0, INFINITY, INFINITY]
    assert RateTimeline(10.0, ((1.0, 3.0),), poisson=False).rate_at(0.5) == 0.0
