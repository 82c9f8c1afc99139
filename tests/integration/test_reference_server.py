"""The reference server (native/src/refserver) as its users see it: a child process on loopback,
driven by tritonclient (gRPC and HTTP), plain HTTP and inferload's own CLI, its truth read back
from its records. Each test starts its own server (about 0.3 s). Times are only compared with
the server's own scripted values, by construction (a hold is never shorter than scripted) or
within generous intervals.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from inferload.local.reference_server import ReferenceConfig
from tests.support.cli import inferload
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import write_scenario
from tests.support.tls_certs import make_certificates

MS = 1_000_000
TWO_OUTPUTS: dict[str, Any] = {
    "max_batch_size": 8,
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "dims": [16]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "dims": [16]}, {"name": "OUTPUT1", "datatype": "INT64", "dims": [2, 3]}],
}


def plain_python(code: str, *args: str, timeout_s: float = 120) -> Any:
    """Run ``code`` in a Python child without gevent (``sys.argv[1:]`` = ``args``); the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def grpc_input(batch: int) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((batch, 16), np.float32))
    return tensor


def http_input(batch: int, binary: bool = True) -> triton_http.InferInput:
    tensor = triton_http.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((batch, 16), np.float32), binary_data=binary)
    return tensor


def test_python_and_the_server_share_their_defaults() -> None:
    from inferload._native import reference_config

    assert json.loads(reference_config("{}")) == json.loads(ReferenceConfig().to_json())


def test_tritonclient_gets_answers_of_the_right_shapes_over_grpc_and_http() -> None:
    with reference_server(**TWO_OUTPUTS) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        try:
            assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("identity")
            answer = client.infer("identity", [grpc_input(3)], request_id="g-1")
            assert answer.get_response().id == "g-1"
            assert answer.as_numpy("OUTPUT0").shape == (3, 16) and answer.as_numpy("OUTPUT0").dtype == np.float32
            assert answer.as_numpy("OUTPUT1").shape == (3, 2, 3) and answer.as_numpy("OUTPUT1").dtype == np.int64
            only = client.infer("identity", [grpc_input(1)], outputs=[triton_grpc.InferRequestedOutput("OUTPUT1")])
            assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
            with pytest.raises(InferenceServerException, match="unknown model: 'nope'") as refused:
                client.infer("nope", [grpc_input(1)])
            assert refused.value.status() == "StatusCode.NOT_FOUND"
            with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
                client.infer("identity", [grpc_input(9)])
        finally:
            client.close()

        http = triton_http.InferenceServerClient(server.http_address)
        try:
            assert http.is_server_live() and http.is_model_ready("identity")
            binary = http.infer("identity", [http_input(2)], request_id="h-1")  # no outputs named: all binary
            assert binary.get_response()["id"] == "h-1"
            assert binary.as_numpy("OUTPUT0").shape == (2, 16) and binary.as_numpy("OUTPUT1").shape == (2, 2, 3)
            outputs = [
                triton_http.InferRequestedOutput("OUTPUT0", binary_data=False),
                triton_http.InferRequestedOutput("OUTPUT1", binary_data=True),
            ]
            mixed = http.infer("identity", [http_input(4, binary=False)], outputs=outputs)
            assert mixed.as_numpy("OUTPUT0").shape == (4, 16) and mixed.as_numpy("OUTPUT1").shape == (4, 2, 3)
            assert mixed.get_output("OUTPUT0")["data"] == [0] * 64
            assert mixed.get_output("OUTPUT1")["parameters"]["binary_data_size"] == 4 * 6 * 8
            with pytest.raises(InferenceServerException, match="unknown model"):
                http.infer("nope", [http_input(1)])
        finally:
            http.close()

        rest = requests.post(f"{server.http_url}/predictions/identity", data=b"any body", timeout=10)
        assert rest.status_code == 200 and len(rest.json()) == 1
        assert requests.get(f"{server.http_url}/ping", timeout=10).json() == {"status": "Healthy"}
        v1 = requests.post(f"{server.http_url}/v1/models/identity:predict", json={"instances": [[1], [2], [3]]}, timeout=10)
        assert len(v1.json()["predictions"]) == 3

        records = server.records()
        # the six inference requests served (the three refused are counted, not recorded)
        assert sorted(records.protocols[p] for p in records.protocol) == ["grpc", "grpc", "http", "http", "rest", "v1"]
        assert set(records.ids) >= {"g-1", "h-1"}
        assert records.batch[list(records.ids).index("g-1")] == 3
        assert server.stats()["rejected"] == 3


