"""The bench's pure parts: the peer tools' output parsers (on captures saved from real runs against
the reference server, tests/captures/peers/), difference over difference, and the bench's goal rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.goals import goal_rows, goals_section
from bench.peer_output import (
    PeerOutputError,
    parse_aiperf,
    parse_aiperf_stream,
    parse_guidellm_stream,
    parse_h2load,
    parse_hey,
    parse_inference_perf_stream,
    parse_wrk,
)
from bench.peers import cost_from_pair, residual

CAPTURES = Path(__file__).parents[1] / "captures" / "peers"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def test_h2load_saturation_capture() -> None:
    report = parse_h2load(capture("h2load.txt"))
    assert (report.succeeded, report.failed) == (6456, 0)
    assert report.mean_ms == pytest.approx(2.45)  # "time for request": min max MEAN sd


def test_h2load_paced_capture_reads_microseconds() -> None:
    report = parse_h2load(capture("h2load_rps.txt"))
    assert report.succeeded == 200
    assert report.mean_ms == pytest.approx(0.459)


def test_h2load_cannot_see_grpc_failures() -> None:
    """The server failed a quarter of these calls (grpc-status in the trailers); h2load counts
    HTTP 200s: why the bench counts requests on the server."""
    report = parse_h2load(capture("h2load_grpc_failures.txt"))
    assert (report.succeeded, report.failed) == (400, 0)


def test_wrk_capture() -> None:
    report = parse_wrk(capture("wrk.txt"))
    assert (report.succeeded, report.failed) == (16281, 0)
    assert report.mean_ms == pytest.approx(1.49)


def test_wrk_non_2xx_are_failures() -> None:
    report = parse_wrk(capture("wrk_failures.txt"))
    assert report.failed == 1784
    assert report.succeeded == 7302 - 1784


def test_hey_capture() -> None:
    report = parse_hey(capture("hey.txt"))
    assert (report.succeeded, report.failed) == (5475, 0)
    assert report.mean_ms == pytest.approx(2.9)


def test_hey_paced_capture() -> None:
    report = parse_hey(capture("hey_rate.txt"))
    assert report.succeeded > 0 and report.failed == 0
    assert report.mean_ms is not None and report.mean_ms > 0


def test_hey_statuses_and_transport_errors() -> None:
    failures = parse_hey(capture("hey_failures.txt"))
    assert (failures.succeeded, failures.failed) == (288, 112)
    refused = parse_hey(capture("hey_refused.txt"))
    assert (refused.succeeded, refused.failed, refused.mean_ms) == (0, 20, None)


@pytest.mark.parametrize(
    "parse",
    [parse_h2load, parse_wrk, parse_hey, parse_aiperf, parse_aiperf_stream, parse_guidellm_stream, parse_inference_perf_stream],
)
def test_output_without_its_summary_is_an_error(parse: Any) -> None:
    with pytest.raises(PeerOutputError):
        parse("connection refused\n")


# The streaming peers' captures (item 12): each tool against the reference server's script (8 events of
# one token a request, one every 100 ms, 4 streams, 4 s; 2026-12-04). The AIPerf and GuideLLM reports
# are cut to the parts the parsers read, their values as the tools wrote them; inference-perf's is whole.


def test_aiperf_stream_capture() -> None:
    report = parse_aiperf_stream(capture("aiperf_stream.json"))
    assert (report.succeeded, report.failed) == (20, 0)  # no error_request_count: none failed
    assert report.ttft_p50_ms == pytest.approx(104.111795)
    assert report.ttft_p99_ms == pytest.approx(114.27673742999998)
    assert report.itl_p50_ms == pytest.approx(100.39013949999999)


def test_guidellm_stream_capture_counts_the_incomplete_as_failed() -> None:
    """GuideLLM cancels the requests still streaming at its duration's end: incomplete, not errored."""
    report = parse_guidellm_stream(capture("guidellm_stream.json"))
    assert (report.succeeded, report.failed) == (16, 4)
    assert report.ttft_p50_ms == pytest.approx(102.7524471282959)
    assert report.ttft_p99_ms == pytest.approx(107.04708099365234)
    assert report.itl_p50_ms == pytest.approx(100.01233645847866)


def test_inference_perf_summary_capture_is_read_in_ms() -> None:
    report = parse_inference_perf_stream(capture("inference_perf_summary.json"))
    assert (report.succeeded, report.failed) == (20, 0)
    assert report.ttft_p50_ms == pytest.approx(100.87118650005777)  # its seconds, in ms
    assert report.ttft_p99_ms == pytest.approx(104.91822290999835)
    assert report.itl_p50_ms == pytest.approx(100.00812400005543)


