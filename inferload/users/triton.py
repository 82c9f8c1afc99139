"""Triton's users: `TritonGrpcUser` (unary ``ModelInfer``), `TritonHttpUser` (``/v2/models/<m>/infer``)
and `TritonStreamUser` (decoupled models over the ``ModelStreamInfer`` stream), with the request ids
a traced run puts on each request.

Decoupled models: a decoupled model (``model_transaction_policy { decoupled: true }`` in its config) answers one
request with zero or more responses, and only over the gRPC stream: Triton refuses it on the
unary `ModelInfer` and over HTTP. Every `triton-grpc` target's user class is a `TritonStreamUser`;
the start check (`inferload.startchecks.fit`) sets `decoupled` from the model's config, and only
then do its users stream. Otherwise every call is `TritonGrpcUser`'s unary one, unchanged.

Streaming, each user opens one stream (at its first call, again after the stream broke or a
call timed out) and sends its requests on it one at a time: each request is a pick from
`TritonGrpcUser`'s pre-encoded requests (nothing is encoded per call) with Triton's
``triton_enable_empty_final_response`` parameter appended (protobuf merges concatenated
messages), so that every request ends with a response flagged ``triton_final_response`` even
when the model sends its final flag alone. The target's response check applies to every
response that carries outputs.
Responses are read in the user's own greenlet (no hand-off), each timed on arrival:

- the complete-request latency (first byte sent -> final flag) is what the request event
  reports, so every existing figure keeps its meaning;
- time to first response, time between responses and the number of responses (those that carry
  outputs; Triton's empty final response is not one) go with the request event as a
  `StreamTiming` in ``context["stream"]`` (see `inferload.measure.decoupled_record`).

A response with an error fails its request (the rest of its responses are still read, up to its
final one); an error response without ``triton_final_response`` (Triton refused the request
before the model saw it) is final. A call that times out cancels the stream: late responses
cannot be counted for the next request.

A traced target (``trace``, the per-request join with Triton's trace) puts the request id on each
streamed request as the unary user does (`inferload.users.triton`, appended to the pre-encoded
bytes) and keeps its times from the send to the arrival of its final response (the complete
request; `time.monotonic_ns`, the clock of Triton's trace); failed requests are not kept. Triton
traces a streamed request once, with a ``GRPC_SEND_START``/``GRPC_SEND_END`` pair per response
(docs/observability.md).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import gevent
import gevent.queue
import grpc
import numpy as np
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from inferload.errors import HttpStatusError, RequestError, RequestTimeout
from inferload.measure.decoupled_record import STREAM_CONTEXT_KEY, StreamTiming
from inferload.scenario.inputs import InputSpec
from inferload.scenario.kinds import kinds_spoken_by
from inferload.scenario.targets import Target, sequence_of
from inferload.scenario.tls import TlsSettings
from inferload.users.base import InferenceUser, ModelFit, Wiring
from inferload.users.engine import NativeTarget
from inferload.users.expected import ExpectedCheck, UnexpectedOutput, expected_check_of, grpc_outputs, http_outputs
from inferload.users.failures import (
    GRPC_REASON_CHARS,
    NOT_A_TRITON_RESPONSE,
    WHITESPACE,
    Reason,
    bad_answer,
    check_output_shape,
    read_json,
)
from inferload.users.http_answer import bound_answer_heads
from inferload.users.request_pool import RequestData, RequestPool
from inferload.users.sequence import http_body_with_sequence, native_sequence, user_sequences
from inferload.users.tls import grpc_credentials, http_tls_options, native_tls


# Triton over HTTP/REST (tritonclient.http, built on geventhttpclient: native under Locust).
#
# Each distinct request's body (JSON header + binary tensors, from tritonclient's own
# ``generate_request_body``) is built once per process and target (``users.request_pool``); a call
# picks the next one and posts it through the tritonclient client (so its TLS settings apply),
# instead of ``infer()``, which rebuilds the body on every call.
def _host_port(address: str) -> str:
    for scheme in ("http://", "https://"):
        if address.startswith(scheme):
            return address[len(scheme) :].rstrip("/")
    return address.rstrip("/")


@dataclass(frozen=True)
class HttpRequest:
    """One pre-built inference body: the JSON header's length goes in Inference-Header-Content-Length."""

    body: bytes
    json_size: int | None


