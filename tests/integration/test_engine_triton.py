"""The native engine (`inferload._native.Engine`) against a real Triton of its own.

Truth comes from the server: Triton's own success count (its statistics API) for the requests a
closed loop recorded, the arrivals fed per window for an open loop, the answer bytes Triton sent
back, the Python path's own failure messages for a refused port, a timeout and a wrong CA. No
figure of time is asserted beyond what a rule fixes (a timeout is not answered before it runs out).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL
from hdrh.histogram import HdrHistogram
from tritonclient.grpc import service_pb2

from inferload.measure.run_record import RunRecord
from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from inferload.scenario.tls import TlsSettings
from inferload.users.failures import classify_exception
from inferload.users.tls import http_tls_options
from inferload.users.triton import grpc_id_field
from tests.support.engine_triton import (
    EngineTriton,
    engine_triton,
    grpc_request,
    http_request,
    identity_input,
    slow_input,
    wait_for_calls,
)
from tests.support.ports import free_port
from tests.support.tls_certs import Certificates, make_certificates
from tests.support.tls_proxy import TlsTerminatingProxy
from tests.support.waiting import wait_until

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

GRPC_CHECK = {"answer": "grpc_shapes", "shapes": {"OUTPUT__0": [-1, 16]}}
HTTP_CHECK = {
    "status": "200",
    "detail": {"json_keys": ["error"], "chars": 160},
    "answer": "triton_http",
    "shapes": {"OUTPUT__0": [1, 16]},
}
OUTPUT_BYTES = 64  # identity's [1, 16] FP32 answer


@pytest.fixture(scope="module")
def triton(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineTriton]:
    with engine_triton(tmp_path_factory.mktemp("engine-triton")) as server:
        yield server


@pytest.fixture
def engine() -> Iterator[Any]:
    created = native.Engine(threads=1, window_s=1.0)
    yield created
    created.close()


def add_identity(engine: Any, protocol: str, address: str, *, values: tuple[float, ...] = (0.0,), **options: Any) -> int:
    """The ``identity`` target as its user class would register it (one request per value)."""
    arrays = [identity_input(v) for v in values]
    if protocol == "grpc":
        requests_: list[Any] = [grpc_request("identity", "INPUT__0", a) for a in arrays]
        return engine.add_target(
            f"identity-{protocol}",
            "gRPC",
            "grpc",
            address,
            address,
            10.0,
            [],
            requests_,
            GRPC_CHECK,
            **options,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    requests_ = [http_request("identity", "INPUT__0", "OUTPUT__0", a) for a in arrays]
    url = address if "://" in address else f"http://{address}"
    return engine.add_target(
        f"identity-{protocol}",
        "HTTP",
        "http",
        url,
        address,
        10.0,
        [],
        requests_,
        HTTP_CHECK,
        **options,
        max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
    )


def address_of(triton: EngineTriton, protocol: str) -> str:
    return triton.grpc if protocol == "grpc" else triton.http


def settled_count(triton: EngineTriton, model: str) -> int:
    """Triton's success count once it stops moving (calls abandoned at a stop finish first)."""
    last: list[int] = []

    def still() -> tuple[int] | None:  # a tuple: a count of 0 is a settled count too
        last.append(triton.success_count(model))
        return (last[-1],) if len(last) > 1 and last[-1] == last[-2] else None

    return wait_until(still, 30, f"{model}'s success count to settle", interval_s=0.3)[0]


