"""sweep.html and the demo's report read at a glance: the curve by load, not in the
order the steps ran; the SLO in words and as a line; the boundary's interval as a band; the binding
constraint in words; every server's curve on one chart. No server: documents are built here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferload.results.plots import Curve, CurvePoint, capacity_figure, side_by_side_figure, sweep_figure
from inferload.results.report import capacity_html
from inferload.results.schema import DemoCapacity, RunSummary, SloSection
from inferload.tune.capacity import Bounds, CapacityAnswer, SearchEnd, judge, verify_runs
from inferload.tune.capacity_steps import answer_lines, capacity_record
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep_report import capacity_curve, slo_words, write_sweep_report
from tests.support.queue_sim import simulate_run

RULES = StopRules(slo={"p99_ms": 30.0})


def capacity_document() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    rates = (200.0, 400.0, 300.0, 350.0)  # the order they ran
    runs = [simulate_run(rate, 4, 10.0, rng, windows=6, step=index + 1) for index, rate in enumerate(rates)]
    judgement = judge(runs, Bounds({"p99_ms": 30.0}))
    answer = CapacityAnswer(judgement, SearchEnd("steps", "the search made its 4 runs"), runs)
    check = simulate_run(270.0, 4, 10.0, rng, windows=6, step=5)
    answer.verification = verify_runs([check], judgement.boundary, Bounds({"p99_ms": 30.0}))
    steps = [
        {"step": index + 1, "level": rate, "role": "search", "p50_ms": 10.0 + index, "p99_ms": 20.0 + index}
        for index, rate in enumerate(rates)
    ]
    steps.append({"step": 5, "level": 270.0, "role": "verify", "p50_ms": 11.0, "p99_ms": 22.0})
    return {
        "plan": {"target": "cnn", "mode": "find-max-rps", "scenario": "s.yaml", "stop_rules": {"slo": RULES.slo}},
        "steps": steps,
        "stopped": {"rule": "capacity", "reason": "the search made its 4 runs"},
        "knee": None,
        "capacity": capacity_record(answer, RULES, 10.0),
    }


def test_the_slo_reads_as_people_write_it():
    assert slo_words({"p99_ms": 100.0, "error_rate": 0.01}) == "p99 ≤ 100 ms, errors ≤ 1.00%"


def test_sweep_html_says_the_answer_in_words_and_draws_the_curve_by_load(tmp_path: Path):
    document = capacity_document()
    page = write_sweep_report(tmp_path, document).read_text()
    assert "<h1>Capacity of cnn under p99 ≤ 30 ms (capacity search)</h1>" in page and "{'p99_ms'" not in page
    assert "capacity under the SLO: " in page and "95 % interval" in page
    assert "binding constraint: latency (p99): p99 ≤ 30 ms: p99 " in page
    assert "p99 against the offered rate, the SLO and the boundary" in page
    rates = [level["rate"] for level in document["capacity"]["levels"]]
    assert rates == sorted(rates)
    table = page[page.index("Each rate, all its runs pooled") :]
    assert table.index("<td>200</td>") < table.index("<td>300</td>") < table.index("<td>350</td>") < table.index("<td>400</td>")


def test_the_capacity_curve_has_the_band_the_slo_line_and_the_verification_run():
    document = capacity_document()
    curve = capacity_curve(document)
    assert curve is not None
    low, high = document["capacity"]["interval_rps"]
    assert curve.band == (low, high) and curve.estimate == document["capacity"]["estimate_rps"]
    assert [p.load for p in curve.points if p.verify] == [270.0]
    check = document["capacity"]["verification"]["runs"][0]
    assert check["side"] == "below" and check["p99_ms"] is not None and check["p99_ms_low"] <= check["p99_ms"]
    axes = capacity_figure(curve, {"p99_ms": 30.0}, "rate").axes[0]
    fitted = next(line for line in axes.lines if line.get_label() == "p99, fitted")
    assert list(fitted.get_xdata()) == [200.0, 300.0, 350.0, 400.0]  # by load, not in run order
    assert any(list(line.get_ydata()) == [30.0, 30.0] for line in axes.lines)  # the SLO as a line


def test_a_plain_sweep_is_drawn_by_load_with_its_slo():
    points = [CurvePoint(4, 30.0, 5.0), CurvePoint(1, 10.0, 2.0), CurvePoint(2, 12.0, 3.0)]
    axes = sweep_figure(points, {"p99_ms": 25.0}, 2.0, "users").axes[0]
    assert list(axes.lines[0].get_xdata()) == [1, 2, 4]
    assert any(list(line.get_ydata()) == [25.0, 25.0] for line in axes.lines)


def test_the_demo_report_draws_every_servers_curve_on_one_chart():
    document = capacity_document()
    record = document["capacity"]
    curve = [
        {
            "rate": level["rate"],
            "p99_ms": level["p99_ms"],
            "p99_low_ms": level["p99_ms_low"],
            "p99_high_ms": level["p99_ms_high"],
            "fitted_p99_ms": level["fitted_p99_ms"],
            "verdict": level["verdict"],
        }
        for level in record["levels"]
    ]
    capacity = {
        server: DemoCapacity(
            p99_ms=30.0,
            max_rps=record["max_rps"],
            first_failing_rps=record["first_failing_rps"],
            config=f"{server} settings",
            estimate_rps=record["estimate_rps"],
            interval_rps=record["interval_rps"],
            binding=record["binding"]["words"],
            curve=curve,
        )
        for server in ("triton", "torchserve")
    }
    summary = RunSummary(
        run_id="demo",
        scenario="demo",
        started_at="2026-12-01T00:00:00+00:00",
        duration_s=1.0,
        warmup_s=0.0,
        workers=1,
        capacity=capacity,
        targets={},
        slo=SloSection(passed=True, checks=[]),
    )
    section = capacity_html(summary)
    assert "Capacity under p99 ≤ 30 ms, each server as configured" in section
    assert "every server&#x27;s p99 against the offered rate" in section and "<td>torchserve</td>" in section
    curves = [Curve("a", [CurvePoint(1.0, 5.0), CurvePoint(2.0, 50.0)], (1.0, 2.0), 1.5), Curve("b", [CurvePoint(1.0, 8.0)])]
    axes = side_by_side_figure(curves, {"p99_ms": 30.0}, "rate").axes[0]
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["a: 1.5", "b"]


def test_the_console_names_the_interval_the_constraint_and_the_precision():
    lines = answer_lines(capacity_document()["capacity"])
    assert lines[0].startswith("capacity under the SLO: ") and "95 % interval [" in lines[0]
    assert any(line.startswith("  binding constraint: latency (p99)") for line in lines)
    assert any("precision" in line and "the search made its 4 runs" in line for line in lines)


def test_no_capacity_says_whether_rates_failed_or_were_within_the_noise():
    failed = {"estimate_rps": None, "max_rps": None, "levels": [{"rate": 100.0, "verdict": "fail"}]}
    assert answer_lines(failed)[0] == "capacity under the SLO: no rate met it"
    unsure = {"estimate_rps": None, "max_rps": None}
    unsure["levels"] = [
        {"rate": 200.0, "verdict": "unsure"},
        {"rate": 100.0, "verdict": "unsure"},
        {"rate": 400.0, "verdict": "fail"},
    ]
    assert answer_lines(unsure)[0] == (
        "capacity under the SLO: not found: no rate passed, and 100, 200 req/s were within the noise of it"
    )


def test_precision_is_never_said_reached_beside_a_verification_that_went_the_other_way():
    rng = np.random.default_rng(1)
    runs = [
        simulate_run(rate, 4, 10.0, rng, windows=6, step=index + 1) for index, rate in enumerate((200.0, 400.0, 300.0, 350.0))
    ]
    judgement = judge(runs, Bounds({"p99_ms": 30.0}))
    answer = CapacityAnswer(judgement, SearchEnd("steps", "the search made its 4 runs"), runs)
    slower = simulate_run(judgement.boundary.low_rps * 0.8, 4, 40.0, rng, windows=6, step=5)  # the server got slower
    answer.verification = verify_runs([slower], judgement.boundary, Bounds({"p99_ms": 30.0}))
    assert answer.verification.verified is False
    wide_enough = capacity_record(answer, RULES, precision_pct=1000.0)  # any width is within this precision
    assert wide_enough["precision_reached"] is False
    assert any("precision NOT reached" in line for line in answer_lines(wide_enough))
