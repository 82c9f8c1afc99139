"""One failure vocabulary, two transports: the native engine's answer checks
(`inferload._native.check_answer`) and the Python transport's give the same failure, class and
text, for the same answer (docs/engine.md, "Failures").

Every case runs both ways on the same answer: through the Python users' own ``send()`` (their
real answer handling, with the network replaced by a stub that returns the answer) and the
classification of what they raise (`users.failures.classify_exception`), and through the
engine's ``check_answer`` with the check dict the user's settings map to. Outcomes (the failure
class and its message, which Locust groups failures by) and response lengths must be identical,
for ordinary answers and for those at the edges of JSON (NaN, numbers out of range, nesting past
127 levels, lone surrogates, a BOM), which both read as RFC 8259 has it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from inferload.users.base import ModelFit, Wiring
from inferload.users.bentoml import BENTOML_REASON, BentoMLHttpUser
from inferload.users.failures import _classify_triton, classify_exception
from inferload.users.kserve import KSERVE_REASON, KServeV1HttpUser, KServeV2HttpUser, response_size
from inferload.users.torchserve import TORCHSERVE_REASON, TorchServeRestUser
from inferload.users.triton import TRITON_REASON, TritonGrpcUser, TritonHttpUser

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

ADDRESS = "127.0.0.1:8000"
MAX_ANSWER = 64 * 1024 * 1024
Outcome = tuple[str, str] | None


@dataclass
class StubAnswer:
    """What the Python users read of an HTTP answer (geventhttpclient's response)."""

    status_code: int
    body: bytes
    headers: dict[str, str]
    offset: int = 0

    def read(self, length: int = -1) -> bytes:
        if length == -1:
            length = len(self.body) - self.offset
        chunk = self.body[self.offset : self.offset + length]
        self.offset += len(chunk)
        return chunk

    def release(self) -> None:
        pass

    @property
    def content_length(self) -> int | None:
        declared = self.get("content-length")
        return None if declared is None else int(declared)

    def get(self, name: str, default: str | None = None) -> str | None:
        found = {k.lower(): v for k, v in self.headers.items()}
        return found.get(name.lower(), default)


class StubClient:
    def __init__(self, answer: StubAnswer) -> None:
        self.answer = answer

    def post(self, request_uri: str, body: bytes, headers: Any) -> StubAnswer:
        return self.answer

    def _post(self, request_uri: str, body: bytes, headers: Any, query_params: Any) -> StubAnswer:  # tritonclient's
        return self.answer


def python_outcome(send: Callable[[], int]) -> tuple[Outcome, int]:
    try:
        length = send()
    except Exception as exc:  # what InferenceUser._call does with it
        error = classify_exception(exc, ADDRESS)
        return (type(error).__name__, str(error)), 0
    return None, length


def engine_outcome(
    check: dict[str, Any], protocol: str, status: int, headers: dict[str, str], body: bytes
) -> tuple[Outcome, int]:
    pairs = list(headers.items())
    found = native.check_answer(check, protocol, status, pairs, body, ADDRESS)
    if found is not None:
        return tuple(found), 0
    length = native.answer_length(check, protocol, status, pairs, body)
    assert length is not None
    return None, length


def user(cls: type, **attributes: Any) -> Any:
    """A user object without Locust around it: only what ``send()`` reads."""
    instance: Any = object.__new__(cls)
    for name, value in attributes.items():
        setattr(instance, name, value)
    return instance


# -- HTTP users ---------------------------------------------------------------------------------

GENERIC_BODIES: list[bytes] = [
    b"",
    b"not json",
    b"<html><body>502 Bad Gateway</body></html>",
    b"null",
    b"true",
    b"3.5",
    b"12",
    b'"a string"',
    b"[]",
    b"[1, 2]",
    b"[[0.1, 0.9]]",
    b"{}",
    b'{"error": "model x is not found"}',
    b'{"error": ""}',
    b'{"error": 0}',
    b'{"error": null, "detail": "  bad input\\nsecond"}',
    b'{"error": {"code": 5, "why": [1.5, null, true, "it\'s"]}}',
    b'{"message": "Model busy\\nretry later"}',
    b'{"message": "\\u2028starts with a separator"}',
    b'{"code": 503, "type": "ServiceUnavailableException", "message": "Model \\"m\\" has no worker to serve inference request."}',
    b'{"detail": [{"loc": ["body"], "msg": "field required"}]}',
    json.dumps({"error": "x" * 300}).encode(),
    json.dumps({"message": "\u00e9" * 150}).encode(),
    ("\u00e9" * 400).encode(),
    b'{"error": {"message": "nested, as OpenAI puts it"}}',
    b'{"error": "   "}',
    b'  \r\n  {"error": "after blank lines"}',
    b"\n\n  text after blank lines\nsecond",
    b'{"error": "a\\u2028b\\u000bc\\rd"}',
    b'{"error": "x", "n": NaN}',
    b'{"error": "x", "n": -Infinity}',
    b'{"error": "x", "n": 1e400}',
    b'{"error": "x", "n": ' + b"9" * 400 + b"}",
    b'{"error": "x", "s": "\\ud800"}',
    b'{"error": "\\ud83d\\ude00 a pair"}',
    b'{"error": "x", "deep": ' + b"[" * 126 + b"]" * 126 + b"}",
    b'{"error": "x", "deep": ' + b"[" * 127 + b"]" * 127 + b"}",
    b"[" * 20000 + b"]" * 20000,
    b"\xff\xfe{not utf-8",
    b'\xef\xbb\xbf{"error": "after a BOM"}',
    b'{"error": 1e400}',
    b'{"error": NaN}',
    b'{"error": 1e16}',
    b'{"error": -0.0}',
    b'{"a": 1, "a": 2}',
    b'{"f": 1, "e": 2, "d": 3, "c": 4, "b": 5, "a": 6}',
    b'{"predictions": [1]}',
    b'{"predictions": [[1, 2], [3, 4]]}',
    b'{"predictions": "x"}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": [2, 4]}]}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": ["1", 4]}]}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": ["a"]}]}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": null}]}',
    b'{"outputs": [{"shape": [1, 4]}, "not a dict", {"name": "OUTPUT0", "shape": [1, 4]}]}',
    b'{"outputs": [{"name": "OUTPUT0", "shape": [1, 3]}, {"name": "OUTPUT0", "shape": [1, 4]}]}',
    b'{"outputs": {"name": "OUTPUT0"}}',
    b"[1, 2",
    b'{"a": [1, {"b": }]}',
]
STATUSES = [200, 201, 204, 400, 404, 500, 503]
KSERVE_DETAIL = {"detail": KSERVE_REASON.engine_check()}
TORCHSERVE_DETAIL = TORCHSERVE_REASON.engine_check()
BENTOML_DETAIL = BENTOML_REASON.engine_check()


def torchserve_send(response_check: str, batch_size: int, answer: StubAnswer) -> Callable[[], int]:
    target = SimpleNamespace(response_check=response_check, batch_size=batch_size, max_answer_bytes=MAX_ANSWER)
    instance = user(
        TorchServeRestUser, target=target, _client=StubClient(answer), _path="/predictions/m", _headers={}, _expected=None
    )
    instance.next_request = lambda: (0, b"body")
    instance.request_pool = lambda: None
    return instance.send


def bentoml_send(response_check: str, batch_size: int, answer: StubAnswer) -> Callable[[], int]:
    target = SimpleNamespace(response_check=response_check, batch_size=batch_size, max_answer_bytes=MAX_ANSWER)
    instance = user(BentoMLHttpUser, target=target, _client=StubClient(answer), _path="/predict", _own_headers={}, _expected=None)
    instance.next_request = lambda: (0, SimpleNamespace(body=b"{}", content_type="application/json"))
    instance.request_pool = lambda: None
    return instance.send


def kserve_v2_send(response_check: str, expected_outputs: dict[str, tuple[int, ...]], answer: StubAnswer) -> Callable[[], int]:
    target = SimpleNamespace(response_check=response_check, max_answer_bytes=MAX_ANSWER)
    instance = user(
        KServeV2HttpUser, target=target, _client=StubClient(answer), _path="/v2/models/m/infer", _headers={}, _expected=None
    )
    instance.wiring = Wiring(fit=ModelFit(expected_outputs=expected_outputs))
    instance.next_request = lambda: (0, b"{}")
    return instance.send


def kserve_v1_send(response_check: str, batch_size: int, answer: StubAnswer) -> Callable[[], int]:
    target = SimpleNamespace(response_check=response_check, batch_size=batch_size, max_answer_bytes=MAX_ANSWER)
    instance = user(
        KServeV1HttpUser, target=target, _client=StubClient(answer), _path="/v1/models/m:predict", _headers={}, _expected=None
    )
    instance.next_request = lambda: (0, b"{}")
    return instance.send


HTTP_KINDS: list[tuple[str, Callable[[StubAnswer], Callable[[], int]], dict[str, Any]]] = [
    (
        "torchserve status",
        lambda a: torchserve_send("status", 2, a),
        {"answer": "none", "detail": TORCHSERVE_DETAIL},
    ),
    (
        "torchserve none",
        lambda a: torchserve_send("none", 2, a),
        {"answer": "none", "status": "2xx", "detail": TORCHSERVE_DETAIL},
    ),
    (
        "torchserve shape",
        lambda a: torchserve_send("shape", 2, a),
        {"answer": "json_list", "length": 2, "detail": TORCHSERVE_DETAIL},
    ),
    (
        "torchserve shape 1",
        lambda a: torchserve_send("shape", 1, a),
        {"answer": "json_list", "length": 1, "detail": TORCHSERVE_DETAIL},
    ),
    (
        "bentoml status",
        lambda a: bentoml_send("status", 2, a),
        {"answer": "none", "detail": BENTOML_DETAIL},
    ),
    (
        "bentoml shape",
        lambda a: bentoml_send("shape", 1, a),
        {"answer": "json_list", "length": 1, "detail": BENTOML_DETAIL},
    ),
    ("kserve v2 status", lambda a: kserve_v2_send("status", {}, a), {"answer": "none", **KSERVE_DETAIL}),
    ("kserve v2 none", lambda a: kserve_v2_send("none", {}, a), {"answer": "none", "status": "2xx", **KSERVE_DETAIL}),
    (
        "kserve v2 shape",
        lambda a: kserve_v2_send("shape", {"OUTPUT0": (-1, 4), "OTHER": (1,)}, a),
        {"answer": "v2_shapes", "shapes": {"OUTPUT0": [-1, 4], "OTHER": [1]}, **KSERVE_DETAIL},
    ),
    ("kserve v2 expected", lambda a: kserve_v2_send("expected", {}, a), {"answer": "v2_shapes", **KSERVE_DETAIL}),
    (
        "kserve v2 shape, as the user class names it",
        lambda a: kserve_v2_send("shape", {"OUTPUT0": (-1, 4)}, a),
        {"answer": "v2_json", "shapes": {"OUTPUT0": [-1, 4]}, **KSERVE_DETAIL},
    ),
    ("kserve v1 status", lambda a: kserve_v1_send("status", 1, a), {"answer": "none", **KSERVE_DETAIL}),
    ("kserve v1 shape", lambda a: kserve_v1_send("shape", 1, a), {"answer": "v1_predictions", "length": 1, **KSERVE_DETAIL}),
    ("kserve v1 shape 2", lambda a: kserve_v1_send("shape", 2, a), {"answer": "v1_predictions", "length": 2, **KSERVE_DETAIL}),
]


@pytest.mark.parametrize(("kind", "python_send", "check"), HTTP_KINDS, ids=[kind for kind, _, _ in HTTP_KINDS])
def test_rest_answers_give_the_same_failure_on_both_transports(
    kind: str, python_send: Callable[[StubAnswer], Callable[[], int]], check: dict[str, Any]
) -> None:
    mismatches = []
    for status in STATUSES:
        for body in GENERIC_BODIES:
            expected = python_outcome(python_send(StubAnswer(status, body, {})))
            got = engine_outcome(check, "http", status, {}, body)
            if got != expected:
                mismatches.append(f"{status} {body[:60]!r}:\n    python {expected}\n    engine {got}")
    assert not mismatches, f"{kind}: {len(mismatches)} mismatches\n" + "\n".join(mismatches)


# -- Triton over HTTP (tritonclient's own answer handling) ---------------------------------------


def triton_http_answer(outputs: list[dict[str, Any]] | Any, binary: bytes = b"", **extra: Any) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"model_name": "identity", "model_version": "1", "outputs": outputs, **extra}).encode()
    if not binary:
        return header, {}
    return header + binary, {"Inference-Header-Content-Length": str(len(header))}


