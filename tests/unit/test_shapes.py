"""Each traffic shape's user-count timeline, second by second, and the end of the run."""

from __future__ import annotations

import pytest

from inferload.measure.windows import StabilityRule
from inferload.run.traffic import parse_stop_when_stable, shape_class_for
from inferload.traffic.shapes import timeline_for
from tests.support.scenario_factory import scenario


def users_at(timeline, times):
    return [None if timeline.at(t) is None else timeline.at(t)[0] for t in times]


def test_steady_holds_its_users_until_the_duration_then_ends():
    timeline = timeline_for(scenario({"kind": "steady", "users": 8}, duration="30s"))
    assert users_at(timeline, [0, 1, 15, 29.9]) == [8, 8, 8, 8]
    assert timeline.at(30) is None
    assert timeline.at(0)[1] > 0  # a spawn rate Locust can use


def test_ramp_climbs_in_equal_steps_and_holds_the_top():
    timeline = timeline_for(
        scenario({"kind": "ramp", "from_users": 2, "to_users": 10, "over": "40s", "steps": 4}, duration="60s")
    )
    assert users_at(timeline, [0, 9.9, 10, 20, 30, 39.9, 40, 59]) == [2, 2, 4, 6, 8, 8, 10, 10]
    assert timeline.at(60) is None


def test_ramp_down_is_allowed():
    timeline = timeline_for(
        scenario({"kind": "ramp", "from_users": 10, "to_users": 0, "over": "10s", "steps": 2}, duration="20s")
    )
    assert users_at(timeline, [0, 5, 10, 19]) == [10, 5, 0, 0]


def test_burst_raises_the_load_for_its_length_every_period():
    timeline = timeline_for(
        scenario(
            {"kind": "burst", "base_users": 2, "burst_users": 16, "burst_length": "3s", "period": "10s", "first_burst_at": "5s"},
            duration="40s",
        )
    )
    assert users_at(timeline, [0, 4.9, 5, 7.9, 8, 14.9, 15, 17.9, 18, 25, 39]) == [2, 2, 16, 16, 2, 2, 16, 16, 2, 16, 2]
    assert timeline.at(40) is None


def test_burst_spawns_fast_enough_to_be_a_burst():
    timeline = timeline_for(
        scenario({"kind": "burst", "base_users": 1, "burst_users": 20, "burst_length": "2s", "period": "10s"}, duration="30s")
    )
    _, spawn_rate = timeline.at(0)
    assert spawn_rate >= 20  # the whole burst arrives within a second


def test_stages_follow_the_list_and_the_last_stage_holds():
    timeline = timeline_for(
        scenario(
            {
                "kind": "stages",
                "stages": [
                    {"duration": "5s", "users": 1},
                    {"duration": "10s", "users": 6, "spawn_rate": 3},
                    {"duration": "5s", "users": 2},
                ],
            },
            duration="30s",
        )
    )
    assert users_at(timeline, [0, 4.9, 5, 14.9, 15, 19.9, 20, 29.9]) == [1, 1, 6, 6, 2, 2, 2, 2]
    assert timeline.at(7)[1] == pytest.approx(3.0)
    assert timeline.at(30) is None


def test_the_locust_shape_plays_the_timeline_on_the_run_clock():
    shape = shape_class_for(scenario({"kind": "steady", "users": 3}, duration="10s"))()
    shape.get_run_time = lambda: 2.0
    assert shape.tick()[0] == 3
    shape.get_run_time = lambda: 10.0
    assert shape.tick() is None


@pytest.mark.parametrize(
    "shape",
    [
        {"kind": "steady", "users": 8},
        {"kind": "ramp", "from_users": 2, "to_users": 12, "over": "30s"},
        {"kind": "ramp", "from_users": 2, "to_users": 12, "over": "30s", "spawn_rate": 0.5},
        {"kind": "burst", "base_users": 2, "burst_users": 20, "burst_length": "5s", "period": "20s"},
        {"kind": "stages", "stages": [{"duration": "10s", "users": 4}, {"duration": "10s", "users": 1, "spawn_rate": 7}]},
    ],
    ids=["steady", "ramp", "ramp-given", "burst", "stages"],
)
def test_timelines_spawn_at_the_rates_validation_filled_in(shape):
    validated = scenario(shape).shape
    timeline = timeline_for(scenario(shape))
    if shape["kind"] == "stages":
        assert [timeline.at(t)[1] for t in (0, 10)] == [stage.spawn_rate for stage in validated.stages] == [4.0, 7.0]
    else:
        assert timeline.at(0)[1] == validated.spawn_rate


def test_stop_when_stable_reads_windows_and_a_tolerance() -> None:
    assert parse_stop_when_stable(" 3, 10 ") == StabilityRule(windows=3, tolerance_pct=10.0, max_windows=3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3", "--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got '3'"),
        ("3,x", "--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got '3,x'"),
        ("0,10", "--stop-when-stable '0,10': stable windows must be at least 1; got 0"),
        ("3,nan", "--stop-when-stable '3,nan': the tolerance must be between 0 and 100 %; got nan"),
    ],
)
def test_a_stop_when_stable_that_cannot_be_read_names_the_option(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_stop_when_stable(text)
    assert str(caught.value) == message
