"""`inferload sweep`'s rules without a server: the levels it steps through, when a step is stable,
and why a sweep stops (the capacity search: tests/unit/test_capacity_search.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferload.errors import UsageError
from inferload.measure.windows import StabilityRule, WindowFigures, first_stable_run
from inferload.tune.step import StepResult, run_log_reason
from inferload.tune.stop_rules import StopRules, stop_reason
from inferload.tune.sweep import describe, knee_step
from inferload.tune.sweep_cli import LevelsError, parse_levels, parse_slo


def step(level: float, rps: float | None, p99: float | None = 10.0, **extra: object) -> StepResult:
    fields: dict[str, object] = {"requests": 1000, "error_rate": 0.0, "p50_ms": 1.0, "p99_ms": p99, "achieved_rps": rps}
    fields.update(extra)
    return StepResult(step=1, level=level, exit_code=0, duration_s=10.0, results_dir="r", **fields)  # type: ignore[arg-type]


# -- levels ---------------------------------------------------------------------------------------
def test_levels_read_lists_linear_and_geometric_ranges():
    assert parse_levels("1,2,4,8", integer=True) == [1, 2, 4, 8]
    assert parse_levels("10:50:+10", integer=False) == [10, 20, 30, 40, 50]
    assert parse_levels("10:45:10", integer=False) == [10, 20, 30, 40]  # never past the end
    assert parse_levels("1:64:x2", integer=True) == [1, 2, 4, 8, 16, 32, 64]
    assert parse_levels("25:100:x2", integer=False) == [25, 50, 100]


@pytest.mark.parametrize(
    ("text", "integer", "message"),
    [
        ("", True, "empty"),
        ("1,x,3", True, "'x' in '1,x,3' is not a number"),
        ("1.5,2", True, "whole numbers"),
        ("4,2", True, "must increase"),
        ("0,1", False, "above 0"),
        ("10:1:+1", False, "below the start"),
        ("1:10:x1", False, "factor must be above 1"),
        ("1:10:-2", False, "must be +N (linear) or xF (geometric)"),
        ("1:10", False, "START:END:+STEP"),
        ("1:100000:+1", False, "at most 200"),
    ],
)
def test_bad_levels_say_what_is_wrong(text, integer, message):
    with pytest.raises(LevelsError, match=re.escape(message)):
        parse_levels(text, integer)


# -- stability ------------------------------------------------------------------------------------
def test_a_step_is_stable_at_the_first_run_of_agreeing_windows():
    rule = StabilityRule(windows=3, tolerance_pct=10)
    windows = [
        WindowFigures(50, 30),
        WindowFigures(100, 10),
        WindowFigures(104, 10.5),
        WindowFigures(97, 9.6),
        WindowFigures(99, 10),
    ]
    assert first_stable_run(windows, rule) == 1


def test_throughput_or_p99_out_of_tolerance_or_an_empty_window_is_not_stable():
    rule = StabilityRule(windows=3, tolerance_pct=10)
    assert first_stable_run([WindowFigures(100, 10), WindowFigures(130, 10), WindowFigures(100, 10)], rule) is None
    assert first_stable_run([WindowFigures(100, 10), WindowFigures(100, 14), WindowFigures(100, 10)], rule) is None
    assert first_stable_run([WindowFigures(100, 10), WindowFigures(None, None), WindowFigures(100, 10)], rule) is None
    assert first_stable_run([WindowFigures(100, 10)] * 2, rule) is None  # fewer windows than the rule needs


def test_a_stability_rule_that_cannot_hold_is_refused():
    with pytest.raises(ValueError, match="at least the stable windows"):
        StabilityRule(windows=5, max_windows=3)
    with pytest.raises(ValueError, match="between 0 and 100"):
        StabilityRule(tolerance_pct=0)


# -- stop rules -----------------------------------------------------------------------------------
RULES = StopRules(slo={"p99_ms": 50.0}, plateau_pct=5.0, plateau_steps=2)


def test_the_sweep_goes_on_while_throughput_grows_within_the_slo():
    assert stop_reason([step(1, 100), step(2, 190), step(4, 350)], RULES) is None


def test_an_slo_breach_stops_the_sweep_and_says_by_how_much():
    rule, reason = stop_reason([step(1, 100), step(2, 190, p99=61.5)], RULES) or ("", "")
    assert rule == "slo" and "p99_ms 61.5 ms > 50 ms" in reason


def test_a_goodput_bound_is_a_least_share_of_good_requests():
    rules = StopRules(slo={"min_goodput_pct": 90.0})
    assert stop_reason([step(1, 100, goodput_pct=95.0)], rules) is None
    rule, reason = stop_reason([step(1, 100, goodput_pct=80.5)], rules) or ("", "")
    assert rule == "slo" and "goodput 80.5 % < 90 % of requests" in reason
    rule, reason = stop_reason([step(1, 100)], rules) or ("", "")
    assert rule == "slo" and "goodput was not measured" in reason


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["min_goodput_pct=0"], "--slo min_goodput_pct: expected a finite number above 0 and at most 100"),
        (["min_goodput_pct=101"], "at most 100"),
        (["ttft_ms=5"], "--slo: expected KEY=VALUE with KEY one of p50_ms, p90_ms, p99_ms, p999_ms, error_rate, min_goodput_pct"),
    ],
)
def test_a_bad_goodput_bound_is_refused_naming_it(options: list[str], message: str):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_slo(options)
    assert parse_slo(["min_goodput_pct=99.5,p99_ms=20"]) == {"min_goodput_pct": 99.5, "p99_ms": 20.0}


def test_errors_over_their_bound_stop_the_sweep():
    rule, reason = stop_reason([step(1, 100, error_rate=0.05)], RULES) or ("", "")
    assert rule == "errors" and "5.00%" in reason


def test_a_busy_client_or_send_lag_with_free_senders_make_the_generator_the_limit():
    assert (stop_reason([step(1, 100, client_cpu_per_worker=0.97)], RULES) or ("",))[0] == "generator"
    assert (stop_reason([step(1, 100, arrivals=1000, unsent=50)], RULES) or ("",))[
        0
    ] == "saturated"  # unsent: every sender was busy
    assert (stop_reason([step(1, 100, send_lag_p99_ms=45.0)], RULES) or ("",))[0] == "generator"
    # the generator is named even when its lag also broke the SLO: the latency was its own
    assert (stop_reason([step(1, 100, p99=300.0, send_lag_p99_ms=250.0)], RULES) or ("",))[0] == "generator"
    assert stop_reason([step(1, 100, arrivals=1000, unsent=5, client_cpu_per_worker=0.5)], RULES) is None


def test_a_plateau_needs_the_set_number_of_flat_steps_in_a_row():
    assert stop_reason([step(1, 100), step(2, 200), step(4, 203)], RULES) is None  # one flat step
    rule, reason = stop_reason([step(1, 100), step(2, 200), step(4, 203), step(8, 198)], RULES) or ("", "")
    assert rule == "plateau" and "203 req/s (level 4)" in reason


def test_a_step_that_wrote_no_results_ends_the_sweep():
    failed = StepResult(step=1, level=1, exit_code=2, duration_s=3.0, results_dir="r")
    assert (stop_reason([failed], RULES) or ("",))[0] == "failed"


def test_the_knee_is_the_step_of_highest_throughput_per_p99():
    steps = [step(1, 100, p99=10), step(2, 190, p99=11), step(4, 260, p99=30), step(8, 270, p99=90)]
    assert (knee_step(steps) or steps[0]).level == 2


def test_late_arrivals_with_every_sender_waiting_on_the_server_are_saturation_not_the_generator():
    # Little's law: 1000 req/s x 18 ms in service = 18 requests in flight, more than 0.8 x 16 senders
    busy = step(1000, 1000, p99=40.0, p50_ms=20.0, send_lag_p50_ms=2.0, send_lag_p99_ms=35.0, max_in_flight=16)
    rule, reason = stop_reason([busy], StopRules(slo={})) or ("", "")
    assert rule == "saturated" and "the 16 senders were busy" in reason
    # the same lag with senders to spare: the generator did not send on time
    idle = step(1000, 1000, p99=40.0, p50_ms=20.0, send_lag_p50_ms=2.0, send_lag_p99_ms=35.0, max_in_flight=256)
    rule, reason = stop_reason([idle], StopRules(slo={})) or ("", "")
    assert rule == "generator" and "while senders were free" in reason


def test_sweep_settings_refuse_more_local_workers_than_the_machine_takes(tmp_path):
    """Each step starts that many Locust processes (a sweep of --workers 100000 forked hundreds)."""
    from inferload.errors import UsageError
    from inferload.scenario.limits import max_local_workers
    from inferload.tune.sweep import SweepSettings

    rule, rules = StabilityRule(3, 10, 10), StopRules(slo={})
    assert SweepSettings(tmp_path / "s.yaml", tmp_path, rule, rules, workers=max_local_workers()).workers == max_local_workers()
    for workers in (-1, max_local_workers() + 1, 100_000):
        with pytest.raises(UsageError, match=r"^workers: expected a whole number from 0 to \d+ .*; got "):
            SweepSettings(tmp_path / "s.yaml", tmp_path, rule, rules, workers=workers)


def test_a_goodput_bound_needs_a_target_with_goodput_thresholds(tmp_path: Path):
    from inferload.measure.windows import StabilityRule
    from inferload.tune.sweep import Sweep, SweepSettings
    from tests.support.scenario_factory import write_scenario

    chat = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:1", "model": "m"}
    rules = StopRules(slo={"min_goodput_pct": 90.0})
    for generation, refused in (({}, True), ({"generation": {"goodput": {"ttft_ms": 100}}}, False)):
        data = {"name": "s", "duration": "10s", "targets": [{**chat, **generation}], "shape": {"kind": "steady", "users": 1}}
        settings = SweepSettings(write_scenario(tmp_path, data), tmp_path / "out", StabilityRule(3, 10, 10), rules)
        if refused:
            with pytest.raises(UsageError, match="--slo min_goodput_pct: target 'chat' sets no goodput thresholds"):
                Sweep(settings)
        else:
            assert Sweep(settings).target == "chat"


START_CHECKS_FAILED = (
    "GPU metrics off: NVML is unavailable\n"
    "inferload: the start checks failed; no load was sent (--skip-start-checks sends it anyway):\n"
    "target 'cnn': cannot reach Triton at 127.0.0.1:8001 (triton-grpc): Connection refused\n"
)


def test_a_step_without_results_prints_why_its_run_ended_under_its_line(tmp_path: Path) -> None:
    folder = tmp_path / "steps" / "01-4"
    folder.mkdir(parents=True)
    (folder / "run.log").write_text(START_CHECKS_FAILED)
    failed = StepResult(1, 4, 2, 1.0, str(folder / "results"))
    assert describe(failed, None, False).split("\n") == [
        f"no results (exit 2); see {folder / 'run.log'}",
        "        inferload: the start checks failed; no load was sent (--skip-start-checks sends it anyway):",
        "        target 'cnn': cannot reach Triton at 127.0.0.1:8001 (triton-grpc): Connection refused",
    ]


def test_a_step_without_a_run_log_adds_no_reason() -> None:
    log = Path("/nonexistent/run.log")
    assert run_log_reason(log) == []  # no log: nothing to add


def test_a_traceback_s_end_is_the_reason_its_control_characters_escaped(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(
        "Traceback (most recent call last):\n  File x\n  line 1\n  line 2\nValueError: bad \x1b[31m" + "x" * 500 + "\n"
    )
    reason = run_log_reason(log)
    assert len(reason) == 4 and reason[0] == "  File x", reason
    assert reason[-1].startswith("ValueError: bad \\x1b[31mxxx") and len(reason[-1]) <= 240 + 3, reason
