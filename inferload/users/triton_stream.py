"""Triton over gRPC for decoupled models: one bidirectional `ModelStreamInfer` stream per user.

A decoupled model (``model_transaction_policy { decoupled: true }`` in its config) answers one
request with zero or more responses, and only over the gRPC stream: Triton refuses it on the
unary `ModelInfer` and over HTTP. Every `triton-grpc` target's user class is a `TritonStreamUser`;
the start check (`inferload.run.model_fit`) sets `decoupled` from the model's config, and only
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
  `StreamTiming` in ``context["stream"]`` (see `inferload.measure.stream_record`).

A response with an error fails its request (the rest of its responses are still read, up to its
final one); an error response without ``triton_final_response`` (Triton refused the request
before the model saw it) is final. A call that times out cancels the stream: late responses
cannot be counted for the next request.

A traced target (``trace``, the per-request join with Triton's trace) puts the request id on each
streamed request as the unary user does (`inferload.users.trace_ids`, appended to the pre-encoded
bytes) and keeps its times from the send to the arrival of its final response (the complete
request; `time.monotonic_ns`, the clock of Triton's trace); failed requests are not kept. Triton
traces a streamed request once, with a ``GRPC_SEND_START``/``GRPC_SEND_END`` pair per response
(docs/observability.md).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, ClassVar

import gevent
import gevent.queue
import grpc
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import InferenceServerException

from inferload.errors import RequestError, RequestTimeout
from inferload.measure.stream_record import STREAM_CONTEXT_KEY, StreamTiming
from inferload.users.expected import grpc_outputs
from inferload.users.failures import check_output_shape
from inferload.users.trace_ids import grpc_id_field
from inferload.users.triton_grpc import TritonGrpcUser

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

    #: set from the model's config at start: True streams every call (see the module docstring)
    decoupled: ClassVar[bool] = False

    def connect(self) -> None:
        super().connect()  # channel, metadata, the pre-encoded requests: as the unary user makes them
        if not self.decoupled:
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
        if not self.decoupled:
            return super().send()
        self._timing = None
        _, request_bytes = self.next_request()  # a pick from the pre-encoded requests, nothing encoded
        request_bytes += self._final_parameter  # parameters appended: a protobuf merge
        if self._sequences is not None:  # a decoupled sequence model: the step's ID and flags too
            request_bytes += self._sequences.next_step().grpc_parameters
        traced = self.trace_records
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
            if self.expected_outputs and self.target.response_check == "shape":
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
        if self.decoupled and getattr(self, "_stream", None) is not None:
            self._drop_stream()
        super().close()
