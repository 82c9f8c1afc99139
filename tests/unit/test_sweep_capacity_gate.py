"""`inferload sweep --find-max-rps --min-rps R`: a capacity search as a CI gate (exit 1 below the floor)."""

from __future__ import annotations

import pytest

from inferload.cli import build_parser
from inferload.errors import UsageError
from inferload.tune.sweep_cli import capacity_gate, cmd_sweep


def test_the_gate_passes_only_when_the_intervals_lower_end_clears_the_floor():
    answer = {"max_rps": 240.0, "estimate_rps": 250.0, "interval_rps": [230.0, 270.0]}
    assert capacity_gate(answer, 200) == (
        0,
        "capacity gate: pass: the capacity's interval [230, 270] req/s lies at or above 200 req/s",
    )
    code, line = capacity_gate(answer, 240)  # the estimate clears it, the interval does not: within noise
    assert code == 1 and "reaches below the floor of 240 req/s (it may be below it" in line
    code, line = capacity_gate(answer, 300)
    assert code == 1 and "lies below the floor of 300 req/s" in line
    open_ended = {"max_rps": 800.0, "estimate_rps": None, "interval_rps": [800.0, None]}  # no rate was over the SLO
    assert capacity_gate(open_ended, 500) == (
        0,
        "capacity gate: pass: the capacity's interval [800, ∞] req/s lies at or above 500 req/s",
    )


def test_without_an_interval_the_gate_reads_the_highest_passing_rate():
    """A search whose lowest rate failed, or a sweep.json written before the intervals."""
    assert capacity_gate({"max_rps": 250.0}, 200) == (0, "capacity gate: pass: 250 req/s >= 200 req/s")
    assert capacity_gate({"max_rps": 200.0}, 200)[0] == 0
    assert capacity_gate({"max_rps": 150.0}, 200) == (1, "capacity gate: FAIL: 150 req/s is below the floor of 200 req/s")
    assert capacity_gate({"max_rps": None}, 200) == (1, "capacity gate: FAIL: no rate met the SLO (floor 200 req/s)")
    assert capacity_gate(None, 200)[0] == 1


def test_min_rps_without_a_capacity_search_is_a_usage_error():
    args = build_parser().parse_args(["sweep", "s.yaml", "--users", "1,2", "--min-rps", "100"])
    with pytest.raises(UsageError) as error:
        cmd_sweep(args)
    assert error.value.exit_code == 2
    assert "--min-rps: expected req/s above 0, with --find-max-rps" in str(error.value)


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_a_min_rps_of_0_or_less_is_refused_as_it_is_read(value: str, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["sweep", "s.yaml", "--find-max-rps", "--slo", "p99_ms=50", "--min-rps", value])
    assert exited.value.code == 2
    assert "argument --min-rps: expected a finite number above 0" in capsys.readouterr().err