def infer_uri(model: str, version: str) -> str:
    """The path tritonclient's ``infer()`` posts to."""
    if version:
        return f"v2/models/{quote(model)}/versions/{version}/infer"
    return f"v2/models/{quote(model)}/infer"


#: Triton's error JSON has an ``error``
TRITON_REASON = Reason(("error",), GRPC_REASON_CHARS)


def _dims(shape: object) -> list[int] | None:
    """A stated shape as a list of 64-bit integers, or None."""
    if isinstance(shape, list) and all(type(d) is int and -(2**63) <= d < 2**63 for d in shape):
        return shape
    return None


def triton_answer_size(body: bytes, header_length: str | None, shapes: Mapping[str, tuple[int, ...]] | None) -> int:
    """A Triton HTTP answer with its status accepted: its JSON header (the first ``header_length``
    bytes, or the whole body) is an object whose ``outputs`` (a list, none when absent) are objects
    with a string ``name`` and a ``shape`` of integers; the ``shapes`` are checked when given; the
    size is the outputs' ``binary_data_size`` in their ``parameters`` (0 when absent: outputs in
    JSON). A `bad_answer` otherwise (the engine's `judge_triton_http`, the same rules)."""
    header = body
    if header_length is not None:
        digits = header_length.strip(WHITESPACE)
        if not (digits.isascii() and digits.isdigit()) or int(digits) > len(body):
            raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (Inference-Header-Content-Length is not a byte count within the answer)")
        header = body[: int(digits)]
    answer = read_json(header)
    if not isinstance(answer, dict):
        raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (its JSON header is not a JSON object)")
    outputs = answer.get("outputs", [])
    if not isinstance(outputs, list):
        raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (outputs is not a list)")
    size = 0
    for index, output in enumerate(outputs):
        name = output.get("name") if isinstance(output, dict) else None
        dims = _dims(output.get("shape")) if isinstance(output, dict) else None
        if not isinstance(name, str) or dims is None:
            raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (outputs[{index}] is not an object with a name and a shape of integers)")
        expected = shapes.get(name) if shapes else None
        if expected is not None:
            check_output_shape(name, tuple(dims), expected)
        parameters = output.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (outputs[{index}].parameters is not an object)")
        stated = parameters.get("binary_data_size") if parameters is not None else None
        if stated is not None and not (type(stated) is int and 0 <= stated < 2**64):
            raise bad_answer(f"{NOT_A_TRITON_RESPONSE} (outputs[{index}].parameters.binary_data_size is not a byte count)")
        size += stated or 0
    return size


def http_answer_outputs(body: bytes) -> dict[str, np.ndarray]:
    """A Triton HTTP answer's outputs: its JSON header, then the binary outputs the header names (the
    header's length found by parsing it, so the body alone is enough)."""
    try:  # latin-1: one character per byte, so where the header ends is its length in bytes
        _, header_length = json.JSONDecoder().raw_decode(body.decode("latin-1"))
    except ValueError:
        raise UnexpectedOutput(f"unexpected answer: no JSON header in its {len(body)} bytes") from None
    result = httpclient.InferResult.from_response_body(body, False, header_length if header_length < len(body) else None)
    return http_outputs(result)


