"""The Inference tab's figures (`inferload.webui.live`), computed from a RunRecord built here: exact
percentiles merged over workers, the server's figures so far, open loop, errors by class, SLO
state, and once the run stopped, exactly summary.json's figures."""

from __future__ import annotations

from typing import Any

from inferload.measure.hdr import LatencyStats
from inferload.measure.run_record import RunRecord
from inferload.results.summary import RunFacts, build_summary
from inferload.scenario.schema import Scenario
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.webui.live import (
    LiveInputs,
    LocustError,
    ServerReadings,
    ServerView,
    errors_by_class,
    inference_stats,
    server_views,
)
from tests.support.scenario_factory import scenario, tiny_target

START = 3_000_000.0


def steady_scenario(**slo: Any) -> Scenario:
    target = tiny_target("a", "triton-grpc", "127.0.0.1:8001", slo=slo or None)
    return scenario({"kind": "steady", "users": 2}, duration="20s", targets=[target], warmup="2s", window="1s")


def worker_record(latencies: list[float], failures: int = 0) -> RunRecord:
    """A worker's record: every request in the steady state (after the 2 s warm-up)."""
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("a",))
    for i, latency in enumerate(latencies):
        record.record("a", latency, False, START + 3.0 + i * 0.01)
    for i in range(failures):
        record.record("a", 0.0, True, START + 3.5 + i * 0.01)
    return record


def merged_record(*workers: RunRecord) -> RunRecord:
    """The master's record: each worker's report merged, as Locust's worker_report delivers them."""
    master = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("a",))
    for index, worker in enumerate(workers):
        master.merge_wire(worker.drain_to_wire(), worker=f"w{index}")
    return master


def snapshot(taken_at: float, requests: float, inferences: float, executions: float, batches: dict[int, int]) -> ServerSnapshot:
    counters = {
        "requests": requests,
        "request_us": requests * 2000,
        "queued": requests,
        "queue_us": requests * 500,
        "computed": requests,
        "compute_us": requests * 1200,
        "inferences": inferences,
        "executions": executions,
        "failures": 0,
    }
    return ServerSnapshot("triton", "tiny", taken_at, counters, batches)


def readings(final: dict[str, Any] | None = None) -> ServerReadings:
    before = snapshot(START + 2.0, 100, 100, 100, {1: 100})
    after = snapshot(START + 6.0, 500, 500, 300, {1: 200, 2: 100, 4: 50})
    return ServerReadings({"a": before}, {"a": after}, final or {}, {})


def test_percentiles_are_exact_over_every_worker_not_an_average_of_theirs():
    slow = [float(v) for v in range(1, 101)]  # one worker: 1..100 ms
    fast = [0.5] * 300  # another: all fast
    record = merged_record(worker_record(slow), worker_record(fast))
    stats = inference_stats(LiveInputs(steady_scenario(), record, now=START + 10.0, state="running", workers=2))
    everything = LatencyStats()
    for value in slow + fast:
        everything.record_success(value)
    assert stats["targets"][0]["latency_ms"] == everything.latency_ms()
    assert stats["targets"][0]["requests"] == 400
    assert stats["run"] == stats["run"] | {"phase": "steady", "final": False, "workers": 2, "steady_s": 8.0}
    assert stats["targets"][0]["throughput_rps"] == 400 / 8.0  # successes over the steady state so far


def test_a_stopped_run_shows_exactly_what_summary_json_gets():
    record = merged_record(worker_record([1.0, 2.0, 3.0, 40.0]), worker_record([5.0] * 7, failures=2))
    record.stopped_at = START + 12.3
    side = readings().newest["a"]
    final = {"a": server_views(steady_scenario(), readings(), stopped=False, in_warmup=False)["a"].figures}
    the_scenario = steady_scenario(p99_ms=30, error_rate=0.5, min_avg_batch_size=1.5)
    views = server_views(the_scenario, readings(final), stopped=True, in_warmup=False)
    stats = inference_stats(LiveInputs(the_scenario, record, now=START + 99.0, state="stopped", servers=views))
    summary = build_summary(the_scenario, record, RunFacts(run_id="r", server_side=final)).model_dump(mode="json")
    mine, tab = summary["targets"]["a"], stats["targets"][0]
    assert side.taken_at > 0 and stats["run"]["final"] is True
    for key in ("requests", "failures", "error_rate", "throughput_rps", "latency_ms", "server_side", "residual_ms"):
        assert tab[key] == mine[key], key
    assert [(c["metric"], c["value"], c["passed"]) for c in stats["slo"]["checks"]] == [
        (c["metric"], c["value"], c["passed"]) for c in summary["slo"]["checks"]
    ]
    assert [c["state"] for c in stats["slo"]["checks"]] == ["fail", "pass", "pass"]  # p99 40 ms > 30
    assert stats["slo"]["state"] == "fail"


