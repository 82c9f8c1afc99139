"""The trace join's request id on a streamed request (a decoupled model over `ModelStreamInfer`): the
id goes on the request the way the unary user puts it, and the client's times run from the send to
the final response (no server)."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2

from inferload.measure.trace_join import ClientTraceRecords
from inferload.users.triton import EMPTY_FINAL_PARAMETER, empty_final_parameter_bytes, grpc_id_field, infer_request
from tests.unit.test_decoupled_user import N, data_response, error_response, final_response, square_target, streaming_user


def traced(user: object) -> ClientTraceRecords:
    records = ClientTraceRecords(prefix="ab12")
    records.start(0.0)
    user.wiring.trace_records = records  # type: ignore[attr-defined]  # as a traced run wires it
    return records


def test_a_streamed_request_carries_its_id_and_its_times_end_at_the_final_response() -> None:
    user, stream = streaming_user([*(data_response() for _ in range(N)), final_response()])
    records = traced(user)
    target = square_target()
    encoded = infer_request(target.model, "", [(target.inputs[0], np.array([N], dtype=np.int32))], target.outputs)
    user.next_request = lambda: (0, encoded.SerializeToString())  # type: ignore[method-assign]
    assert user.send() == 4 * N
    (sent,) = stream.sent
    request = service_pb2.ModelInferRequest.FromString(sent)
    assert request.id == "ab12-1"  # the id merged into the pre-encoded request
    assert request.parameters[EMPTY_FINAL_PARAMETER].bool_param is True and request.model_name == "square_int32"
    assert sent.startswith(encoded.SerializeToString() + empty_final_parameter_bytes())  # nothing re-encoded
    (timing,) = records.timings().values()
    context = user.call_context()
    assert context is not None
    first = context["stream"].first_response_ms
    assert timing.request_id == "ab12-1" and timing.latency_ms >= first + sum(context["stream"].gaps_ms) - 1e-6
    user.wiring.trace_records = None


def test_a_failed_streamed_request_is_not_kept_and_the_next_one_gets_the_next_id() -> None:
    user, stream = streaming_user([error_response("model failed", final=True), data_response(final=True)])
    records = traced(user)
    try:
        user.send()
    except Exception as exc:  # the failure is the request's, as without tracing
        assert "model failed" in str(exc)
    else:
        raise AssertionError("the error response did not fail its request")
    assert records.timings() == {}
    assert user.send() == 4
    assert list(records.timings()) == ["ab12-2"]
    assert [s.removeprefix(b"request" + empty_final_parameter_bytes()) for s in stream.sent] == [
        grpc_id_field("ab12-1"),
        grpc_id_field("ab12-2"),
    ]
    user.wiring.trace_records = None