def test_stream_reports_without_latencies_say_none() -> None:
    """A run whose requests all failed has counts but no percentiles: None, not an error."""
    aiperf = parse_aiperf_stream(json.dumps({"request_count": {"avg": 0}, "time_to_first_token": {"unit": "ms"}}))
    assert (aiperf.succeeded, aiperf.ttft_p50_ms, aiperf.itl_p50_ms) == (0, None, None)
    totals = {"successful": 0, "errored": 3, "incomplete": 1}
    guidellm = parse_guidellm_stream(json.dumps({"benchmarks": [{"metrics": {"request_totals": totals}}]}))
    assert (guidellm.failed, guidellm.ttft_p99_ms) == (4, None)
    summary = {"successes": {"count": 0, "latency": {"time_to_first_token": None}}, "failures": {"count": 7}}
    assert parse_inference_perf_stream(json.dumps(summary)).failed == 7
    with pytest.raises(PeerOutputError):
        parse_guidellm_stream(json.dumps({"benchmarks": []}))


def run(requests: int, cpu_s: float, wall_s: float) -> dict[str, Any]:
    return {"server_requests": requests, "cpu_s": cpu_s, "wall_s": wall_s}


def test_difference_over_difference_cancels_start_up() -> None:
    # 0.5 s of start-up CPU and 1 s of start-up wall in both; 20 µs per request; 10,000 req/s
    short, long = run(10_000, 0.5 + 0.2, 1 + 1), run(90_000, 0.5 + 1.8, 1 + 9)
    assert cost_from_pair(short, long) == {"us_per_request": 20.0, "rps": 10_000.0}


def test_difference_with_noise_larger_than_the_requests_says_so() -> None:
    figures = cost_from_pair(run(1000, 6.7, 30), run(3000, 6.0, 31))
    assert figures["us_per_request"] is None and "noise" in figures["note"]
    assert cost_from_pair(run(1000, 1, 2), run(1000, 2, 3))["us_per_request"] is None


def test_residual_needs_both_means() -> None:
    assert residual({"tool_mean_ms": 0.75, "server_mean_ms": 0.5}) == 0.25
    assert residual({"tool_mean_ms": None, "server_mean_ms": 0.5}) is None


def results_with(engine_grpc: dict[str, Any], h2load: dict[str, Any], **extra: Any) -> dict[str, Any]:
    table = {"inferload engine (grpc)": engine_grpc, "h2load": h2load}
    return {
        "machine": {"cpu_model": "x", "usable_cores": 2, "load_average_at_start": [1.0, 1.0, 1.0]},
        "peers": {"servers": {"triton": {"table": table}, "reference": {"table": table, **extra}}},
    }


def verdicts(results: dict[str, Any]) -> dict[str, bool | None]:
    return {row.goal: row.met for row in goal_rows(results)}


def test_goals_met_missed_and_not_measured() -> None:
    results = results_with(
        {"residual_ms": 0.2, "us_per_request": 20.0, "send_lag_p99_ms": 0.05, "achieved_ratio": 1.001},
        {"residual_ms": 0.26, "us_per_request": 8.0},
    )
    got = verdicts(results)
    assert got["Fidelity, grpc: engine's mean − Triton's mean request at 200 req/s"] is True
    assert got["Pacing: engine's send-lag p99 at 200 req/s (reference server)"] is True
    assert got["Pacing: achieved / configured rate at 200 req/s"] is True
    assert got["Cost, grpc: engine's client CPU per request at saturation (reference server)"] is True  # 2.5x h2load
    assert got["Fidelity, http: engine's mean − Triton's mean request at 200 req/s"] is None
    assert got["Scale-out: engine, `--workers 2` / one process (reference server, saturated)"] is None


def test_goals_missed_on_the_peer_ratio_alone() -> None:
    """Under 25 µs but more than 3x h2load; under 0.25 ms but above h2load's residual: missed."""
    results = results_with(
        {"residual_ms": 0.2, "us_per_request": 24.0, "send_lag_p99_ms": 0.2, "achieved_ratio": 0.99},
        {"residual_ms": 0.15, "us_per_request": 7.0},
        pacing_80pct={"rate_rps": 8000, "send_lag_ms": {"p99": 0.3}, "achieved_ratio": 0.996},
    )
    results["peers"]["scale_out"] = {"speedup_2_vs_1": 1.85}
    got = verdicts(results)
    assert got["Fidelity, grpc: engine's mean − Triton's mean request at 200 req/s"] is False
    assert got["Cost, grpc: engine's client CPU per request at saturation (reference server)"] is False
    assert got["Pacing: engine's send-lag p99 at 200 req/s (reference server)"] is False
    assert got["Pacing: achieved / configured rate at 200 req/s"] is False
    assert got["Pacing: engine's send-lag p99 at 80 % of its own ceiling (reference server)"] is False
    assert got["Pacing: achieved / configured rate at 80 %"] is True
    assert got["Scale-out: engine, `--workers 2` / one process (reference server, saturated)"] is True


def test_goals_section_names_the_machine() -> None:
    lines = goals_section(results_with({}, {}))
    assert lines[0] == "## Issue 20's goals in this run"
    assert "x, 2 cores, load average 1.0" in lines[2]
    assert any("not measured" in line for line in lines)


