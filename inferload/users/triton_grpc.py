"""Triton over gRPC: Triton's `ModelInfer` called through a raw gRPC method handle.

The requests (`ModelInferRequest`, tensors as raw bytes, the way tritonclient.grpc builds them) are
built and serialized once per process and target (`users.request_pool`); each call picks the next
one and sends its bytes as they are. Measured by
`make bench` (docs/benchmarks.md): tritonclient's `infer()` rebuilds, copies and serializes the
whole request on every call. Failures are raised as tritonclient's `InferenceServerException`
(gRPC status and message), exactly as tritonclient raises them.

gRPC under gevent needs `grpc.experimental.gevent.init_gevent()` before any channel is made;
the locustfile does that at import. Each user closes its channel in `on_stop`, or a headless
run prints its summary and then never exits.

This is the Python transport: each call blocks its greenlet through gRPC's gevent integration.
The native engine (`inferload.users.engine`) makes the same calls from the same pre-encoded bytes
(`native_target`) without Python when the extension is built.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import serialize_byte_tensor

from inferload.scenario.headers import request_headers
from inferload.scenario.targets import InputSpec
from inferload.scenario.tls import TlsSettings
from inferload.users.base import InferenceUser
from inferload.users.engine import NativeTarget
from inferload.users.expected import expected_check_of, grpc_outputs
from inferload.users.failures import check_output_shape
from inferload.users.request_pool import RequestData
from inferload.users.sequence import native_sequence, user_sequences
from inferload.users.tls import grpc_credentials, native_tls
from inferload.users.trace_ids import grpc_id_field

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


def open_channel(address: str, tls: TlsSettings | None, base_dir: Path, target: str) -> grpc.Channel:
    """A plain channel, or a TLS one (``grpc.secure_channel``) when the target has ``tls``."""
    if tls is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    credentials, options = grpc_credentials(tls, base_dir, target)
    return grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS + options)


class TritonGrpcUser(InferenceUser):
    abstract = True
    target_kinds = ("triton-grpc",)
    request_type = "gRPC"
    native_sequences = True

    def connect(self) -> None:
        target = self.target
        # the target's headers go as gRPC metadata (keys in lower case, as gRPC requires)
        headers = request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir)
        self._metadata = tuple((name.lower(), value) for name, value in headers.items()) or None
        self._channel = open_channel(target.address, target.tls, self.scenario_dir, target.name)
        self._expected = expected_check_of(type(self))  # response_check: expected (file read once per process)
        # this process's requests of the target, encoded once (by its first user); send() picks from them
        self.request_pool()
        self._sequences = user_sequences(self.sequence_settings, target.sequence)  # None unless a sequence model
        # request_serializer None: the pool's bytes go on the wire unchanged
        self._model_infer: Any = self._channel.unary_unary(
            MODEL_INFER_METHOD,
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )

    @classmethod
    def native_target(cls) -> NativeTarget:
        """The engine's gRPC target: the pool's serialized requests, the output shapes to check."""
        target = cls.target
        headers = request_headers(target.name, target.headers, target.headers_from_env, target.token_file, cls.scenario_dir)
        check: dict[str, Any] = {"answer": "none"}
        if cls.expected_outputs and target.response_check == "shape":
            check = {"answer": "grpc_shapes", "shapes": {name: list(dims) for name, dims in cls.expected_outputs.items()}}
        pool = cls.request_pool_of_class
        assert pool is not None  # native_target_id encodes the pool first
        return NativeTarget(
            protocol="grpc",
            address=target.address,
            requests=list(pool.encoded_requests),
            check=check,
            headers=[(name.lower(), value) for name, value in headers.items()],
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
            sequence=native_sequence(cls.sequence_settings),
            stream=bool(getattr(cls, "decoupled", False)),
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
        traced = self.trace_records
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
        if self.expected_outputs and self.target.response_check == "shape":
            shapes = self.expected_outputs_now()
            for output in response.outputs:
                expected = shapes.get(output.name)
                if expected is not None:
                    check_output_shape(output.name, tuple(output.shape), expected)
        if self._expected is not None:  # only this check decodes the answer
            self._expected.arrays(grpc_outputs(response), self.request_pool().samples(index))
        return sum(len(raw) for raw in response.raw_output_contents)

    def close(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            channel.close()
            self._channel = None