class TritonHttpUser(InferenceUser):
    abstract = True
    target_kinds = kinds_spoken_by("TritonHttpUser")
    request_type = "HTTP"
    native_sequences = True

    @classmethod
    def encode_request(cls, data: RequestData) -> HttpRequest:
        """The body of one request, tensors as binary data (what ``infer()`` would post)."""
        inputs = []
        for spec, array in data.arrays:
            infer_input = httpclient.InferInput(spec.name, list(array.shape), spec.dtype)
            infer_input.set_data_from_numpy(array, binary_data=True)
            inputs.append(infer_input)
        outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in cls.target.outputs] or None
        body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        return HttpRequest(body=body, json_size=json_size)

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's HTTP target: each pre-built body with its JSON header's length, Triton's answer checks."""
        target = cls.target
        headers = target.request_headers(cls.scenario_dir)
        path = "/" + infer_uri(target.model, target.version or "")
        requests: list[Any] = []
        for request in pool.encoded_requests:
            own = [("Inference-Header-Content-Length", str(request.json_size))] if request.json_size is not None else []
            requests.append((path, request.body, own))
        shapes = fit.expected_outputs if target.response_check == "shape" else {}
        scheme = "https" if target.tls is not None else "http"
        return NativeTarget(
            protocol="http",
            address=f"{scheme}://{_host_port(target.address)}",
            requests=requests,
            check={
                "status": "2xx" if target.response_check == "none" else "200",
                "detail": TRITON_REASON.engine_check(),
                "answer": "triton_http",
                "shapes": {name: list(dims) for name, dims in shapes.items()},
            },
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
            sequence=native_sequence(fit.sequence_settings),
        )

    def connect(self) -> None:
        target = self.target
        tls = http_tls_options(target.tls, self.scenario_dir, target.name) if target.tls is not None else {}
        bound_answer_heads()
        self._client = httpclient.InferenceServerClient(
            url=_host_port(target.address),
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
            ssl=target.tls is not None,
            **tls,
        )
        self._expected = expected_check_of(self)  # response_check: expected (file read once per process)
        self._outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in target.outputs] or None
        self._version = target.version or ""
        self._sequences = user_sequences(self.wiring.fit.sequence_settings, sequence_of(target))  # None unless a sequence model
        self.request_pool()  # this process's requests of the target, encoded once (by its first user)
        self._uri = infer_uri(target.model, self._version)
        self._headers = target.request_headers(self.scenario_dir) or None

    def send(self) -> int:
        body, header_length = self._post_next()
        shapes = self.expected_outputs_now() if self.target.response_check == "shape" else None
        size = triton_answer_size(body, header_length, shapes)
        if self._expected is not None:  # only this check decodes the answer
            self.check_expected(self._expected, body, self.request_pool().samples(self._request_index))
        return size

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.arrays(http_answer_outputs(answer), samples)

    def _post_next(self) -> tuple[bytes, str | None]:
        """Post the next pre-built body as it is (a pick; nothing is encoded): the answer's body and
        its ``Inference-Header-Content-Length``; HttpStatusError unless its status is accepted."""
        self._request_index, request = self.next_request()  # the index: which samples an expected check compares
        body, json_size = request.body, request.json_size
        if self._sequences is not None:  # the step's ID and flags go in the JSON header (only it is re-encoded)
            body, json_size = http_body_with_sequence(body, json_size, self._sequences.next_step())
        traced = self.wiring.trace_records
        if traced is not None:  # the trace join: an id in the JSON header, the times kept
            number, request_id = traced.next_id()
            body, json_size = http_body_with_id(body, json_size, request_id)
        headers = dict(self._headers) if self._headers else {}
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = str(json_size)
        sent_ns = time.monotonic_ns()
        try:
            response = self._client._post(self._uri, body, headers, None)
            answer = response.read()
            status = response.status_code
            if not (200 <= status < 300 if self.target.response_check == "none" else status == 200):
                raise HttpStatusError(status, TRITON_REASON.of(answer))
        except Exception:
            if self._sequences is not None:  # no answer, or the server's error: that sequence starts afresh
                self._sequences.abandon()
            raise
        if traced is not None:
            traced.add(number, sent_ns, time.monotonic_ns())
        return answer, response.get("Inference-Header-Content-Length")

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None


# A request id put on a pre-encoded Triton request, without re-encoding it (the trace join).
#
# gRPC: ``ModelInferRequest.id`` (field 3) appended to the serialized message (a protobuf merge:
# the last value of a scalar field wins). HTTP: ``"id"`` put first in the JSON header (the body's
# first byte is the header's ``{``; the binary tensors after it are copied once).
#: ``ModelInferRequest.id``: field 3, wire type 2 (length-delimited)
_ID_TAG = b"\x1a"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def grpc_id_field(request_id: str) -> bytes:
    """The serialized ``id`` field to append to a serialized ModelInferRequest (encoded by hand: a
    quarter of the time protobuf takes to build and serialize a message for it)."""
    data = request_id.encode()
    return _ID_TAG + _varint(len(data)) + data


def http_body_with_id(body: bytes, json_size: int | None, request_id: str) -> tuple[bytes, int | None]:
    """A pre-built HTTP inference body (JSON header first) with ``"id"`` in its header: (body, json_size)."""
    if not body.startswith(b"{"):
        raise ValueError("an inference body starts with its JSON header")
    member = b'{"id":' + json.dumps(request_id).encode() + b","
    tagged = b"".join((member, memoryview(body)[1:]))
    return tagged, None if json_size is None else json_size + len(member) - 1