def windows_total(wire: dict[str, Any], key: str) -> int:
    return sum(stats[key] for _, _, stats in wire["record"]["windows"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_closed_loop_slots_record_every_request_triton_served(engine: Any, triton: EngineTriton, protocol: str) -> None:
    target = add_identity(engine, protocol, address_of(triton, protocol))
    engine.set_request_rows(True)
    before = settled_count(triton, "identity")
    slots = [engine.open_slot(target) for _ in range(4)]
    for slot in slots:
        engine.run_closed(slot)
    wire_parts = []
    for _ in range(12):  # drained as the Python side drains: every ~250 ms
        time.sleep(0.25)
        wire_parts.append(engine.drain())
    for slot in slots:
        engine.stop_slot(slot)
    wire_parts.append(engine.drain())
    served = settled_count(triton, "identity") - before

    record = RunRecord(window_s=1.0, warmup_s=0.0)
    recorded = failures = 0
    locust_requests = locust_bytes = rows = 0
    for wire in wire_parts:
        record.merge_wire(wire["record"])
        recorded += windows_total(wire, "s")
        failures += windows_total(wire, "f")
        for _, _, stats in wire["record"]["windows"]:
            if stats["s"]:
                assert HdrHistogram.decode(stats["h"]).get_total_count() == stats["s"]
        for entry in wire["locust"]:
            assert (entry["name"], entry["method"]) == (f"identity-{protocol}", "gRPC" if protocol == "grpc" else "HTTP")
            assert entry["num_failures"] == 0 and entry["errors"] == []
            assert sum(entry["response_times"].values()) == sum(entry["num_reqs_per_sec"].values()) == entry["num_requests"]
            locust_requests += entry["num_requests"]
            locust_bytes += entry["total_content_length"]
        rows += len(wire["rows"])
    assert failures == 0
    assert recorded > 50
    # a call in flight at stop_slot is abandoned (never recorded) but Triton may still answer it
    assert recorded <= served <= recorded + len(slots)
    assert locust_requests == rows == recorded
    assert locust_bytes == recorded * OUTPUT_BYTES
    steady = record.steady[f"identity-{protocol}"]
    assert steady.successes == recorded
    figures = steady.latency_ms()
    p50, p99, highest = figures["p50"], figures["p99"], figures["max"]
    assert p50 is not None and p99 is not None and highest is not None
    assert steady.min_ms <= p50 <= p99 <= highest


def test_completions_before_the_warmup_end_go_to_the_warmup_totals(engine: Any, triton: EngineTriton) -> None:
    target = add_identity(engine, "grpc", triton.grpc)
    ends = time.time() + 0.6
    engine.set_warmup_end(ends)
    slot = engine.open_slot(target)
    engine.run_closed(slot)
    wait_until(lambda: time.time() > ends + 0.6, 5, "the warm-up's end to pass")
    engine.stop_slot(slot)
    wire = engine.drain()["record"]
    warm, steady = wire["warmup"]["identity-grpc"], wire["steady"]["identity-grpc"]
    assert warm["s"] > 0 and steady["s"] > 0
    assert warm["s"] + steady["s"] == sum(stats["s"] for _, _, stats in wire["windows"])
    assert warm["max"] <= steady["max"] or warm["s"] > 0  # both phases hold real histograms
    assert HdrHistogram.decode(warm["h"]).get_total_count() == warm["s"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_refused_address_fails_as_the_python_path_says_and_backs_off(engine: Any, protocol: str) -> None:
    address = f"127.0.0.1:{free_port()}"
    target = add_identity(engine, protocol, address)
    slot = engine.open_slot(target)
    engine.run_closed(slot)
    time.sleep(1.5)
    engine.stop_slot(slot)
    wire = engine.drain()
    python = classify_exception(ConnectionRefusedError(111, "Connection refused"), address)
    (entry,) = wire["locust"]
    attempts = entry["num_requests"]
    assert entry["num_failures"] == attempts == windows_total(wire, "f")
    assert entry["errors"] == [[type(python).__name__, str(python), attempts]]
    assert sum(count for _, _, count, _, _ in wire["record"]["refused_windows"]) == attempts
    # RefusedBackoff: 10 ms, doubling to 1 s: the 9th attempt starts 2.27 s after the first
    assert 2 <= attempts <= 8

    ticket = engine.call(engine.open_slot(target), 0)
    (done,) = wait_for_calls(engine, 1)
    assert done[0] == ticket
    assert done[1] == (type(python).__name__, str(python)) and done[2] is True


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_call_longer_than_the_timeout_is_a_request_timeout_and_the_slot_recovers(
    engine: Any, triton: EngineTriton, protocol: str
) -> None:
    address = address_of(triton, protocol)
    timeout_s = 0.1  # tail_slow's slow path takes 200 ms
    arrays = [slow_input(), np.zeros((1, 4), np.float32)]
    if protocol == "grpc":
        requests_: list[Any] = [grpc_request("tail_slow", "INPUT0", a) for a in arrays]
        target = engine.add_target(
            "slow",
            "gRPC",
            "grpc",
            address,
            address,
            timeout_s,
            [],
            requests_,
            {"answer": "grpc_shapes"},
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    else:
        requests_ = [http_request("tail_slow", "INPUT0", "OUTPUT0", a) for a in arrays]
        target = engine.add_target(
            "slow",
            "HTTP",
            "http",
            f"http://{address}",
            address,
            timeout_s,
            [],
            requests_,
            {"answer": "triton_http"},
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    slot = engine.open_slot(target)
    served = settled_count(triton, "tail_slow")
    called_ns = time.monotonic_ns()
    engine.call(slot, 0)
    (slow,) = wait_for_calls(engine, 1)
    python = classify_exception(TimeoutError("timed out"), address)
    assert slow[1] == (type(python).__name__, str(python))
    assert slow[2] is False
    # the timeout runs from the call, the slot's first connect included; the latency runs from
    # the write, so it is the timeout less the connect: the failure comes no sooner than the timeout
    assert slow[5] - called_ns >= timeout_s * 1e9
    # the model (one instance) is still busy with the slow one: once Triton has answered it,
    # a fast one on the same slot (a new connection) is answered
    wait_until(lambda: triton.success_count("tail_slow") > served, 10, "Triton to finish the slow request")
    engine.call(slot, 1)
    (fast,) = wait_for_calls(engine, 1)
    assert fast[1] is None and fast[6] == 16


def test_per_call_grpc_returns_answers_that_decode_and_merges_appended_fields(engine: Any, triton: EngineTriton) -> None:
    target = add_identity(engine, "grpc", triton.grpc, values=(0.0, 3.0))
    slot = engine.open_slot(target)
    before = time.monotonic_ns()
    ticket = engine.call(slot, 1, append=grpc_id_field("engine-7"), want_answer=True)
    (done,) = wait_for_calls(engine, 1)
    after = time.monotonic_ns()
    number, error, refused, latency_ms, sent_ns, received_ns, length, answer, status, generation = done
    assert (number, error, refused, length, status, generation) == (ticket, None, False, OUTPUT_BYTES, 0, None)
    assert before <= sent_ns <= received_ns <= after
    assert latency_ms == pytest.approx((received_ns - sent_ns) / 1e6)
    response = service_pb2.ModelInferResponse.FromString(answer)
    assert response.id == "engine-7"  # Triton echoes the appended id: the protobuf merge went out
    assert list(response.outputs[0].shape) == [1, 16]
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [3.0] * 16


def test_per_call_http_returns_the_answer_and_its_headers_and_takes_another_body(engine: Any, triton: EngineTriton) -> None:
    target = add_identity(engine, "http", triton.http)
    slot = engine.open_slot(target)
    _, other_body, other_headers = http_request("identity", "INPUT__0", "OUTPUT__0", identity_input(5.0))
    engine.call(slot, 0, body=other_body, headers=other_headers, want_answer=True)
    (done,) = wait_for_calls(engine, 1)
    assert done[1] is None and done[6] == OUTPUT_BYTES and done[8] == 200
    answer = done[7]
    _, header_length = json.JSONDecoder().raw_decode(answer.decode("latin-1"))  # the JSON header, then the tensors
    result = httpclient.InferResult.from_response_body(answer, header_length=header_length)
    assert result.as_numpy("OUTPUT__0").tolist() == [[5.0] * 16]


def feed_in_steps(engine: Any, target: int, intended: list[float], ahead_s: float = 0.5) -> None:
    """Feeds the arrivals as the Python side does: the next half second's, ahead of time."""
    position = 0
    while position < len(intended):
        horizon = time.time() + ahead_s
        end = position
        while end < len(intended) and intended[end] < horizon:
            end += 1
        if end > position:
            engine.feed(target, np.array(intended[position:end], dtype=np.float64).tobytes())
            position = end
        time.sleep(0.1)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_open_loop_counts_every_fed_arrival_in_its_window_and_keeps_the_send_lag(
    engine: Any, triton: EngineTriton, protocol: str
) -> None:
    target = add_identity(engine, protocol, address_of(triton, protocol), open_loop_max_queue=1000)
    senders = [engine.open_slot(target) for _ in range(8)]
    for slot in senders:
        engine.run_open(slot)
    start = time.time() + 0.3
    intended = [start + i / 200.0 for i in range(600)]  # 200 req/s for 3 s
    feed_in_steps(engine, target, intended)
    record = RunRecord(window_s=1.0, warmup_s=0.0)
    totals: Counter[str] = Counter()

    def drained_all() -> bool:
        wire = engine.drain()
        record.merge_wire(wire["record"])
        totals["requests"] += sum(entry["num_requests"] for entry in wire["locust"])
        return totals["requests"] >= len(intended)

    wait_until(drained_all, 30, "every arrival to be sent and answered", interval_s=0.25)
    engine.end_arrivals(target)
    for slot in senders:
        engine.stop_slot(slot)
    record.merge_wire(engine.drain()["record"])

    name = f"identity-{protocol}"
    fed = Counter(int(t // 1.0) for t in intended)
    counted = {index: counts for (index, t), counts in record.arrival_windows.items() if t == name}
    assert {index: counts[0] for index, counts in counted.items()} == dict(fed)
    assert sum(counts[1] for counts in counted.values()) == 0  # none unsent
    assert totals["requests"] == len(intended)
    assert record.arrivals_steady[name] == [len(intended), 0]
    lag = record.lag_steady[name]
    assert lag.successes == len(intended)
    assert lag.latency_ms()["p99"] is not None and lag.min_ms >= 0.0
    assert record.steady[name].successes == len(intended) and record.steady[name].failures == 0


def test_arrivals_waiting_at_the_stop_count_as_unsent_and_those_not_due_are_dropped(engine: Any, triton: EngineTriton) -> None:
    target = add_identity(engine, "grpc", triton.grpc, open_loop_max_queue=5)
    # no sender at all: the first 5 arrivals that come due wait, the other 3 are unsent at once
    now = time.time()
    due = [now + 0.05 + i * 0.001 for i in range(8)]
    later = [now + 60.0 + i for i in range(3)]
    engine.feed(target, due + later)
    record = RunRecord(window_s=1.0, warmup_s=0.0)

    def arrived() -> int:
        record.merge_wire(engine.drain()["record"])
        return sum(counts[0] for counts in record.arrival_windows.values())

    wait_until(lambda: arrived() >= 8, 5, "the 8 due arrivals")
    assert sum(counts[1] for counts in record.arrival_windows.values()) == 3
    engine.end_arrivals(target)  # the 5 waiting are unsent now; the 3 not due are dropped uncounted
    record.merge_wire(engine.drain()["record"])
    assert record.arrivals_steady["identity-grpc"] == [8, 8]


# -- TLS: Triton behind the TLS-terminating proxy of the tests (HTTP and gRPC alike) -------------


@pytest.fixture(scope="module")
def tls_triton(triton: EngineTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Certificates, dict[str, int]]]:
    certs = make_certificates(tmp_path_factory.mktemp("engine-certs"))
    http_port = int(triton.http.rsplit(":", 1)[1])
    grpc_port = int(triton.grpc.rsplit(":", 1)[1])
    with (
        TlsTerminatingProxy(("127.0.0.1", http_port), certs.server_cert, certs.server_key) as http_proxy,
        TlsTerminatingProxy(("127.0.0.1", grpc_port), certs.server_cert, certs.server_key) as grpc_proxy,
        TlsTerminatingProxy(("127.0.0.1", grpc_port), certs.server_cert, certs.server_key, client_ca=certs.ca) as mutual_proxy,
    ):
        yield certs, {"http": http_proxy.port, "grpc": grpc_proxy.port, "mutual": mutual_proxy.port}


def pem(path: Path) -> bytes:
    return path.read_bytes()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_tls_with_the_targets_ca_answers(engine: Any, tls_triton: tuple[Certificates, dict[str, int]], protocol: str) -> None:
    certs, ports = tls_triton
    address = f"127.0.0.1:{ports[protocol]}"
    target = add_identity(
        engine, protocol, address if protocol == "grpc" else f"https://{address}", tls={"ca_pem": pem(certs.ca)}
    )
    slot = engine.open_slot(target)
    for _ in range(3):
        engine.call(slot, 0)
        (done,) = wait_for_calls(engine, 1)
        assert done[1] is None and done[6] == OUTPUT_BYTES


def test_mutual_tls_with_a_client_certificate_answers_and_without_one_is_refused(
    engine: Any, tls_triton: tuple[Certificates, dict[str, int]]
) -> None:
    certs, ports = tls_triton
    address = f"127.0.0.1:{ports['mutual']}"
    mutual = {"ca_pem": pem(certs.ca), "cert_pem": pem(certs.client_cert), "key_pem": pem(certs.client_key)}
    with_cert = add_identity(engine, "grpc", address, tls=mutual)
    engine.call(engine.open_slot(with_cert), 0)
    (done,) = wait_for_calls(engine, 1)
    assert done[1] is None
    without = engine.add_target(
        "no-cert", "gRPC", "grpc", address, address, 10.0, [], [grpc_request("identity", "INPUT__0", identity_input())],
        GRPC_CHECK, tls={"ca_pem": pem(certs.ca)}, max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES
    )  # fmt: skip
    engine.call(engine.open_slot(without), 0)
    (refused,) = wait_for_calls(engine, 1)
    assert refused[1] == ("ConnectionRefused", f"refused: cannot connect to {address}")


def test_a_wrong_ca_fails_as_the_python_path_names_it(
    engine: Any, tls_triton: tuple[Certificates, dict[str, int]], tmp_path: Path
) -> None:
    certs, ports = tls_triton
    url = f"https://127.0.0.1:{ports['http']}"
    client = HTTPClient.from_url(URL(url), **http_tls_options(TlsSettings(ca_file=str(certs.other_ca)), tmp_path, "t"))
    with pytest.raises(OSError) as raised:
        client.post("/v2/models/identity/infer", body=b"{}", headers={})
    python = classify_exception(raised.value, url)
    target = add_identity(engine, "http", url, tls={"ca_pem": pem(certs.other_ca)})
    engine.call(engine.open_slot(target), 0)
    (done,) = wait_for_calls(engine, 1)
    assert done[1] == (type(python).__name__, str(python))  # connection error to https://...: SSLCertVerificationError