def test_during_the_warm_up_checks_are_pending_and_missing_figures_say_why():
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("a",))
    record.record("a", 3.0, False, START + 0.5)  # a warm-up request
    the_scenario = steady_scenario(p99_ms=30, min_avg_batch_size=2)
    empty = ServerReadings({}, {}, {}, {})
    views = server_views(the_scenario, empty, stopped=False, in_warmup=True)
    stats = inference_stats(LiveInputs(the_scenario, record, now=START + 1.5, state="running", servers=views))
    target = stats["targets"][0]
    assert stats["run"]["phase"] == "warmup"
    assert target["latency_ms"]["p99"] is None and target["requests"] == 0  # steady state only
    assert target["server_side"] is None and target["server_why"] == "server figures start when the warm-up ends"
    assert target["residual_why"] == "no successful request in the steady state yet"
    assert {c["state"] for c in stats["slo"]["checks"]} == {"pending"} and stats["slo"]["state"] == "pending"
    assert [w["requests"] for w in target["windows"]] == [1]  # the warm-up's window shows in the chart


def test_a_server_figure_not_read_yet_leaves_its_check_pending_while_the_rest_pass():
    record = merged_record(worker_record([2.0] * 10))
    the_scenario = steady_scenario(p99_ms=30, min_avg_batch_size=1.2)
    before = {"a": snapshot(START + 2.0, 1, 1, 1, {1: 1})}
    views = server_views(the_scenario, ServerReadings(before, {}, {}, {}), stopped=False, in_warmup=False)
    stats = inference_stats(LiveInputs(the_scenario, record, now=START + 5.0, state="running", servers=views))
    assert [c["state"] for c in stats["slo"]["checks"]] == ["pass", "pending"]
    assert "waiting for the first server reading" in stats["targets"][0]["server_why"]


def test_server_figures_so_far_are_the_difference_since_the_warm_ups_end():
    views = server_views(steady_scenario(), readings(), stopped=False, in_warmup=False)
    figures = views["a"].figures
    assert figures is not None
    assert figures["avg_batch_size"] == 400 / 200  # inferences / executions in between
    assert figures["batch_size_histogram"] == {"1": 100, "2": 100, "4": 50}
    assert figures["queue_ms_avg"] == 0.5 and figures["compute_ms_avg"] == 1.2


def test_targets_on_one_model_share_the_servers_figures_and_say_so():
    targets = [tiny_target(n, "triton-grpc", "127.0.0.1:8001") for n in ("a", "b")]
    the_scenario = scenario({"kind": "steady", "users": 2}, targets=targets)
    views = server_views(the_scenario, readings(), stopped=False, in_warmup=False)
    assert views["b"].figures == {**(views["a"].figures or {}), "shared_with": ["a"]}
    assert (views["a"].figures or {})["shared_with"] == ["b"]


def test_an_unreadable_server_shows_its_reason():
    errors = {"a": "cannot reach 127.0.0.1:8001"}
    views = server_views(steady_scenario(), ServerReadings({}, {}, {}, errors), stopped=False, in_warmup=False)
    assert views["a"] == ServerView(None, "cannot reach 127.0.0.1:8001")


def test_errors_are_grouped_by_their_class_most_frequent_first():
    rows = [
        LocustError("a", "RequestTimeout('timeout: no answer from x in time')", 3),
        LocustError("a", "ConnectionRefused('refused: cannot connect to x')", 5),
        LocustError("a", "RequestTimeout('timeout: other')", 4),
        LocustError("b", "plain message", 1),
    ]
    grouped = errors_by_class(rows)
    assert [(e["class"], e["count"]) for e in grouped["a"]] == [("RequestTimeout", 7), ("ConnectionRefused", 5)]
    assert grouped["b"] == [{"class": "error", "count": 1, "example": "plain message"}]


