"""Triton sequence models driven natively by the engine (`add_target(..., sequence=...)`), against a
real Triton serving the vendored ``sequence_py`` model (tests/examples/triton/sequence_py).

The model keeps a list per correlation ID: a START opens it with the answer 1, every later request
of the ID appends the next number, and it refuses a START for an ID it knows or a request without
START for one it does not. On unload it prints every list it kept: the truth this test reads. Two
closed-loop slots per protocol, sequences of 4 with 2 open per slot: no failure, each sequence's
answers are 1, 2, ... up to 4, only the sequences open at the stop are shorter, and the answers add
up to the requests the engine recorded (plus at most one abandoned call per slot).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from tests.support.engine_triton import grpc_request, http_request
from tests.support.example_triton import ExampleTriton

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

LENGTH, CONCURRENT, SLOTS = 4, 2, 2


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_native_sequences_keep_the_models_state(example_models_triton: ExampleTriton, protocol: str) -> None:
    engine = native.Engine()
    model = f"engine_seq_{protocol}"  # the shared Triton's pair for this module (test_triton_sequences.py unloads seq_*)
    array = np.ones((1, 1), dtype=np.int32)
    sequence: dict[str, Any] = {"length": LENGTH, "concurrent": CONCURRENT, "string_ids": False}
    if protocol == "grpc":
        address = example_models_triton.grpc
        requests_: list[Any] = [grpc_request(model, "INPUT0", array, "INT32")]
        target = engine.add_target(
            "seq",
            "gRPC",
            "grpc",
            address,
            address,
            10.0,
            [],
            requests_,
            {"answer": "none"},
            sequence=sequence,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    else:
        address = example_models_triton.http
        requests_ = [http_request(model, "INPUT0", "OUTPUT0", array, "INT32")]
        target = engine.add_target(
            "seq",
            "HTTP",
            "http",
            f"http://{address}",
            address,
            10.0,
            [],
            requests_,
            {"answer": "triton_http"},
            sequence=sequence,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    slots = [engine.open_slot(target) for _ in range(SLOTS)]
    for slot in slots:
        engine.run_closed(slot)
    recorded = failures = 0
    for _ in range(8):
        time.sleep(0.25)
        for entry in engine.drain()["locust"]:
            recorded += entry["num_requests"]
            failures += entry["num_failures"]
    for slot in slots:
        engine.stop_slot(slot)
    for entry in engine.drain()["locust"]:
        recorded += entry["num_requests"]
        failures += entry["num_failures"]
    engine.close()

    assert failures == 0
    answers = example_models_triton.sequences_kept(model)
    for correlation_id, kept in answers.items():
        assert 0 < correlation_id < 2**63
        assert kept == list(range(1, len(kept) + 1)), f"sequence {correlation_id}: {kept}"
        assert len(kept) <= LENGTH, f"sequence {correlation_id} went past its END: {kept}"
    complete = [kept for kept in answers.values() if len(kept) == LENGTH]
    partial = [kept for kept in answers.values() if len(kept) < LENGTH]
    assert len(complete) >= 4
    assert len(partial) <= SLOTS * CONCURRENT  # only those open at the stop
    answered = sum(len(kept) for kept in answers.values())
    assert recorded <= answered <= recorded + SLOTS  # a call in flight at the stop reached the model, unrecorded