def triton_http_cases() -> list[tuple[int, bytes, dict[str, str]]]:
    good = [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]
    answers = [
        triton_http_answer(good, bytes(16)),
        triton_http_answer([{**good[0], "shape": [2, 4]}], bytes(16)),
        triton_http_answer([{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 3]}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1.0, 4.0]}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [True, 4]}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": ["1", "4"]}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": "14"}]),
        triton_http_answer([{"name": "OTHER", "shape": [9]}]),
        triton_http_answer([{"shape": [1, 4]}]),
        triton_http_answer([{"name": ["x"], "shape": [1, 4]}]),
        triton_http_answer(["OUTPUT0"]),
        triton_http_answer("OUTPUT0"),
        triton_http_answer(7),
        triton_http_answer({"name": "OUTPUT0"}),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": None}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": "16"}}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": 2.7}}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": "x"}}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": None}}]),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": "16"}}], bytes(16)),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": {"binary_data_size": [1]}}], bytes(16)),
        triton_http_answer([{"name": "OUTPUT0", "shape": [1, 4], "parameters": 5}], bytes(16)),
        triton_http_answer([{"shape": [1, 4], "parameters": {"binary_data_size": 16}}], bytes(16)),
        (b'{"model_name": "identity"}', {}),
        (b'{"model_name": "identity"}', {"Inference-Header-Content-Length": "26"}),
        (b"[1, 2]", {}),
        (b"[1, 2]", {"Inference-Header-Content-Length": "6"}),
        (b"7", {"Inference-Header-Content-Length": "1"}),
        (b'"s"', {"Inference-Header-Content-Length": "3"}),
        (b"null", {"Inference-Header-Content-Length": "4"}),
        (b"{}", {"Inference-Header-Content-Length": "abc"}),
        (b"{}", {"Inference-Header-Content-Length": " 2 "}),
        (b'{"outputs": []}xxxx', {"Inference-Header-Content-Length": "15"}),
        (b'{"outputs": []}', {"Inference-Header-Content-Length": "400"}),
        (b"\xff{}", {}),
        (b'{"a": "\xff"}', {"Inference-Header-Content-Length": "10"}),
    ]
    cases = [(200, body, headers) for body, headers in answers]
    cases += [(200, body, {}) for body in GENERIC_BODIES]
    cases += [(status, body, {}) for status in (400, 404, 500, 503) for body in GENERIC_BODIES]
    return cases


