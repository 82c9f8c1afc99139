"""The engine against the reference server, whose records say what it received.

A stop lets the engine's calls in flight end (servers left as found). Triton 2.51's gRPC
frontend crashed (SIGSEGV, triton-inference-server/server#8034) when a call was cancelled in flight:
CI saw it on a decoupled stream, cancelled by the end of a run. A stopped slot now records nothing
more, lets its call in flight end, half-closes its stream, then closes its connection; a call still
running 2 s after the stop is cancelled.

Truth is the reference server's records: each request it received is recorded served ("ok") or
"cancelled" (the client went away before the answer), with its batch size, so a fed arrival's
chosen request (a replay file's `sample`) shows as the batch of the request chosen.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from tests.support.engine_triton import grpc_request, http_request
from tests.support.reference_server import reference_server

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

SLOTS = 3


def _run_then_stop(address: str, stream: bool, running_s: float) -> None:
    """SLOTS closed loops, stopped after `running_s` with a call in flight on each, the engine closed."""
    engine = native.Engine()
    try:
        request = grpc_request("identity", "INPUT0", np.zeros((1, 16), np.float32))
        target = engine.add_target(
            "ref",
            "gRPC",
            "grpc",
            address,
            address,
            30.0,
            [],
            [request],
            {"answer": "none"},
            stream=stream,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
        slots = [engine.open_slot(target) for _ in range(SLOTS)]
        for slot in slots:
            engine.run_closed(slot)
        time.sleep(running_s)
        for slot in slots:
            engine.stop_slot(slot)
    finally:
        engine.close()


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_stopped_slot_lets_its_call_in_flight_end_served_not_cancelled(stream: bool) -> None:
    with reference_server(decoupled=stream, delay={"law": "fixed", "ms": 300}, concurrency=SLOTS) as server:
        # back-to-back 300 ms holds: at the stop each slot has a call in flight (however late the first began)
        _run_then_stop(server.grpc_address, stream, running_s=1.0)
        records = server.records()
    assert len(records) >= SLOTS and records.with_status("ok").all(), records.statuses


def test_a_call_still_running_after_the_drain_is_cancelled() -> None:
    with reference_server(delay={"law": "fixed", "ms": 6000}, concurrency=SLOTS) as server:
        _run_then_stop(server.grpc_address, False, running_s=0.3)
        deadline = time.monotonic() + 10
        while len(server.records()) < SLOTS and time.monotonic() < deadline:
            time.sleep(0.1)  # the server records a cancelled hold when it notices the client gone
        records = server.records()
    assert records.with_status("cancelled").sum() == SLOTS, records.statuses


def test_a_fed_arrival_sends_the_request_it_names_and_one_naming_none_the_next_of_the_rotation() -> None:
    with reference_server(delay={"law": "fixed", "ms": 1}, concurrency=4) as server:
        engine = native.Engine()
        try:
            address = server.grpc_address
            requests_ = [grpc_request("identity", "INPUT0", np.zeros((batch, 16), np.float32)) for batch in (1, 2, 3)]
            target = engine.add_target(
                "ref",
                "gRPC",
                "grpc",
                address,
                address,
                10.0,
                [],
                requests_,
                {"answer": "none"},
                open_loop_max_queue=16,
                max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
            )
            engine.run_open(engine.open_slot(target))  # one sender: the server receives them in order
            start = time.time() + 0.2
            chosen = [2, 0, None, 1, 2, None]
            engine.feed(target, [start + 0.05 * i for i in range(len(chosen))], chosen)
            deadline = time.monotonic() + 10
            while len(server.records()) < len(chosen) and time.monotonic() < deadline:
                time.sleep(0.05)
            records = server.records()
        finally:
            engine.close()
    batches = [int(b) for b in records.batch[np.argsort(records.received_ns)]]
    # the named ones exactly; those naming none from the target's cursor (requests 0 and 1 here)
    assert [batches[i] for i in (0, 1, 3, 4)] == [3, 1, 2, 3], batches
    assert batches[2] in (1, 2, 3) and batches[5] in (1, 2, 3), batches


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_traced_targets_calls_carry_ids_the_server_received_and_their_times_enclose_the_servers(protocol: str) -> None:
    """The trace join's ids on the engine: every call of a traced target's loops carries
    `<prefix>-<number>`, and each successful call's (number, sent, received) comes back in `drain()`;
    the server's records hold each id once, received after the client's send and answered before
    the client's receive (one clock, CLOCK_MONOTONIC)."""
    with reference_server(delay={"law": "fixed", "ms": 2}, concurrency=SLOTS) as server:
        engine = native.Engine()
        try:
            array = np.zeros((1, 16), np.float32)
            requests: list[Any]
            if protocol == "grpc":
                address, requests = server.grpc_address, [grpc_request("identity", "INPUT0", array)]
            else:
                address, requests = f"http://{server.http_address}", [http_request("identity", "INPUT0", "OUTPUT0", array)]
            target = engine.add_target(
                "ref", protocol, protocol, address, address, 30.0, [], requests, {"answer": "none"},
                max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES, trace="ab12",
            )  # fmt: skip
            slots = [engine.open_slot(target) for _ in range(SLOTS)]
            for slot in slots:
                engine.run_closed(slot)
            time.sleep(0.5)
            for slot in slots:
                engine.stop_slot(slot)
            traced = engine.drain()["traced"]
        finally:
            engine.close()
        records = server.records()
    assert len(traced) >= 50, len(traced)
    numbers = [number for _, number, _, _ in traced]
    assert len(set(numbers)) == len(numbers) and min(numbers) >= 1 and all(name == "ref" for name, *_ in traced)
    by_id = {request_id: i for i, request_id in enumerate(records.ids)}
    assert len(by_id) == len(records)  # every request the server saw had an id of its own
    for _, number, sent_ns, received_ns in traced:
        i = by_id[f"ab12-{number}"]
        assert sent_ns <= records.received_ns[i] and records.answered_ns[i] <= received_ns, (number, sent_ns, received_ns)
