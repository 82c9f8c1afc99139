"""The trace join and the tail anatomy, on constructed records and a saved-form trace file (no server)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from inferload.measure.trace_join import ClientTiming, ClientTraceRecords, JoinedRequest, ServerTrace, drain, join, merge_message
from inferload.results.tail import tail_anatomy, tail_summary
from inferload.servermetrics.triton_trace import json_entries, parse_traces, read_traces, restorable, run_settings
from inferload.users.triton import grpc_id_field, http_body_with_id


def stamps(t0: int, queue: int, compute: int, http: bool = True) -> dict[str, int]:
    """A request's Triton timestamps (ns): 100 µs frontend, then queue, then compute (input/infer/output)."""
    s = t0 + 50_000
    out = {"REQUEST_START": s, "QUEUE_START": s + 10_000}
    c = out["QUEUE_START"] + queue
    out.update(COMPUTE_START=c, COMPUTE_INPUT_END=c + 1_000, COMPUTE_OUTPUT_START=c + compute - 1_000, COMPUTE_END=c + compute)
    out["REQUEST_END"] = c + compute + 10_000
    recv, send = ("HTTP_RECV_START", "HTTP_SEND_END") if http else ("GRPC_WAITREAD_END", "GRPC_SEND_END")
    out[recv], out[send] = t0, out["REQUEST_END"] + 40_000
    return out


def test_the_parts_add_up_to_the_latency_and_batches_are_counted() -> None:
    ts = stamps(1_000_000, queue=2_000_000, compute=3_000_000)
    traces = [ServerTrace("m", "a-1", ts), ServerTrace("m", "a-2", ts), ServerTrace("other", "a-3", ts), ServerTrace("m", "", ts)]
    clients = {"a-1": ClientTiming("a-1", 0, 7_000_000), "a-2": ClientTiming("a-2", 500_000, 6_500_000)}
    result = join(traces, clients, "m")
    assert (len(result.joined), result.server_traces, result.unmatched_traces) == (2, 2, 0)
    first = result.joined[0]
    parts = first.network_client_ms + first.frontend_ms + first.queue_ms + first.compute_ms
    assert abs(parts - first.latency_ms) < 1e-9 and first.latency_ms == 7.0
    assert first.queue_ms == 2.0 and first.compute_ms == 3.0 and first.compute_infer_ms == 2.998
    assert abs(first.network_client_ms - (7.0 - 5.11)) < 1e-9  # client latency less the server's span (5.11 ms)
    assert abs(first.frontend_ms - 0.11) < 1e-9
    assert first.batch_size == 2  # two traced requests share the compute span


def request(latency: float, queue: float = 0.0, compute: float = 0.0, batch: int = 1) -> JoinedRequest:
    rest = latency - queue - compute
    return JoinedRequest("r", latency, rest, 0.0, queue, 0.0, compute, 0.0, batch)


def test_the_verdict_names_what_the_slow_requests_spent_their_time_on() -> None:
    typical = [request(10.0, queue=1.0, compute=5.0) for _ in range(97)]
    queued = tail_anatomy([*typical, *(request(100.0, queue=90.0, compute=5.0) for _ in range(3))], 50.0, 10.0)
    assert queued["verdict"] == "queueing" and queued["above_p99"]["count"] == 3
    assert queued["above_p99"]["median_share"]["queue_ms"] == 0.9
    assert queued["verdict_line"].startswith("the p99 is queueing: 90% of a slow request's time")
    computed = tail_anatomy([*typical, *(request(100.0, queue=1.0, compute=95.0) for _ in range(3))], 50.0, 10.0)
    assert computed["verdict"] == "compute"
    batched = tail_anatomy([*typical, *(request(100.0, queue=1.0, compute=95.0, batch=8) for _ in range(3))], 50.0, 10.0)
    assert batched["verdict"] == "batching" and "batch 8 vs 1" in batched["verdict_line"]
    wire = tail_anatomy([*typical, *(request(100.0, queue=1.0, compute=5.0) for _ in range(3))], 50.0, 10.0)
    assert wire["verdict"] == "network or client"
    assert wire["around_p50"]["count"] == 97 and wire["around_p50"]["median_ms"]["compute_infer_ms"] == 5.0


def test_too_few_joined_requests_above_the_run_p99_fall_back_to_the_sample() -> None:
    joined = [request(float(i), queue=float(i) * 0.8) for i in range(1, 201)]
    anatomy = tail_anatomy(joined, 1000.0, 100.0)  # no joined request is above the run's p99
    assert anatomy["p99_basis"] == "sample" and anatomy["above_p99"]["count"] >= 1
    assert tail_summary({"available": True, "requests": joined}, 1000.0, 100.0)["verdict"] == "queueing"
    assert "requests" not in tail_summary({"available": True, "requests": joined}, None, None)
    assert tail_anatomy([], None, None)["verdict"] is None


