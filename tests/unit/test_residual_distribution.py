"""The per-request residual (client latency - Triton's span from REQUEST_START to the response's
send): the join's arithmetic, its distribution in ``tail.residual_ms`` and its block in report.html (no server)."""

from __future__ import annotations

from xml.etree import ElementTree

from inferload.measure.trace_join import ClientTiming, JoinedRequest, ServerTrace, join
from inferload.results.report import residual_html
from inferload.results.tail import histogram, nearest_rank, residual_distribution, tail_summary
from inferload.servermetrics.triton_trace import parse_traces


def grpc_stamps(t0: int) -> dict[str, int]:
    """A unary gRPC request: frontend read at t0, REQUEST_START 0.1 ms later, a 2 ms request, sent 0.2 ms after."""
    return {
        "GRPC_WAITREAD_END": t0,
        "REQUEST_START": t0 + 100_000,
        "QUEUE_START": t0 + 110_000,
        "COMPUTE_START": t0 + 200_000,
        "COMPUTE_INPUT_END": t0 + 300_000,
        "COMPUTE_OUTPUT_START": t0 + 1_900_000,
        "COMPUTE_END": t0 + 2_000_000,
        "REQUEST_END": t0 + 2_100_000,
        "GRPC_SEND_END": t0 + 2_300_000,
    }


def joined(residual_ms: float) -> JoinedRequest:
    return JoinedRequest("r", 2.0 + residual_ms, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1, request_ms=2.0)


def test_the_residual_is_the_client_latency_less_the_request_span() -> None:
    traces = [ServerTrace("m", "a-1", grpc_stamps(10_000_000))]
    result = join(traces, {"a-1": ClientTiming("a-1", 0, 3_000_000)}, "m")  # 3 ms at the client
    (request,) = result.joined
    assert request.request_ms == 2.0  # REQUEST_START .. REQUEST_END, not the frontend's 2.3 ms
    assert abs(request.residual_ms - 1.0) < 1e-9
    assert abs(request.network_client_ms - 0.7) < 1e-9  # the anatomy's part still uses the frontend span


def test_the_request_span_ends_when_the_response_began_to_leave() -> None:
    # as Triton's Python backend writes it: the response sent before the execution (and the request) ends,
    # the send's end noted after the client already had the answer
    stamps = {**grpc_stamps(0), "GRPC_SEND_START": 1_950_000, "REQUEST_END": 2_600_000, "GRPC_SEND_END": 3_200_000}
    (request,) = join([ServerTrace("m", "a-1", stamps)], {"a-1": ClientTiming("a-1", 0, 2_500_000)}, "m").joined
    assert abs(request.request_ms - 1.85) < 1e-9  # REQUEST_START (0.1 ms) .. GRPC_SEND_START (1.95 ms)
    assert abs(request.residual_ms - 0.65) < 1e-9 and request.network_client_ms == 0.0  # the anatomy's part: clamped


def test_without_request_stamps_the_frontend_span_is_the_request_span() -> None:
    stamps = {k: v for k, v in grpc_stamps(0).items() if k not in ("REQUEST_START", "REQUEST_END")}
    (request,) = join([ServerTrace("m", "a-1", stamps)], {"a-1": ClientTiming("a-1", 0, 3_000_000)}, "m").joined
    assert abs(request.request_ms - 2.3) < 1e-9 and abs(request.residual_ms - 0.7) < 1e-9


def test_nearest_rank_percentiles_are_values_a_request_had() -> None:
    ordered = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert [nearest_rank(ordered, q) for q in (50, 90, 99, 100)] == [50.0, 90.0, 99.0, 100.0]
    assert nearest_rank([4.0], 99) == 4.0 and nearest_rank([1.0, 2.0], 0) == 1.0


def test_the_distribution_has_ordered_percentiles_its_mean_and_a_histogram() -> None:
    residuals = [0.1 * i for i in range(1, 100)] + [50.0]  # 0.1 .. 9.9 ms, and one long one
    figures = residual_distribution([joined(r) for r in residuals])
    assert figures is not None
    assert figures["n"] == 100
    assert abs(figures["p50"] - 5.0) < 1e-6 and abs(figures["p90"] - 9.0) < 1e-6 and abs(figures["p99"] - 9.9) < 1e-6
    assert figures["max"] == 50.0 and abs(figures["min"] - 0.1) < 1e-6
    assert abs(figures["mean"] - (sum(residuals) / 100)) < 1e-3
    hist = figures["histogram"]
    assert len(hist["counts"]) == 10 and len(hist["edges_ms"]) == 11
    assert sum(hist["counts"]) + hist["above"] == 100 and hist["above"] == 1  # the 50 ms one, above the p99
    assert hist["edges_ms"][0] == 0.1 and hist["edges_ms"][-1] == 9.9
    assert residual_distribution([]) is None


def test_a_histogram_of_equal_values_puts_them_in_its_first_bin() -> None:
    assert histogram([1.0, 1.0, 1.0], 1.0) == {"edges_ms": [1.0] * 11, "counts": [3] + [0] * 9, "above": 0}


def test_the_summary_tail_gets_the_residual_and_the_report_shows_it() -> None:
    tail = tail_summary({"available": True, "requests": [joined(0.2), joined(0.4), joined(3.0)]}, None, None)
    residual = tail["residual_ms"]
    assert residual["n"] == tail["joined"] == 3 and residual["max"] == 3.0
    block = residual_html(residual)
    assert "Per-request residual" in block and block.count("<rect") == 11
    svg = ElementTree.fromstring(block[block.index("<svg") :])  # well-formed inline SVG
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert residual_html(None) == "" and "residual_ms" not in tail_summary({"available": False}, None, None)


def test_a_streamed_request_keeps_its_final_send_and_its_first_read() -> None:
    entries = [
        {"id": 1, "model_name": "m", "request_id": "a-1"},
        {"id": 1, "timestamps": [{"name": "GRPC_WAITREAD_END", "ns": 10}, {"name": "REQUEST_START", "ns": 11}]},
        {"id": 1, "timestamps": [{"name": "GRPC_SEND_END", "ns": 50}]},  # one per response
        {"id": 1, "timestamps": [{"name": "GRPC_SEND_END", "ns": 90}]},
        {"id": 1, "timestamps": [{"name": "GRPC_SEND_END", "ns": 70}]},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 99}]},  # any other name: its first time
    ]
    (trace,) = parse_traces(entries)
    assert trace.timestamps == {"GRPC_WAITREAD_END": 10, "REQUEST_START": 11, "GRPC_SEND_END": 90}
