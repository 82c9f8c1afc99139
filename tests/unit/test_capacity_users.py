"""The capacity search over closed-loop users (`sweep --find-max-users`): the same rule as over rates,
on whole user counts, against a simulated server whose truth is known (tests/support/queue_sim.py:
4 FIFO slots of 10-12 ms; under p99 <= 100 ms the truth, from long runs, is 34 users). Every draw is
seeded, so these cannot flip."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from inferload.cli import build_parser
from inferload.tune.capacity import (
    USERS,
    Bounds,
    CapacitySearch,
    RunEvidence,
    judge,
    search_capacity,
    verification_rates,
)
from inferload.tune.capacity_steps import answer_lines, capacity_record
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep import search_record
from inferload.tune.sweep_cli import capacity_gate, capacity_search
from tests.support.queue_sim import simulate_closed_run, true_users_boundary

SLOTS, SERVICE_MS, BOUND_MS = 4, 10.0, 100.0
BOUNDS = Bounds({"p99_ms": BOUND_MS})


def closed(seed: int):
    rng = np.random.default_rng(seed)
    tried: list[tuple[float, str]] = []

    def measure(users: float, role: str) -> RunEvidence:
        tried.append((users, role))
        return simulate_closed_run(users, SLOTS, SERVICE_MS, rng, step=len(tried))

    return measure, tried


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_interval_of_users_contains_the_known_boundary_and_every_level_is_whole(seed: int):
    truth = true_users_boundary(SLOTS, SERVICE_MS, BOUND_MS)
    measure, tried = closed(seed)
    answer = search_capacity(measure, CapacitySearch(start_rps=4, precision_pct=5, max_steps=14, unit=USERS), BOUNDS)
    boundary = answer.judgement.boundary
    assert boundary.low_rps <= truth <= boundary.high_rps, (boundary, answer.end, tried)
    assert all(users == int(users) and users >= 1 for users, _ in tried), tried
    assert [users for users, _ in tried[:4]] == [4, 8, 16, 32]  # doubled while it passed
    estimate = boundary.estimate_rps
    assert estimate is not None and estimate == int(estimate) and boundary.low_rps <= estimate <= boundary.high_rps
    assert abs(estimate - truth) <= 2, (estimate, truth)
    assert "users" in (boundary.binding_words or "") and "req/s" not in (boundary.binding_words or "")


def test_a_search_over_users_ends_when_the_boundary_lies_between_two_counts():
    measure, tried = closed(4)
    answer = search_capacity(
        measure, CapacitySearch(start_rps=4, precision_pct=1, max_steps=30, verify=False, unit=USERS), BOUNDS
    )
    boundary = answer.judgement.boundary
    assert answer.end.reason in ("precision", "noise"), answer.end
    if answer.end.reason == "precision":  # 1 % of ~34 users is less than one user: two adjacent counts end it
        assert boundary.high_rps - boundary.low_rps <= 1 and "lies between two user counts" in answer.end.words
    # no count is measured more than runs_per_rate times, so a search over whole numbers never loops
    counts = [users for users, _ in tried]
    assert max(counts.count(users) for users in counts) <= 2, tried


def test_the_verification_runs_are_whole_counts_either_side_of_the_estimate():
    measure, tried = closed(5)
    answer = search_capacity(measure, CapacitySearch(start_rps=4, precision_pct=10, unit=USERS), BOUNDS)
    boundary = answer.judgement.boundary
    checks = [users for users, role in tried if role == "verify"]
    assert checks == [users for _, users in verification_rates(boundary, USERS)]
    assert len(checks) == 2 and all(users == int(users) for users in checks)
    assert checks[0] < (boundary.estimate_rps or 0) < checks[1]
    assert answer.verification is not None and all(run.unit is USERS for run in answer.verification.runs)
    assert "users)" in answer.verification.words() and "req/s" not in answer.verification.words()


def test_one_user_over_the_bound_is_no_pass_without_going_under_one():
    measure, tried = closed(6)
    answer = search_capacity(measure, CapacitySearch(start_rps=8, unit=USERS), Bounds({"p99_ms": 5.0}))
    assert answer.end.reason == "no-pass" and "no user count down to 1 users" in answer.end.words
    assert [users for users, _ in tried] == [8, 4, 2, 1]


def test_sweep_json_and_the_console_name_users_not_rates():
    measure, _ = closed(7)
    answer = search_capacity(measure, CapacitySearch(start_rps=4, precision_pct=10, unit=USERS), BOUNDS)
    record = capacity_record(answer, StopRules(slo={"p99_ms": BOUND_MS}), 10.0, USERS)
    assert record["unit"] == "users"
    assert {"max_users", "first_failing_users", "estimate_users", "interval_users"} <= set(record)
    assert not any(key.endswith("_rps") for key in record)
    assert all("users" in level and "rate" not in level for level in record["levels"])
    assert all("users" in run for run in record["verification"]["runs"])
    lines = answer_lines(record)
    assert lines[0].startswith(f"capacity under the SLO: {record['estimate_users']:g} users, 95 % interval [")
    assert "req/s" not in "\n".join(lines)
    low = record["interval_users"][0]
    assert capacity_gate(record, low)[0] == 0 and "users" in capacity_gate(record, low)[1]
    assert capacity_gate(record, (record["interval_users"][1] or math.inf) + 1)[0] == 1


def test_judging_users_never_clips_the_boundary_by_an_achieved_rate():
    """Users offer no rate: a run's achieved req/s bounds nothing (judged as rates, the same runs' upper
    end would be clipped to the 40 req/s "answered" at the level of 48)."""
    rng = np.random.default_rng(8)
    runs = [dataclasses.replace(simulate_closed_run(users, SLOTS, SERVICE_MS, rng), achieved_rps=40.0) for users in (16, 32, 48)]
    assert judge(runs, BOUNDS, unit=USERS).boundary.high_rps == 48
    assert judge(runs, BOUNDS).boundary.high_rps == 40


def test_find_max_users_searches_users_from_start_users_with_the_rate_search_s_other_settings():
    args = build_parser().parse_args(
        ["sweep", "s.yaml", "--find-max-users", "--slo", "p99_ms=50", "--start-users", "6", "--precision", "8", "--no-verify"]
    )
    search = capacity_search(args, ceiling_rps=None)
    assert (search.unit, search.start_rps, search.precision_pct, search.verify, search.ceiling_rps) == (
        USERS,
        6.0,
        8.0,
        False,
        None,
    )
    rates = capacity_search(build_parser().parse_args(["sweep", "s.yaml", "--find-max-rps", "--slo", "p99_ms=50"]), 900.0)
    assert (rates.unit.name, rates.start_rps, rates.ceiling_rps) == ("req/s", 50.0, 900.0)


def test_sweep_json_s_plan_names_the_unit_of_a_users_search_and_keeps_a_rate_search_as_it_was():
    """A rate search's plan is written as before the unit existed (its earlier sweeps still resume)."""
    rates = search_record(CapacitySearch(start_rps=50.0))
    assert "unit" not in rates and rates["start_rps"] == 50.0
    assert search_record(CapacitySearch(start_rps=4.0, unit=USERS))["unit"] == "users"