def test_trace_files_parse_also_while_triton_still_writes_them(tmp_path: Path) -> None:
    entries = [
        {"id": 1, "model_name": "m", "model_version": 1, "request_id": "p-1"},
        *({"id": 1, "timestamps": [{"name": name, "ns": ns}]} for name, ns in stamps(0, 1000, 2000).items()),
        {"id": 2, "model_name": "m", "model_version": 1, "request_id": "p-2"},
    ]
    text = json.dumps(entries)
    cut = text[: text.rindex("}") - 3]  # the file's end, mid-entry, as Triton left it
    parsed = parse_traces(json_entries(cut))
    assert [t.request_id for t in parsed] == ["p-1"] and parsed[0].timestamps["QUEUE_START"] == 60_000
    (tmp_path / "trace.json.0").write_text(text)
    old = tmp_path / "trace.json.7"
    old.write_text("[]")
    os.utime(old, (0, 0))  # written before the run: not read
    traces = read_traces(tmp_path / "trace.json", time.time() - 60)
    assert {t.request_id for t in traces} == {"p-1", "p-2"}
    assert run_settings(100) == {"trace_level": ["TIMESTAMPS"], "trace_rate": "100", "trace_count": "-1", "log_frequency": "1000"}
    previous = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0", "trace_file": "/x"}
    assert restorable(previous) == {k: previous[k] for k in ("trace_level", "trace_rate", "trace_count", "log_frequency")}


def test_request_ids_go_on_the_pre_encoded_requests() -> None:
    from tritonclient.grpc import service_pb2

    base = service_pb2.ModelInferRequest(model_name="m").SerializeToString()
    assert service_pb2.ModelInferRequest.FromString(base + grpc_id_field("ab-7")).id == "ab-7"
    long_id = "x" * 300  # a length over 127: a two-byte varint
    assert service_pb2.ModelInferRequest.FromString(base + grpc_id_field(long_id)).id == long_id
    assert grpc_id_field("ab-7") == service_pb2.ModelInferRequest(id="ab-7").SerializeToString()
    header = b'{"inputs":[{"name":"X"}]}'
    body, size = http_body_with_id(header + b"\x00\x01", len(header), "ab-8")
    assert size is not None and json.loads(body[:size]) == {"id": "ab-8", "inputs": [{"name": "X"}]}
    assert body[size:] == b"\x00\x01"


def test_client_records_keep_steady_successes_and_travel_to_the_master() -> None:
    records = ClientTraceRecords(prefix="w1")
    number, request_id = records.next_id()
    records.add(number, 1, 2)  # before start: not kept
    records.start(0.0)
    now = time.monotonic_ns()
    records.add(number, now, now + 5_000_000)
    assert request_id == "w1-1" and list(records.timings()) == ["w1-1"]
    master = ClientTraceRecords()
    message = drain(records)
    assert message is not None and drain(records) is None
    merge_message(master, message)
    assert master.timings()["w1-1"].latency_ms == 5.0


def test_the_report_section_shows_the_verdict_and_the_parts() -> None:
    from inferload.results.report import tail_html

    typical = [request(10.0, queue=1.0, compute=5.0) for _ in range(97)]
    tail = tail_summary({"available": True, "requests": [*typical, *(request(100.0, queue=90.0) for _ in range(3))]}, 50.0, 10.0)
    section = tail_html(tail)
    assert "the p99 is queueing" in section and "<td>queue</td><td>90.00</td><td>90%</td>" in section
    assert section.count("data:image/png;base64,") == 1
    assert "Not available: no trace file" in tail_html({"available": False, "reason": "no trace file"})
    assert tail_html(None) == ""


def test_two_traced_targets_on_one_model_leave_its_settings_as_they_were(monkeypatch) -> None:
    from locust.env import Environment

    from inferload.run import trace_run
    from inferload.scenario.loader import scenario_from_dict

    server = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0", "trace_file": "/x"}

    class FakeClient:
        def get(self, model: str) -> dict:
            return dict(server)

        def update(self, model: str, settings: dict) -> dict:
            server.update(settings)
            return dict(server)

    inputs = [{"name": "X", "shape": [4], "dtype": "FP32"}]
    targets = [
        {"name": name, "kind": kind, "address": "127.0.0.1:8000", "model": "m", "inputs": inputs, "trace": {}}
        for name, kind in (("g", "triton-grpc"), ("h", "triton-http"))
    ]
    scenario = scenario_from_dict({"name": "u", "duration": "5s", "targets": targets, "shape": {"kind": "steady", "users": 1}})
    monkeypatch.setattr(trace_run.TraceRun, "_client", lambda self, target: FakeClient())
    run = trace_run.TraceRun(Environment(), scenario, {})
    run._on_test_start()
    assert server["trace_level"] == ["TIMESTAMPS"] and server["trace_rate"] == "100"
    run._on_test_stop()
    assert server["trace_level"] == ["OFF"] and server["trace_rate"] == "1000" and server["log_frequency"] == "0"