# Triton over gRPC: Triton's `ModelInfer` called through a raw gRPC method handle.
#
# The requests (`ModelInferRequest`, tensors as raw bytes, the way tritonclient.grpc builds them) are
# built and serialized once per process and target (`users.request_pool`); each call picks the next
# one and sends its bytes as they are. Measured by
# `make bench` (docs/benchmarks.md): tritonclient's `infer()` rebuilds, copies and serializes the
# whole request on every call. Failures are raised as tritonclient's `InferenceServerException`
# (gRPC status and message), exactly as tritonclient raises them.
#
# gRPC under gevent needs `grpc.experimental.gevent.init_gevent()` before any channel is made;
# the locustfile does that at import. Each user closes its channel in `on_stop`, or a headless
# run prints its summary and then never exits.
#
# This is the Python transport: each call blocks its greenlet through gRPC's gevent integration.
# The native engine (`inferload.users.engine`) makes the same calls from the same pre-encoded bytes
# (`native_target`) without Python when the extension is built.
MAX_GRPC_MESSAGE_SIZE = 2**31 - 1  # what tritonclient.grpc allows both ways
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
#: no transparent retries: a request a server refuses (GOAWAY at once) is a counted failure, as on the engine,
#: not re-sent by grpc-core without end within its timeout
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.enable_retries", 0),
]


def infer_request(model: str, version: str, inputs: list[tuple[InputSpec, np.ndarray]], outputs: tuple[str, ...]) -> Any:
    """The ModelInferRequest for these tensors (raw contents, one per input)."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for spec, array in inputs:
        tensor = request.inputs.add()
        tensor.name = spec.name
        tensor.datatype = spec.dtype
        tensor.shape.extend(int(d) for d in array.shape)
        if spec.dtype == "BYTES":
            serialized = serialize_byte_tensor(array)
            request.raw_input_contents.append(serialized.item() if serialized.size > 0 else b"")
        else:
            request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in outputs:
        request.outputs.add().name = name
    return request


def answers_within(target: Target) -> list[tuple[str, int]]:
    """The user's channel options: `CHANNEL_OPTIONS`, answers bounded by the target's ``max_answer_bytes``
    (grpcio fails a larger one with RESOURCE_EXHAUSTED before buffering it)."""
    return [*CHANNEL_OPTIONS, ("grpc.max_receive_message_length", target.max_answer_bytes)]


def open_channel(
    address: str, tls: TlsSettings | None, base_dir: Path, target: str, options: Sequence[tuple[str, Any]] = CHANNEL_OPTIONS
) -> grpc.Channel:
    """A plain channel, or a TLS one (``grpc.secure_channel``) when the target has ``tls``, with grpcio's `options`."""
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    credentials, tls_options = grpc_credentials(tls, base_dir, target)
    return grpc.secure_channel(address, credentials, options=[*options, *tls_options])


