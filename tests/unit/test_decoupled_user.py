"""The streaming Triton user (decoupled models) without a server: how a request's responses are
read up to its final one, timed and checked; when the stream is dropped; how the start check
turns streaming on (gRPC) or refuses the model (HTTP)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import grpc
import numpy as np
import pytest
from locust.env import Environment
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from inferload.errors import BadOutputShape, RequestError, RequestTimeout
from inferload.scenario.targets import Target
from inferload.startchecks.fit import ModelInfos, StartContext
from inferload.startchecks.triton import check_target_against_triton, model_fit, start_check, triton_model_decoupled
from inferload.users import user_class_for
from inferload.users.base import ModelFit
from inferload.users.triton import (
    EMPTY_FINAL_PARAMETER,
    FINAL_PARAMETER,
    TritonGrpcUser,
    TritonStreamUser,
    empty_final_parameter_bytes,
    infer_request,
    is_final,
)

N = 3


def square_target(kind: str = "triton-grpc", **changes: Any) -> Target:
    fields: dict[str, Any] = {
        "name": "square",
        "kind": kind,
        "address": "127.0.0.1:1",
        "model": "square_int32",
        "inputs": [{"name": "IN", "shape": [1], "dtype": "INT32", "data": {"generator": "constant", "value": N}}],
        "outputs": ["OUT"],
    }
    fields.update(changes)
    return Target.model_validate(fields)


def square_metadata() -> dict[str, Any]:
    return {
        "name": "square_int32",
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1]}],
        "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1]}],
    }


def square_config(decoupled: bool = True) -> dict[str, Any]:
    return {
        "name": "square_int32",
        "backend": "python",
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": decoupled},
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
    }


def data_response(value: int = N, shape: tuple[int, ...] = (1,), final: bool | None = False) -> Any:
    response = service_pb2.ModelStreamInferResponse()
    answer = response.infer_response
    output = answer.outputs.add()
    output.name, output.datatype = "OUT", "INT32"
    output.shape.extend(shape)
    answer.raw_output_contents.append(value.to_bytes(4, "little"))
    if final is not None:
        answer.parameters[FINAL_PARAMETER].bool_param = final
    return response


def final_response() -> Any:
    response = service_pb2.ModelStreamInferResponse()
    response.infer_response.parameters[FINAL_PARAMETER].bool_param = True
    return response


def error_response(message: str, final: bool | None) -> Any:
    response = service_pb2.ModelStreamInferResponse(error_message=message)
    if final is not None:
        response.infer_response.parameters[FINAL_PARAMETER].bool_param = final
    return response


class FakeStream:
    """Stands for `RequestStream`: hands out the responses given, records what was sent."""

    def __init__(self, responses: list[Any]) -> None:
        self.responses: Iterator[Any] = iter(responses)
        self.sent: list[bytes] = []
        self.closed = False

    def send(self, request: bytes) -> None:
        self.sent.append(request)

    def next_response(self) -> Any:
        item = next(self.responses)
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


class BrokenStream(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Socket closed"

    def debug_error_string(self) -> str:
        return "UNAVAILABLE: Socket closed"


def streaming_user(responses: list[Any], **target_changes: Any) -> tuple[TritonStreamUser, FakeStream]:
    cls = user_class_for(square_target(**target_changes), Path("."))
    assert issubclass(cls, TritonStreamUser)
    environment = Environment()
    cls.wiring_in(environment).fit = model_fit(cls.target, (square_metadata(), square_config()))  # as a run fits it
    user = cls(environment)
    stream = FakeStream(responses)
    user._final_parameter = empty_final_parameter_bytes()
    user._stream = stream  # type: ignore[assignment]
    user._expected = None
    user._sequences = None
    user.next_request = lambda: (0, b"request")  # type: ignore[method-assign]
    return user, stream


def test_the_empty_final_parameter_appended_to_a_serialized_request_merges_into_it() -> None:
    target = square_target()
    request = infer_request(target.model, "", [(target.inputs[0], np.array([N], dtype=np.int32))], target.outputs)
    merged = service_pb2.ModelInferRequest.FromString(request.SerializeToString() + empty_final_parameter_bytes())
    assert merged.parameters[EMPTY_FINAL_PARAMETER].bool_param is True
    assert (
        merged.model_name == "square_int32"
        and merged.inputs[0].name == "IN"
        and merged.raw_input_contents == request.raw_input_contents
    )


@pytest.mark.parametrize(
    ("response", "final"),
    [
        (data_response(final=False), False),
        (data_response(final=True), True),
        (final_response(), True),
        (error_response("model failed", final=False), False),
        (error_response("model failed", final=True), True),
        (error_response("unexpected shape for input 'IN'", final=None), True),  # refused before the model: no flag
    ],
)
def test_which_response_ends_its_request(response: Any, final: bool) -> None:
    assert is_final(response) is final


def test_a_request_reads_every_response_up_to_the_final_one_and_times_them() -> None:
    user, stream = streaming_user([*(data_response() for _ in range(N)), final_response()])
    assert user.send() == 4 * N
    assert stream.sent == [b"request" + empty_final_parameter_bytes()]
    context = user.call_context()
    assert context is not None
    timing = context["stream"]
    assert timing.responses == N and len(timing.gaps_ms) == N - 1 and timing.first_response_ms is not None
    assert timing.first_response_ms >= 0 and all(gap >= 0 for gap in timing.gaps_ms)


def test_a_model_that_answers_nothing_ends_with_zero_responses() -> None:
    user, _ = streaming_user([final_response()])
    assert user.send() == 0
    context = user.call_context()
    assert context is not None and context["stream"].responses == 0 and context["stream"].first_response_ms is None


def test_an_error_response_fails_its_request_after_its_last_response_and_the_stream_goes_on() -> None:
    first = [data_response(), error_response("model failed: out of tea", final=False), data_response(), final_response()]
    user, stream = streaming_user([*first, data_response(final=True)])
    with pytest.raises(InferenceServerException, match="out of tea"):
        user.send()
    assert user.call_context() is None  # a failed request's timing is not kept
    assert user._stream is stream and not stream.closed  # every response of the request was read
    assert user.send() == 4  # the next request gets its own response, not a stale one
    context = user.call_context()
    assert context is not None and context["stream"].responses == 1


def test_a_response_of_the_wrong_shape_fails_the_request_with_response_check_shape() -> None:
    user, stream = streaming_user([data_response(shape=(2,)), final_response()], response_check="shape")
    with pytest.raises(BadOutputShape, match="'OUT' expected \\[1\\]; got \\[2\\]"):
        user.send()
    assert not stream.closed


@pytest.mark.parametrize("ending", [StopIteration(), BrokenStream()], ids=["server-ended", "broken"])
def test_a_stream_that_ends_mid_request_is_dropped_and_the_next_call_opens_a_new_one(ending: BaseException) -> None:
    user, stream = streaming_user([data_response(), ending])
    with pytest.raises((RequestError, InferenceServerException)):
        user.send()
    assert stream.closed and user._stream is None


def test_a_decoupled_model_makes_grpc_users_stream_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    streamed = user_class_for(square_target(), Path("."))
    unary = user_class_for(square_target(), Path("."))
    assert issubclass(streamed, TritonStreamUser) and issubclass(unary, TritonStreamUser)

    fits: dict[type, ModelFit] = {}

    def fitted(cls: type[TritonStreamUser], decoupled: bool) -> None:
        infos = ModelInfos({"square": (square_metadata(), square_config(decoupled=decoupled))}, fetch=lambda target: ({}, {}))
        found = start_check(cls, StartContext(infos, Path("."), check=False))
        assert found.fit is not None and found.fit.decoupled is decoupled
        fits[cls] = found.fit

    with caplog.at_level(logging.INFO):
        fitted(streamed, True)
        fitted(unary, False)
    assert streamed.streams(fits[streamed]) and not unary.streams(fits[unary])
    assert not streamed.streams(ModelFit()) and TritonGrpcUser.streams(fits[streamed]) is False  # unary: never
    assert "target 'square': model 'square_int32' is decoupled" in caplog.text


def test_decoupled_is_read_from_every_form_of_the_config() -> None:
    assert triton_model_decoupled(square_config(True))
    assert triton_model_decoupled({"config": square_config(True)})  # the gRPC client's JSON wraps it
    assert not triton_model_decoupled(square_config(False))
    assert not triton_model_decoupled({"name": "cnn", "max_batch_size": 8})


def test_a_decoupled_model_on_triton_http_is_a_start_problem_and_on_grpc_is_not() -> None:
    (problem,) = check_target_against_triton(square_target("triton-http"), square_metadata(), square_config())
    assert problem.startswith("target 'square': the model 'square_int32' is decoupled")
    assert "use kind: triton-grpc" in problem
    assert check_target_against_triton(square_target(), square_metadata(), square_config()) == []
    assert check_target_against_triton(square_target("triton-http"), square_metadata(), square_config(False)) == []


class SilentStream(FakeStream):
    """A stream on which the final response never comes."""

    def next_response(self) -> Any:
        gevent.sleep(5)
        raise AssertionError("the timeout should have ended the wait")


def test_a_request_whose_final_response_does_not_come_in_time_times_out_and_drops_the_stream() -> None:
    user, _ = streaming_user([], timeout=0.05)
    silent = SilentStream([])
    user._stream = silent  # type: ignore[assignment]
    with pytest.raises(RequestTimeout, match=r"no final response from 127\.0\.0\.1:1 in time"):
        user.send()
    assert silent.closed and user._stream is None  # its late responses go with the stream
