"""Decoupled models on the engine's `ModelStreamInfer` stream (`add_target(..., stream=True)`),
against a real Triton serving the vendored ``stream_sync`` test model: a request holding n is
answered by n responses (OUT = IN), then the final flag alone.

Truth is the model's own rule: every request gets exactly n responses with outputs, so the stream
figures are known counts (requests, n per request, n - 1 gaps each), the response length is n × 4
bytes, and the time to the first response lies within the complete request's latency.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from inferload.measure.run_record import RunRecord
from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from tests.support.engine_triton import grpc_request, wait_for_calls
from tests.support.example_triton import ExampleTriton

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

RESPONSES = 3


@pytest.fixture
def engine() -> Iterator[Any]:
    created = native.Engine()
    yield created
    created.close()


def add_stream(engine: Any, address: str, values: tuple[int, ...], check: dict[str, Any] | None = None) -> int:
    requests_ = [grpc_request("stream_sync", "IN", np.array([v], np.int32), "INT32") for v in values]
    return int(
        engine.add_target(
            "stream",
            "gRPC",
            "grpc",
            address,
            address,
            10.0,
            [],
            requests_,
            check or {"answer": "none"},
            stream=True,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    )


def test_closed_loop_streams_record_exact_stream_figures(engine: Any, example_models_triton: ExampleTriton) -> None:
    target = add_stream(engine, example_models_triton.grpc, (RESPONSES,))
    slots = [engine.open_slot(target) for _ in range(2)]
    for slot in slots:
        engine.run_closed(slot)
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    requests = content = 0
    for _ in range(8):
        time.sleep(0.25)
        wire = engine.drain()
        record.merge_wire(wire["record"])
        for entry in wire["locust"]:
            assert entry["num_failures"] == 0, entry["errors"]
            requests += entry["num_requests"]
            content += entry["total_content_length"]
    for slot in slots:
        engine.stop_slot(slot)
    wire = engine.drain()
    record.merge_wire(wire["record"])
    requests += sum(entry["num_requests"] for entry in wire["locust"])
    content += sum(entry["total_content_length"] for entry in wire["locust"])

    assert requests > 20
    assert content == requests * RESPONSES * 4  # n responses of one INT32 each
    totals = record.streams.steady["stream"]
    assert totals.counts.requests == requests
    assert totals.counts.responses == RESPONSES * requests and totals.counts.max_responses == RESPONSES
    assert totals.first_response.successes == requests
    assert totals.inter_response.successes == (RESPONSES - 1) * requests
    latency = record.steady["stream"]
    first = totals.first_response.latency_ms()
    assert first["max"] is not None and first["max"] <= latency.max_ms  # the first response is within the request
    windows = {key: counts for key, counts in record.streams.count_windows.items() if key[1] == "stream"}
    assert sum(counts.requests for counts in windows.values()) == requests


def test_a_per_call_stream_request_gives_its_timing_and_checks_every_response(
    engine: Any, example_models_triton: ExampleTriton
) -> None:
    target = add_stream(engine, example_models_triton.grpc, (RESPONSES, 0), {"answer": "grpc_shapes", "shapes": {"OUT": [1]}})
    slot = engine.open_slot(target)
    ticket = engine.call(slot, 0, want_answer=True)
    (done,) = wait_for_calls(engine, 1)
    assert done[0] == ticket and done[1] is None and done[6] == RESPONSES * 4
    responses, first_ms, gaps_ms = engine.stream_timing(ticket)
    assert responses == RESPONSES and len(gaps_ms) == RESPONSES - 1
    assert 0 <= first_ms <= done[3]  # the first response came within the complete request
    assert engine.stream_timing(ticket) is None  # taken once

    ticket = engine.call(slot, 1)  # 0 responses with outputs: only the final flag
    (done,) = wait_for_calls(engine, 1)
    assert done[1] is None and done[6] == 0
    assert engine.stream_timing(ticket) == (0, None, [])

    strict = add_stream(engine, example_models_triton.grpc, (RESPONSES,), {"answer": "grpc_shapes", "shapes": {"OUT": [2]}})
    strict_slot = engine.open_slot(strict)
    for _ in range(2):  # every response is read up to the final one: the stream serves the next request too
        engine.call(strict_slot, 0)
        (failed,) = wait_for_calls(engine, 1)
        assert failed[1] == ("BadOutputShape", "bad output shape: 'OUT' expected [2]; got [1]")