def triton_http_send(answer: StubAnswer, shapes: bool) -> Callable[[], int]:
    target = SimpleNamespace(response_check="shape" if shapes else "status")
    instance = user(
        TritonHttpUser,
        target=target,
        _expected=None,
        _client=StubClient(answer),
        _uri="v2/models/identity/infer",
        _headers=None,
        _sequences=None,
        wiring=Wiring(),
    )
    instance.wiring = Wiring(fit=ModelFit(expected_outputs={"OUTPUT0": (1, 4)}))
    instance.next_request = lambda: (0, SimpleNamespace(body=b"{}", json_size=None))
    return instance.send


@pytest.mark.parametrize("shapes", [True, False], ids=["shape", "status"])
def test_triton_http_answers_give_the_same_failure_on_both_transports(shapes: bool) -> None:
    check: dict[str, Any] = {  # as TritonHttpUser.native_target builds it
        "status": "200",
        "detail": TRITON_REASON.engine_check(),
        "answer": "triton_http",
        "shapes": {"OUTPUT0": [1, 4]} if shapes else {},
    }
    mismatches = []
    for status, body, headers in triton_http_cases():
        expected = python_outcome(triton_http_send(StubAnswer(status, body, headers), shapes))
        got = engine_outcome(check, "http", status, headers, body)
        if got != expected:
            mismatches.append(f"{status} {headers} {body[:70]!r}:\n    python {expected}\n    engine {got}")
    assert not mismatches, f"{len(mismatches)} mismatches\n" + "\n".join(mismatches)


