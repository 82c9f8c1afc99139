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

import ast
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from tests.support.engine_triton import grpc_request, http_request
from tests.support.example_triton import ExampleTriton, example_triton
from tests.support.waiting import wait_until

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

LENGTH, CONCURRENT, SLOTS = 4, 2, 2
FINAL_LINE = "Final sequences stored: "


@pytest.fixture(scope="module")
def sequence_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleTriton]:
    work = tmp_path_factory.mktemp("engine-sequences")
    with example_triton(work, {"seq_grpc": "sequence_py", "seq_http": "sequence_py"}) as server:
        yield server


def answers_kept(server: ExampleTriton, model: str) -> dict[int, list[int]]:
    """Unload ``model`` and read the answers it kept per correlation ID (its finalize line)."""
    seen = server.log.read_text().count(FINAL_LINE)
    server.unload(model)

    def final_lines() -> list[str] | None:
        lines = [line for line in server.log.read_text().splitlines() if FINAL_LINE in line]
        return lines if len(lines) > seen else None

    lines = wait_until(final_lines, 30, f"{model}'s finalize line")
    return dict(ast.literal_eval(lines[seen].split(FINAL_LINE, 1)[1]))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_native_sequences_keep_the_models_state(sequence_triton: ExampleTriton, protocol: str) -> None:
    engine = native.Engine()
    model = f"seq_{protocol}"
    array = np.ones((1, 1), dtype=np.int32)
    sequence: dict[str, Any] = {"length": LENGTH, "concurrent": CONCURRENT, "string_ids": False}
    if protocol == "grpc":
        address = sequence_triton.grpc
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
        address = sequence_triton.http
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
    answers = answers_kept(sequence_triton, model)
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