def test_aiperf_sends_the_tensor_as_v2_json_closed_loop_or_paced() -> None:
    from bench.aiperf import aiperf_command

    body = {"inputs": [{"name": "INPUT__0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 1.5]}]}
    closed = aiperf_command(Path("aiperf"), Path("tok"), "127.0.0.1:8000", "identity", body, 4, None, 16, Path("out"))
    extra = json.loads(closed[closed.index("--extra-inputs") + 1])
    assert json.loads(extra["payload_template"]) == body and extra["response_field"] == "outputs[0].name"
    assert closed[closed.index("--custom-endpoint") + 1] == "/v2/models/identity/infer"
    assert closed[closed.index("--concurrency") + 1] == "16" and "--request-rate" not in closed
    assert closed[closed.index("--benchmark-duration") + 1] == "4" and closed[closed.index("--tokenizer") + 1] == "tok"
    paced = aiperf_command(Path("aiperf"), Path("tok"), "127.0.0.1:8000", "identity", body, 8, 200.0, 16, Path("out"))
    assert paced[paced.index("--request-rate") + 1] == "200" and "--concurrency" not in paced
    assert paced[paced.index("--arrival-pattern") + 1] == "constant"


def test_streaming_peers_commands_closed_loop_for_the_steady_time() -> None:
    from bench.aiperf import aiperf_chat_stream_command
    from bench.guidellm import guidellm_command
    from bench.inference_perf import inference_perf_config

    url = "http://127.0.0.1:8000"
    aiperf = aiperf_chat_stream_command(Path("aiperf"), Path("tok"), url, "identity", 100, 5, 8, Path("out"))
    assert aiperf[aiperf.index("--endpoint-type") + 1] == "chat" and "--streaming" in aiperf
    assert aiperf[aiperf.index("--concurrency") + 1] == "100" and aiperf[aiperf.index("--benchmark-duration") + 1] == "5"
    assert aiperf[aiperf.index("--url") + 1] == url and "--use-server-token-count" in aiperf
    guidellm = guidellm_command(Path("guidellm"), Path("tok"), url, "identity", 100, 5, 8, Path("out"))
    assert guidellm[guidellm.index("--profile") + 1] == "kind=concurrent,streams=100"
    assert guidellm[guidellm.index("--constraint") + 1] == "kind=max_duration,seconds=5"
    assert f"target={url}," in guidellm[guidellm.index("--backend") + 1]
    assert guidellm[guidellm.index("--tokenizer") + 1] == "kind=huggingface_auto,model=tok"
    config = inference_perf_config(Path("tok"), url, "identity", 100, 600, Path("out"))
    assert config["api"] == {"type": "chat", "streaming": True}
    assert config["load"]["type"] == "concurrent"
    assert config["load"]["stages"] == [{"num_requests": 600, "concurrency_level": 100}]
    assert config["server"]["base_url"] == url and config["tokenizer"]["pretrained_model_name_or_path"] == "tok"


def stream_run(streams: int, ttft_error: float, script_p50: float, cpu_us: float | None) -> dict[str, Any]:
    return {
        "streams": streams,
        "requests": 10,
        "ttft_ms": {
            "inferload": {"p50": script_p50 + ttft_error, "p99": script_p50 + ttft_error},
            "script": {"p50": script_p50, "p99": script_p50},
        },
        "ttft_error_ms": {"p50": ttft_error, "p99": ttft_error},
        "gap_error_ms": {"p50": 0.01},
        "stream_error_ms": {"p50": 0.1, "p99": 0.2},
        "server_late_ms": {"p50": 0.05, "p99": 0.1},
        "client_cpu_us_per_event": cpu_us,
    }


def test_stream_goals_hold_ttft_to_50_us_plus_1_pct_at_100_streams_and_1_ms_at_1000() -> None:
    from bench.report import stream_section

    # 100 ms scripted TTFT: 50 us + 1 ms = 1.05 ms allowed at 100 streams
    runs = [stream_run(100, 1.0, 100.0, 3.0), stream_run(1000, 1.2, 100.0, 1.5)]
    streams: dict[str, Any] = {"events_per_request": 8, "hold_ms": 100.0, "steady_s": 12, "runs": runs}
    results = {"stream_fidelity": streams}
    got = verdicts(results)
    assert got["TTFT p50 error at 100 streams (reference server, script's TTFT)"] is True
    assert got["TTFT p50 error at 1,000 streams"] is False
    assert got["Client CPU per streamed token (whole `inferload run`, start-up included)"] is True  # the 1,000 run's 1.5
    runs[0] = stream_run(100, 1.1, 100.0, None)
    assert verdicts(results)["TTFT p99 error at 100 streams (reference server, script's TTFT)"] is False
    assert verdicts({})["TTFT p50 error at 1,000 streams"] is None
    table = stream_section(streams)
    assert table[0].startswith("## 12. Stream fidelity") and table[-1].startswith("| 1000 | 10 |")
