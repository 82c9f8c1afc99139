"""Triton over gRPC: Triton's `ModelInfer` called through a raw gRPC method handle.

The request (`ModelInferRequest`, tensors as raw bytes, the way tritonclient.grpc builds it) is
built and serialized once per user; each call sends those bytes as they are. Measured by
`make bench` (docs/benchmarks.md): tritonclient's `infer()` rebuilds, copies and serializes the
whole request on every call. Failures are raised as tritonclient's `InferenceServerException`
(gRPC status and message), exactly as tritonclient raises them.

gRPC under gevent needs `grpc.experimental.gevent.init_gevent()` before any channel is made;
the locustfile does that at import. Each user closes its channel in `on_stop`, or a headless
run prints its summary and then never exits.
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import serialize_byte_tensor

from inferload.scenario.headers import request_headers
from inferload.scenario.targets import InputSpec
from inferload.users.base import InferenceUser
from inferload.users.failures import check_output_shape

MAX_GRPC_MESSAGE_SIZE = 2**31 - 1  # what tritonclient.grpc allows both ways
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
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


class TritonGrpcUser(InferenceUser):
    abstract = True
    request_type = "gRPC"

    def connect(self) -> None:
        target = self.target
        # the target's headers go as gRPC metadata (keys in lower case, as gRPC requires)
        headers = request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir)
        self._metadata = tuple((name.lower(), value) for name, value in headers.items()) or None
        self._channel = grpc.insecure_channel(target.address, options=CHANNEL_OPTIONS)
        request = infer_request(target.model, target.version or "", self.input_arrays(), target.outputs)
        self._request_bytes = request.SerializeToString()  # encoded once, sent as is by every call
        # request_serializer None: the bytes above go on the wire unchanged
        self._model_infer = self._channel.unary_unary(
            MODEL_INFER_METHOD,
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )

    def send(self) -> int:
        try:
            response = self._model_infer(self._request_bytes, timeout=self.target.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise get_error_grpc(exc) from None
        if self.expected_outputs and self.target.response_check == "shape":
            for output in response.outputs:
                expected = self.expected_outputs.get(output.name)
                if expected is not None:
                    check_output_shape(output.name, tuple(output.shape), expected)
        return sum(len(raw) for raw in response.raw_output_contents)

    def close(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            channel.close()
            self._channel = None
