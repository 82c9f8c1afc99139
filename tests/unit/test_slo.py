"""SLO thresholds become checks with limit, value and verdict; a breach sets exit code 1."""

from __future__ import annotations

from inferload.results.slo import evaluate, format_checks, slo_section
from inferload.run.plugin import InferloadRun
from tests.support.scenario_factory import scenario, tiny_target


def figures(p99=12.0, error_rate=0.0, rps=100.0, requests=1000, failures=0):
    return {
        "latency_ms": {"mean": 5.0, "p50": 4.0, "p90": 8.0, "p95": 9.0, "p99": p99, "p999": 20.0, "max": 30.0},
        "error_rate": error_rate,
        "throughput_rps": rps,
        "requests": requests,
        "failures": failures,
    }


def slo_scenario(slo):
    return scenario({"kind": "steady", "users": 1}, targets=[tiny_target("t", "triton-grpc", "127.0.0.1:8001", slo=slo)])


def test_each_threshold_is_one_check_with_its_limit_and_value():
    checks = evaluate(slo_scenario({"p99_ms": 10, "error_rate": 0.01, "min_throughput_rps": 50}), {"t": figures(p99=12.0)})
    by_metric = {c.metric: c for c in checks}
    assert set(by_metric) == {"p99_ms", "error_rate", "min_throughput_rps"}
    assert not by_metric["p99_ms"].passed and by_metric["p99_ms"].value == 12.0 and by_metric["p99_ms"].limit == 10
    assert by_metric["error_rate"].passed
    assert by_metric["min_throughput_rps"].passed


def test_a_figure_that_could_not_be_measured_fails_its_check():
    empty = figures()
    empty["latency_ms"]["p99"] = None
    (check,) = evaluate(slo_scenario({"p99_ms": 10}), {"t": empty})
    assert not check.passed and check.value is None


def test_the_table_names_the_failed_check():
    table = format_checks(evaluate(slo_scenario({"p99_ms": 10, "p50_ms": 100}), {"t": figures(p99=12.0)}))
    failed = [line for line in table.splitlines() if line.endswith("FAIL")]
    assert len(failed) == 1 and "p99_ms" in failed[0] and "<= 10" in failed[0] and "12" in failed[0]
    assert table.startswith("SLO FAILED")


def summary_with(target_figures, checks):
    return {"targets": {"t": target_figures}, "slo": slo_section(checks)}


def test_exit_code_is_1_on_a_breach_and_on_a_target_that_never_answered():
    run = InferloadRun(slo_scenario({"p99_ms": 10}))
    breached = figures(p99=12.0)
    assert run.exit_code(summary_with(breached, evaluate(run.scenario, {"t": breached}))) == 1
    run = InferloadRun(slo_scenario(None))
    dead = figures(requests=50, failures=50)
    assert run.exit_code(summary_with(dead, [])) == 1


def test_a_target_with_no_request_exits_1_and_says_which(caplog):
    """Two targets weighted 1,000,000 and 1 over 4 users: Locust gives the second no user."""
    run = InferloadRun(slo_scenario(None))
    summary = {"targets": {"t": figures(), "light": figures(requests=0)}, "slo": slo_section([])}
    with caplog.at_level("ERROR", logger="inferload.run.finish"):
        assert run.exit_code(summary) == 1
    assert caplog.messages == ["target 'light': no request in the steady state, so nothing was measured of it"]


def test_failures_within_an_error_rate_slo_exit_0_and_any_others_exit_1():
    run = InferloadRun(slo_scenario({"error_rate": 0.05}))
    some = figures(requests=1000, failures=10, error_rate=0.01)
    assert run.exit_code(summary_with(some, evaluate(run.scenario, {"t": some}))) == 0
    run = InferloadRun(slo_scenario(None))
    assert run.exit_code(summary_with(some, [])) == 1  # failures no error-rate SLO covers
    assert run.exit_code(summary_with(figures(), [])) == 0  # a clean run: the run's figures decide, not Locust's