STREAM_CLIENT = """
import json, queue, sys
import numpy as np
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException

client = g.InferenceServerClient(sys.argv[1])
tensor = g.InferInput("INPUT0", [2, 16], "FP32")
tensor.set_data_from_numpy(np.ones((2, 16), np.float32))
try:
    client.infer("identity", [tensor])
    unary = "answered"
except InferenceServerException as error:
    unary = error.message()
answers = queue.Queue()
client.start_stream(callback=lambda result, error: answers.put((result, error)))
client.async_stream_infer("identity", [tensor], request_id="plain")
client.async_stream_infer("identity", [tensor], request_id="with-empty-final", enable_empty_final_response=True)
seen, finals = [], 0
while finals < 2:
    result, error = answers.get(timeout=30)
    if error is not None:
        seen.append({"error": str(error)})
        break
    response = result.get_response()
    final = response.parameters["triton_final_response"].bool_param
    finals += final
    seen.append({"id": response.id, "final": final, "shapes": [list(o.shape) for o in response.outputs]})
client.stop_stream()
client.close()
print(json.dumps({"unary": unary, "responses": seen}))
"""


def test_the_stream_answers_each_request_with_its_responses_the_last_one_final() -> None:
    with reference_server(decoupled=True, stream_responses=3, delay={"law": "fixed", "ms": 2}) as server:
        seen = plain_python(STREAM_CLIENT, server.grpc_address)
        records = server.records()
    assert "decoupled" in seen["unary"]  # a decoupled model answers over the stream only
    responses = seen["responses"]
    plain = [r for r in responses if r.get("id") == "plain"]
    assert [r["final"] for r in plain] == [False, False, True], responses
    assert all(r["shapes"] == [[2, 16]] for r in plain)
    empty_final = [r for r in responses if r.get("id") == "with-empty-final"]
    assert [r["final"] for r in empty_final] == [False, False, False, True], responses
    assert empty_final[-1]["shapes"] == []  # the final flag alone, as Triton sends it when asked to

    assert len(records) == 2 and set(records.ids) == {"plain", "with-empty-final"}
    assert (records.hold_ns == 3 * 2 * MS).all()  # three responses, each after the request's 2 ms
    assert (records.service_ns >= records.hold_ns).all()


def test_with_a_certificate_both_ports_speak_tls(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    tls = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}
    with reference_server(tls=tls, ca_file=certs.ca) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address, ssl=True, root_certificates=str(certs.ca))
        try:
            assert client.infer("identity", [grpc_input(2)]).as_numpy("OUTPUT0").shape == (2, 16)
        finally:
            client.close()
        assert server.http_url.startswith("https://")
        body: dict[str, Any] = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]}
        answer = requests.post(f"{server.http_url}/v2/models/identity/infer", json=body, verify=str(certs.ca), timeout=10)
        assert answer.status_code == 200 and answer.json()["outputs"][0]["shape"] == [1, 16]
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{server.http_url}/v2/health/ready", verify=str(certs.other_ca), timeout=10)
        assert len(server.records()) == 2  # the records over HTTPS too


def test_a_fixed_delay_shows_in_the_records_hold() -> None:
    with reference_server(delay={"law": "fixed", "ms": 10}) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        http = triton_http.InferenceServerClient(server.http_address)
        try:
            for _ in range(15):
                client.infer("identity", [grpc_input(1)])
                http.infer("identity", [http_input(1)])
        finally:
            client.close()
            http.close()
        records = server.records()
    assert len(records) == 30 and (records.hold_ns == 10 * MS).all()
    service = records.service_ns
    assert (service >= 10 * MS).all(), service.min()  # never shorter than scripted: the hold waits for its deadline
    assert 10 * MS <= np.median(service) < 15 * MS, np.median(service)  # late by < 5 ms even on a busy machine
    assert (records.answered_ns >= records.end_ns).all() and (records.start_ns >= records.received_ns).all()


CLOSED_LOOP = """
import json, sys, threading
import numpy as np
import tritonclient.grpc as g

address, callers, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
failures = []

def closed_loop():
    client = g.InferenceServerClient(address)
    tensor = g.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    try:
        for _ in range(calls):
            client.infer("identity", [tensor])
    except Exception as error:
        failures.append(str(error))
    finally:
        client.close()

threads = [threading.Thread(target=closed_loop) for _ in range(callers)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"failures": failures}))
"""


