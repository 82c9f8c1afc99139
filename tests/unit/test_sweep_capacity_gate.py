"""`inferload sweep --find-max-rps --min-rps R`: a capacity search as a CI gate (exit 1 below the floor)."""

from __future__ import annotations

import pytest

from inferload.cli import build_parser
from inferload.tune.sweep_cli import capacity_gate, cmd_sweep


def test_the_gate_passes_at_or_above_the_floor_and_fails_below_it():
    assert capacity_gate({"max_rps": 250.0}, 200) == (0, "capacity gate: pass: 250 req/s >= 200 req/s")
    assert capacity_gate({"max_rps": 200.0}, 200)[0] == 0
    assert capacity_gate({"max_rps": 150.0}, 200) == (1, "capacity gate: FAIL: 150 req/s is below the floor of 200 req/s")
    assert capacity_gate({"max_rps": None}, 200) == (1, "capacity gate: FAIL: no rate met the SLO (floor 200 req/s)")
    assert capacity_gate(None, 200)[0] == 1


@pytest.mark.parametrize(
    "options",
    [
        ["--users", "1,2", "--min-rps", "100"],  # not a capacity search
        ["--find-max-rps", "--slo", "p99_ms=50", "--min-rps", "0"],
        ["--find-max-rps", "--slo", "p99_ms=50", "--min-rps", "-3"],
    ],
)
def test_bad_min_rps_is_refused_naming_the_option(options: list[str], capsys):
    args = build_parser().parse_args(["sweep", "s.yaml", *options])
    assert cmd_sweep(args) == 2
    assert "inferload sweep: --min-rps: expected req/s above 0, with --find-max-rps" in capsys.readouterr().err