# -- Triton over gRPC ----------------------------------------------------------------------------


def grpc_response(*outputs: tuple[str, list[int]], raw: int = 16) -> bytes:
    response = service_pb2.ModelInferResponse(model_name="identity")
    for name, shape in outputs:
        tensor = response.outputs.add()
        tensor.name = name
        tensor.datatype = "FP32"
        tensor.shape.extend(shape)
        response.raw_output_contents.append(np.zeros(raw, np.uint8).tobytes())
    return response.SerializeToString()


GRPC_ANSWERS = [
    grpc_response(("OUTPUT0", [1, 4])),
    grpc_response(("OUTPUT0", [2, 4])),
    grpc_response(("OUTPUT0", [1])),
    grpc_response(("OTHER", [3]), ("OUTPUT0", [1, 4]), raw=7),
    grpc_response(("OTHER", [3]), ("OUTPUT0", [1, 5])),
    grpc_response(),
    b"\x0a\x05abc",  # a string field cut short: does not decode
    b"\x2a\x03\x0a\x01",  # an output tensor that does not decode
    b"\xff",
]


def grpc_send(answer: bytes, shapes: bool) -> Callable[[], int]:
    target = SimpleNamespace(response_check="shape" if shapes else "status", timeout=5.0)
    instance = user(TritonGrpcUser, target=target, _expected=None, _sequences=None, wiring=Wiring(), _metadata=None)
    instance.wiring = Wiring(fit=ModelFit(expected_outputs={"OUTPUT0": (-1, 4)}))
    instance.next_request = lambda: (0, b"")

    def model_infer(request: bytes, timeout: float, metadata: Any) -> Any:
        try:
            return service_pb2.ModelInferResponse.FromString(answer)
        except Exception:  # what grpcio makes of a response its deserializer refuses
            raise InferenceServerException(msg="Exception deserializing response!", status="StatusCode.INTERNAL") from None

    instance._model_infer = model_infer
    return instance.send