def test_open_loop_shows_intended_and_achieved_rate_send_lag_and_unsent():
    target = tiny_target("a", "triton-grpc", "127.0.0.1:8001")
    shape = {"kind": "constant-rate", "rate": 100}
    the_scenario = scenario(shape, duration="20s", targets=[target], warmup="2s", window="1s")
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("a",))
    for i in range(400):  # 4 s of steady arrivals at 100/s, 20 never sent
        intended = START + 2.0 + i * 0.01
        record.record_arrival("a", intended)
        if i % 20 == 0:
            record.record_unsent("a", intended)
        else:
            record.record("a", 2.0, False, intended + 0.002)
            record.record_send_lag("a", 1.5, intended + 0.002)
    stats = inference_stats(LiveInputs(the_scenario, record, now=START + 6.0, state="running"))
    loop = stats["targets"][0]["open_loop"]
    assert loop["configured_rps"] == 100 and loop["arrivals"] == 400 and loop["unsent"] == 20
    assert loop["achieved_rps"] == 380 / 4.0
    assert loop["send_lag_ms"]["p99"] == 1.5
    windows = stats["targets"][0]["windows"]
    assert [w["target_rps"] for w in windows if w["phase"] == "steady"] == [100.0] * 4
    assert stats["run"]["open_loop"] is True


def test_the_chart_leaves_out_the_window_still_filling():
    record = merged_record(worker_record([1.0] * 50))
    stats = inference_stats(LiveInputs(steady_scenario(), record, now=START + 3.7, state="running"))
    assert [w["t"] for w in stats["targets"][0]["windows"]] == [0.0, 1.0, 2.0]  # window 3 still open
    record.stopped_at = START + 3.7
    stats = inference_stats(LiveInputs(steady_scenario(), record, now=START + 9.0, state="stopped"))
    assert [w["t"] for w in stats["targets"][0]["windows"]] == [0.0, 1.0, 2.0, 3.0]
    assert stats["targets"][0]["windows"][-1]["requests"] == 50 and stats["targets"][0]["windows"][-1]["p99_ms"] == 1.0


def test_a_run_not_started_has_no_figures_and_no_windows():
    record = RunRecord(window_s=1.0, warmup_s=2.0, targets=("a",))
    stats = inference_stats(LiveInputs(steady_scenario(p99_ms=10), record, now=START, state="ready"))
    assert stats["run"]["phase"] == "not started" and stats["run"]["elapsed_s"] is None
    assert stats["targets"][0]["windows"] == [] and stats["slo"]["checks"][0]["state"] == "pending"


def test_a_generative_target_shows_its_token_figures_as_summary_json_has_them_and_tokens_per_window():
    from inferload.measure.decoupled_record import StreamTiming
    from inferload.measure.generation_record import GenerationTotals

    chat = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8085", "model": "m"}
    the_scenario = scenario(
        {"kind": "steady", "users": 2},
        duration="20s",
        targets=[{**chat, "generation": {"goodput": {"ttft_ms": 100}}}],
        warmup="2s",
        window="1s",
    )
    record = RunRecord(window_s=1.0, warmup_s=2.0, started_at=START, targets=("chat",))
    index = int(START) + 3
    totals = GenerationTotals()
    for tpot in (2.0, 4.0):
        totals.tpot.record_success(tpot)
        totals.itl.record_success(tpot)
        totals.ttst.record_success(10.0)
        record.record("chat", 30.0, False, START + 3.5)
        record.streams.record((index, "chat"), StreamTiming(8, 5.0, (2.0,) * 7), steady=True)
    # [generations, tokens, most, by usage, tokenizer, events, good]; a window: [generations, tokens, good, judged]
    totals.counts.add_wire([2, 16, 8, 2, 0, 0, 1])
    record.generations.merge_wire({"counts": [[index, "chat", [2, 16, 1, 2]]], "steady": {"chat": totals.to_wire()}})
    record.stopped_at = START + 12.0
    stats = inference_stats(LiveInputs(the_scenario, record, now=START + 99.0, state="stopped"))
    summary = build_summary(the_scenario, record, RunFacts(run_id="r")).model_dump(mode="json")
    tab, mine = stats["targets"][0], summary["targets"]["chat"]
    assert tab["generation"] == mine["generation"] and tab["decoupled"] == mine["decoupled"]
    assert tab["generation"]["goodput"]["good"] == 1 and tab["generation"]["output_tokens"] == 16
    # the window the two generations ended in has their tokens; every other window has none
    assert {w["t"]: w["output_tokens_per_s"] for w in tab["windows"] if w["output_tokens_per_s"]} == {3.0: 16.0}
    assert all("output_tokens_per_s" in w for w in tab["windows"])