class TritonGrpcUser(InferenceUser):
    abstract = True
    target_kinds = kinds_spoken_by("TritonGrpcUser")
    request_type = "gRPC"
    native_sequences = True

    @classmethod
    def streams(cls, fit: ModelFit) -> bool:
        """Every call goes on the ModelStreamInfer stream, for a model of this ``fit`` (a decoupled
        model: `TritonStreamUser`)."""
        return False

    def connect(self) -> None:
        target = self.target
        # the target's headers go as gRPC metadata (keys in lower case, as gRPC requires)
        headers = target.request_headers(self.scenario_dir)
        self._metadata = tuple((name.lower(), value) for name, value in headers.items()) or None
        self._channel = open_channel(target.address, target.tls, self.scenario_dir, target.name, answers_within(target))
        self._expected = expected_check_of(self)  # response_check: expected (file read once per process)
        # this process's requests of the target, encoded once (by its first user); send() picks from them
        self.request_pool()
        self._sequences = user_sequences(self.wiring.fit.sequence_settings, sequence_of(target))  # None unless a sequence model
        # request_serializer None: the pool's bytes go on the wire unchanged
        self._model_infer: Any = self._channel.unary_unary(
            MODEL_INFER_METHOD,
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's gRPC target: the pool's serialized requests, the output shapes to check."""
        target = cls.target
        headers = target.request_headers(cls.scenario_dir)
        check: dict[str, Any] = {"answer": "none"}
        if fit.expected_outputs and target.response_check == "shape":
            check = {"answer": "grpc_shapes", "shapes": {name: list(dims) for name, dims in fit.expected_outputs.items()}}
        return NativeTarget(
            protocol="grpc",
            address=target.address,
            requests=list(pool.encoded_requests),
            check=check,
            headers=[(name.lower(), value) for name, value in headers.items()],
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
            sequence=native_sequence(fit.sequence_settings),
            stream=cls.streams(fit),
        )

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        """The serialized ModelInferRequest (sent as is by every call that picks it)."""
        target = cls.target
        return infer_request(target.model, target.version or "", list(data.arrays), target.outputs).SerializeToString()

    def send(self) -> int:
        index, request_bytes = self.next_request()  # a pick from the pre-encoded requests, nothing encoded
        if self._sequences is not None:  # the step's ID and flags: parameters appended (a protobuf merge)
            request_bytes += self._sequences.next_step().grpc_parameters
        traced = self.wiring.trace_records
        if traced is not None:  # the trace join: an id on the request, its times kept
            number, request_id = traced.next_id()
            request_bytes += grpc_id_field(request_id)
            sent_ns = time.monotonic_ns()
        try:
            response = self._model_infer(request_bytes, timeout=self.target.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            if self._sequences is not None:
                self._sequences.abandon()
            raise get_error_grpc(exc) from None
        if traced is not None:
            traced.add(number, sent_ns, time.monotonic_ns())
        self.check_answer_shapes(response)
        if self._expected is not None:  # only this check decodes the answer
            self._expected.arrays(grpc_outputs(response), self.request_pool().samples(index))
        return sum(len(raw) for raw in response.raw_output_contents)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.arrays(grpc_outputs(service_pb2.ModelInferResponse.FromString(answer)), samples)

    @classmethod
    def expected_python_only_reason(cls, wiring: Wiring | None, fit: ModelFit) -> str | None:
        if cls.streams(fit):
            return "a decoupled model's expected answers are compared per response of its stream, in Python"
        return super().expected_python_only_reason(wiring, fit)

    def check_answer_shapes(self, response: Any) -> None:
        """``response_check: shape``: each output's stated shape against the model's (BadOutputShape)."""
        if self.wiring.fit.expected_outputs and self.target.response_check == "shape":
            shapes = self.expected_outputs_now()
            for output in response.outputs:
                expected = shapes.get(output.name)
                if expected is not None:
                    check_output_shape(output.name, tuple(output.shape), expected)

    def close(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            channel.close()
            self._channel = None


# Decoupled models over the `ModelStreamInfer` stream (the module's docstring says how).
MODEL_STREAM_INFER_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
#: the request parameter that makes Triton send the final flag in a response of its own
EMPTY_FINAL_PARAMETER = "triton_enable_empty_final_response"
#: the response parameter that marks a request's last response
FINAL_PARAMETER = "triton_final_response"


def empty_final_parameter_bytes() -> bytes:
    """``parameters {triton_enable_empty_final_response: true}`` as bytes to append to a serialized
    ModelInferRequest (a map entry: appending it adds it to the request's parameters)."""
    extra = service_pb2.ModelInferRequest()
    extra.parameters[EMPTY_FINAL_PARAMETER].bool_param = True
    return extra.SerializeToString()


def is_final(response: Any) -> bool:
    """Whether a ModelStreamInferResponse ends its request."""
    parameters = response.infer_response.parameters
    if FINAL_PARAMETER in parameters:
        return bool(parameters[FINAL_PARAMETER].bool_param)
    return bool(response.error_message)  # Triton refused the request itself: one error response, no flag


class RequestStream:
    """One open `ModelStreamInfer` call: requests go in through a queue, responses are read by the caller."""

    def __init__(self, method: Any, metadata: Any) -> None:
        self._requests: gevent.queue.Queue[bytes | None] = gevent.queue.Queue()
        self._call = method(self._request_iterator(), metadata=metadata)

    def _request_iterator(self) -> Any:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def send(self, request: bytes) -> None:
        self._requests.put(request)

    def next_response(self) -> Any:
        """The next response (blocks the greenlet); StopIteration when the server ended the stream."""
        return next(self._call)

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class TritonStreamUser(TritonGrpcUser):
    abstract = True

    #: True streams every call (see the module docstring); the model's config, as the start check
    #: read it (`ModelFit.decoupled`), decides over it
    decoupled: ClassVar[bool] = False

    @classmethod
    def streams(cls, fit: ModelFit) -> bool:
        return cls.decoupled if fit.decoupled is None else fit.decoupled

    def connect(self) -> None:
        super().connect()  # channel, metadata, the pre-encoded requests: as the unary user makes them
        if not self.streams(self.wiring.fit):
            return
        self._final_parameter = empty_final_parameter_bytes()
        self._model_stream_infer = self._channel.stream_stream(
            MODEL_STREAM_INFER_METHOD,
            request_serializer=None,  # the bytes above go on the wire unchanged
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )
        self._stream: RequestStream | None = None
        self._timing: StreamTiming | None = None

    def send(self) -> int:
        if not self.streams(self.wiring.fit):
            return super().send()
        self._timing = None
        _, request_bytes = self.next_request()  # a pick from the pre-encoded requests, nothing encoded
        request_bytes += self._final_parameter  # parameters appended: a protobuf merge
        if self._sequences is not None:  # a decoupled sequence model: the step's ID and flags too
            request_bytes += self._sequences.next_step().grpc_parameters
        traced = self.wiring.trace_records
        if traced is not None:  # the trace join: an id on the request (as the unary user puts it)
            number, request_id = traced.next_id()
            request_bytes += grpc_id_field(request_id)
        if self._stream is None:
            self._stream = RequestStream(self._model_stream_infer, self._metadata)
        timeout = RequestTimeout(f"timeout: no final response from {self.target.address} in time")
        try:
            with gevent.Timeout(self.target.timeout, timeout):
                received, failure, sent_ns, final_ns = self._stream_one(self._stream, request_bytes)
        except grpc.RpcError as exc:  # the stream broke (server down, cancelled): a new one next call
            self._drop_stream()
            if self._sequences is not None:
                self._sequences.abandon()
            raise get_error_grpc(exc) from None
        except StopIteration:
            self._drop_stream()
            raise RequestError(f"stream closed: {self.target.address} ended the gRPC stream before the final response") from None
        except BaseException:  # a timeout, or the user stopped mid-request: its late responses go with the stream
            self._drop_stream()
            raise
        if failure is not None:  # every response of the request was read: the stream goes on
            self._timing = None
            raise failure
        if traced is not None:  # sent -> the final response read (the complete request)
            traced.add(number, sent_ns, final_ns)
        return received

    def _stream_one(self, stream: RequestStream, request: bytes) -> tuple[int, Exception | None, int, int]:
        """Send the request and read its responses up to the final one: (bytes received, the
        request's first failure or None, when it was sent, when its final response arrived); sets
        `_timing`. Times are ``time.monotonic_ns()``: the clock of Triton's trace (the trace join)."""
        started = time.monotonic_ns()
        stream.send(request)
        arrivals: list[int] = []
        received = 0
        failure: Exception | None = None
        while True:
            response = stream.next_response()
            now = time.monotonic_ns()
            if response.error_message:
                failure = failure or InferenceServerException(msg=response.error_message)
            else:
                answer = response.infer_response
                if answer.outputs:  # an empty final response carries none
                    arrivals.append(now)
                    received += sum(len(raw) for raw in answer.raw_output_contents)
                    failure = failure or self._answer_failure(answer)
            if is_final(response):
                break
        gaps = tuple((b - a) / 1e6 for a, b in itertools.pairwise(arrivals))
        first = (arrivals[0] - started) / 1e6 if arrivals else None
        self._timing = StreamTiming(responses=len(arrivals), first_response_ms=first, gaps_ms=gaps)
        return received, failure, started, now

    def _answer_failure(self, answer: Any) -> Exception | None:
        """The target's response check on one response that carries outputs (as the unary user checks an answer)."""
        try:
            if self.wiring.fit.expected_outputs and self.target.response_check == "shape":
                shapes = self.expected_outputs_now()
                for output in answer.outputs:
                    expected = shapes.get(output.name)
                    if expected is not None:
                        check_output_shape(output.name, tuple(output.shape), expected)
            if self._expected is not None:  # response_check: expected, on every response
                self._expected.arrays(grpc_outputs(answer))
        except RequestError as exc:
            return exc
        return None

    def call_context(self) -> dict[str, Any] | None:
        timing = getattr(self, "_timing", None)
        return {STREAM_CONTEXT_KEY: timing} if timing is not None else None

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        if self.streams(self.wiring.fit) and getattr(self, "_stream", None) is not None:
            self._drop_stream()
        super().close()