@pytest.mark.parametrize("shapes", [True, False], ids=["shape", "status"])
def test_grpc_answers_give_the_same_failure_on_both_transports(shapes: bool) -> None:
    check: dict[str, Any] = {"answer": "grpc_shapes", "shapes": {"OUTPUT0": [-1, 4]}} if shapes else {"answer": "none"}
    for answer in GRPC_ANSWERS:
        expected = python_outcome(grpc_send(answer, shapes))
        assert engine_outcome(check, "grpc", 0, {}, answer) == expected, answer


def test_a_kserve_answer_in_typed_contents_has_the_kserve_users_response_size() -> None:
    """KServe answers in typed contents, not raw ones: the size both transports give Locust is the
    typed contents' encoded size (`kserve_v2_grpc.response_size`), not 0."""
    response = service_pb2.ModelInferResponse(model_name="sklearn")
    for name, values in (("OUT", [1.0, 2.0, 3.0]), ("OTHER", [4.0])):
        tensor = response.outputs.add()
        tensor.name, tensor.datatype = name, "FP32"
        tensor.shape.extend([1, len(values)])
        tensor.contents.fp32_contents.extend(values)
    assert engine_outcome({"answer": "none"}, "grpc", 0, {}, response.SerializeToString()) == (None, response_size(response))
    assert response_size(response) > 0


GRPC_STATUSES = [
    (4, "Deadline Exceeded"),
    (14, "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host"),
    (14, "Socket closed"),
    (14, "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:8000: Failed parsing HTTP/2 (Expected"),
    (14, "Server is shutting down"),
    (3, "unexpected shape for input 'INPUT0' for model 'identity'. Expected [-1,4], got [1,3]. \nmore"),
    (5, "Request for unknown model: 'nope' is not found"),
    (13, ""),
    (13, "   "),
    (8, "x" * 400),
    (3, "first\u2028same line\rsecond"),
    (2, "odd"),
    (16, "missing token"),
]


@pytest.mark.parametrize(("code", "message"), GRPC_STATUSES)
def test_grpc_statuses_give_the_same_failure_on_both_transports(code: int, message: str) -> None:
    import grpc

    name = next(c for c in grpc.StatusCode if c.value[0] == code).name
    expected = _classify_triton(InferenceServerException(msg=message, status=f"StatusCode.{name}"), ADDRESS)
    got = native.check_answer({"answer": "none"}, "grpc", code, [], message.encode(), ADDRESS)
    assert tuple(got) == (type(expected).__name__, str(expected))


def test_a_bad_check_names_the_key_and_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"check\.answer: expected one of"):
        native.check_answer({"answer": "shape"}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r'check: unknown key "details"'):
        native.check_answer({"answer": "none", "details": "x"}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r"check\.detail: required key 'json_keys' is missing"):
        native.check_answer({"answer": "none", "detail": {"chars": 3}}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r'check\.detail: unknown key "json_key"'):
        native.check_answer({"answer": "none", "detail": {"json_key": "error"}}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r"check\.length: required"):
        native.check_answer({"answer": "json_list"}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r'check\.status: expected "200" or "2xx"'):
        native.check_answer({"answer": "none", "status": "201"}, "http", 200, [], b"")
    with pytest.raises(ValueError, match=r"check: failed to extract field CheckArg\.status: .*'int' object"):
        native.check_answer({"answer": "none", "status": 201}, "http", 200, [], b"")


def test_geventhttpclient_failures_are_named_as_the_engine_names_them() -> None:
    """The engine's texts for the same faults: tests/integration/test_hostile_answers.py, both transports."""
    from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

    def named(exc: BaseException) -> tuple[str, str]:
        error = classify_exception(exc, ADDRESS)
        return type(error).__name__, str(error)

    assert named(HTTPConnectionClosed("connection closed.")) == (
        "RequestError",
        f"closed: {ADDRESS} closed the connection before answering",
    )
    cut = ("RequestError", "bad answer: cut short: the connection closed before its end")
    assert named(HTTPParseError("Incomplete response.")) == cut
    assert named(HTTPParseError("connection closed before end of the headers")) == cut
    assert named(HTTPParseError("invalid character in chunk size")) == ("RequestError", "bad answer: broken HTTP framing")
