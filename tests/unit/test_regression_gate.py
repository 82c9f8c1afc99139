"""A change between two runs is judged against their noise: the 95 % interval of B − A, not one difference."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferload.errors import InferloadError
from inferload.results.compare import GateRule, RunFigures, judge, parse_rule
from inferload.results.repeats import change_interval, mean_interval, t975


def test_student_t_quantiles_match_the_table_and_interpolate_between_rows():
    assert t975(1) == pytest.approx(12.706)
    assert t975(10) == pytest.approx(2.228)
    assert t975(11) == pytest.approx((2.228 + 2.179) / 2)
    assert t975(10**7) == pytest.approx(1.960)


def test_the_mean_interval_of_repetitions_widens_with_their_spread():
    mean, low, high = mean_interval([10.0, 12.0, 11.0]) or (0, 0, 0)
    assert mean == pytest.approx(11.0)
    assert (low, high) == pytest.approx((11.0 - 4.303 * 1 / 3**0.5, 11.0 + 4.303 * 1 / 3**0.5))
    assert mean_interval([10.0]) is None


def test_welch_interval_is_centred_on_the_exact_figures_difference():
    interval = change_interval(10.0, 12.0, [9.0, 10.0, 11.0], [11.0, 12.0, 13.0])
    assert interval is not None
    assert interval.change == pytest.approx(2.0)
    assert interval.low < 2.0 < interval.high
    assert interval.change_pct == pytest.approx(20.0)
    assert change_interval(10.0, 12.0, [10.0], [12.0, 13.0]) is None  # one sample: no spread to judge by


@pytest.mark.parametrize(
    ("text", "rule"),
    [("p99:+10%", GateRule("p99", 10.0)), ("throughput:-5%", GateRule("throughput", -5.0)), ("p50:+2.5", GateRule("p50", 2.5))],
)
def test_rules_read_figure_direction_and_threshold(text, rule):
    assert parse_rule(text) == rule


@pytest.mark.parametrize("text", ["p99:10%", "p98:+10%", "p99:+0%", "p99", "latency:+5%"])
def test_malformed_rules_name_what_is_expected(text):
    with pytest.raises(InferloadError, match="--fail-on"):
        parse_rule(text)


def figures(value: float, samples: list[float]) -> RunFigures:
    return RunFigures(Path("."), {"t": {"p99": value}}, {"t": {"p99": samples}}, "repetitions")


def test_a_rise_whose_whole_interval_passes_the_threshold_fails():
    result = judge(GateRule("p99", 10.0), "t", figures(10.0, [9.9, 10.0, 10.1]), figures(13.0, [12.9, 13.0, 13.1]))
    assert result.failed and "FAIL" in result.verdict


def test_a_rise_within_the_noise_passes_even_when_the_point_change_is_past_the_threshold():
    result = judge(GateRule("p99", 10.0), "t", figures(10.0, [7.0, 10.0, 13.0]), figures(11.5, [8.5, 11.5, 14.5]))
    assert not result.failed and "within the noise" in result.verdict
    assert result.interval is not None and (result.interval.change_pct or 0) > 10


def test_a_throughput_drop_rule_looks_at_the_interval_high_end():
    result = judge(GateRule("p99", -5.0), "t", figures(100.0, [99, 100, 101]), figures(80.0, [79, 80, 81]))
    assert result.failed