def test_n_slots_never_serve_more_than_n_at_once() -> None:
    slots, service_ms, callers, calls = 2, 20, 8, 6
    with reference_server(concurrency=slots, delay={"law": "fixed", "ms": service_ms}) as server:
        done = plain_python(CLOSED_LOOP, server.grpc_address, str(callers), str(calls))
        records = server.records()
        stats = server.stats()
    assert done["failures"] == []
    assert len(records) == callers * calls
    assert records.most_in_service() == slots  # never more; and with 8 callers the queue formed (below)
    assert (records.queue_ns > service_ms * MS // 2).any()
    assert stats["most_in_service"] == slots
    # the capacity is N/S: no span of the run served more than that allows
    span_ns = int(records.end_ns.max() - records.start_ns.min())
    assert len(records) <= slots * (span_ns / (service_ms * MS)) + slots


def test_a_scripted_failure_share_arrives_as_the_grpc_code_and_http_status() -> None:
    failures = {"share": 0.4, "grpc_code": "UNAVAILABLE", "http_status": 503, "message": "scripted overload"}
    with reference_server(failures=failures, seed=3) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        failed_calls: list[int] = []
        try:
            for call in range(30):
                try:
                    client.infer("identity", [grpc_input(1)])
                except InferenceServerException as error:
                    assert error.status() == "StatusCode.UNAVAILABLE" and "scripted overload" in error.message()
                    failed_calls.append(call)
        finally:
            client.close()
        statuses = []
        for _ in range(30):
            answer = requests.post(f"{server.http_url}/v2/models/identity/infer", json={"inputs": []}, timeout=10)
            statuses.append(answer.status_code)
            if answer.status_code != 200:
                assert answer.json() == {"error": "scripted overload"}
        records = server.records()
    assert 0 < len(failed_calls) < 30 and set(statuses) == {200, 503}
    failed = records.with_status("failed")
    # one caller, one call at a time: the k-th call is draw k, so the server's failures are the client's
    assert sorted(records.seq[failed & records.with_protocol("grpc")].tolist()) == failed_calls
    assert int((failed & records.with_protocol("http")).sum()) == statuses.count(503)
    assert (records.service_ns[failed] == 0).all()  # answered at once: no slot, no hold


def test_records_after_a_reset_start_empty_and_the_draws_start_again() -> None:
    with reference_server(delay={"law": "lognormal", "median_ms": 1, "sigma": 0.5}, seed=11) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        try:
            for _ in range(10):
                client.infer("identity", [grpc_input(1)])
            first = server.records()
            server.reset()
            empty = server.records()
            assert server.stats()["received"] == 0
            for _ in range(10):
                client.infer("identity", [grpc_input(1)])
            again = server.records()
        finally:
            client.close()
    assert len(empty) == 0 and empty.total == 0 and empty.dropped == 0
    assert first.seq.tolist() == again.seq.tolist() == list(range(10))
    assert first.hold_ns.tolist() == again.hold_ns.tolist()  # draw k of the seed, whatever else happened
    assert len(set(first.hold_ns.tolist())) > 5  # and a lognormal law, not one value


def test_a_full_buffer_counts_the_rest_as_dropped() -> None:
    with reference_server(record_capacity=3) as server:
        for _ in range(5):
            requests.post(f"{server.http_url}/predictions/identity", data=b"x", timeout=10)
        records = server.records()
        assert (len(records), records.dropped) == (3, 2)
        later = server.records(after=2)
        assert later.seq.tolist() == [2] and later.next == 3


def test_a_configuration_the_server_refuses_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "reference.yaml"
    config.write_text("outputs:\n  - {name: A}\n  - {name: A}\n")
    done = subprocess.run(
        [sys.executable, "-m", "inferload.local.reference_server", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f'{config}: outputs[1].name: "A" is given twice' in done.stderr


def test_inferload_runs_every_protocol_against_it_with_no_failure(tmp_path: Path) -> None:
    with reference_server(rest_items=2, delay={"law": "fixed", "ms": 1}) as server:

        def target(name: str, kind: str, address: str, **extra: Any) -> dict[str, Any]:
            return reference_target(name, kind, address, timeout="5s", **extra)

        targets = [
            target("triton-grpc", "triton-grpc", server.grpc_address, batch_size=2, response_check="shape"),
            target("triton-http", "triton-http", server.http_address, batch_size=3, response_check="shape"),
            target("kserve-v2-grpc", "kserve-v2-grpc", server.grpc_address, response_check="shape"),
            target("kserve-v2-http", "kserve-v2-http", server.http_url, batch_size=2, response_check="shape"),
            target("kserve-v1-http", "kserve-v1-http", server.http_url, batch_size=2),
            target("torchserve-rest", "torchserve-rest", server.http_url, batch_size=2, response_check="shape"),
        ]
        data = {
            "name": "reference",
            "duration": "4s",
            "warmup": "1s",
            "targets": targets,
            "shape": {"kind": "steady", "users": 6},
        }
        out = tmp_path / "results"
        done = inferload("run", str(write_scenario(tmp_path, data)), "--headless", "--out", str(out), timeout_s=180)
        records = server.records()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in (t["name"] for t in targets):
        figures = summary["targets"][name]
        assert figures["requests"] > 0 and figures["failures"] == 0, (name, figures)
    assert len(records) >= sum(t["requests"] for t in summary["targets"].values())
    assert set(records.protocols[p] for p in records.protocol) == {"grpc", "http", "rest", "v1"}
    # every request answered, those in flight when the run stopped too: a stop lets them end
    # (tests/integration/test_engine_reference.py)
    assert (records.with_status("ok")).all(), records.statuses
