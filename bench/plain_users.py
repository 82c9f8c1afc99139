"""Baselines written the way Locust's documentation shows, with no inferload code in the path.

- `PlainGrpcUser`: Locust's gRPC pattern (an abstract gRPC user and a client interceptor that
  fires the request event), calling Triton's `ModelInfer` through the raw stub from
  `tritonclient.grpc.service_pb2_grpc` with a request built once.
- `PlainFastHttpUser`: Locust's FastHttpUser posting the same bytes as an inferload user.

Each class is configured by class attributes that `bench.client` fills in on a subclass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import grpc
from locust import FastHttpUser, User, constant, task
from locust.env import Environment


class LocustGrpcInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Times every unary call and reports it through Locust's request event."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment

    def intercept_unary_unary(self, continuation: Callable[..., Any], client_call_details: Any, request: Any) -> Any:
        started = time.perf_counter()
        response_length = 0
        exception: BaseException | None = None
        call = continuation(client_call_details, request)
        try:
            response_length = call.result().ByteSize()
        except grpc.RpcError as exc:
            exception = exc
        self.environment.events.request.fire(
            request_type="grpc",
            name=client_call_details.method,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=response_length,
            exception=exception,
            context=None,
        )
        return call


class GrpcUser(User):
    """Abstract: a gRPC channel with the Locust interceptor and a stub of `stub_class`."""

    abstract = True
    wait_time = constant(0)
    #: host:port of the gRPC server
    grpc_address: ClassVar[str] = ""
    #: the generated stub class to call through
    stub_class: type = object  # set per user (after gevent is ready) by subclasses

    def on_start(self) -> None:
        channel = grpc.insecure_channel(self.grpc_address)
        self._channel = grpc.intercept_channel(channel, LocustGrpcInterceptor(self.environment))
        self._raw_channel = channel
        self.stub = self.stub_class(self._channel)

    def on_stop(self) -> None:
        self._raw_channel.close()


def triton_infer_request(model: str, input_name: str, array: Any) -> Any:
    """A ModelInferRequest for one FP32 input, built once (raw bytes, like tritonclient sends)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name = input_name
    tensor.datatype = "FP32"
    tensor.shape.extend(array.shape)
    request.raw_input_contents.append(array.tobytes())
    return request


class PlainTritonGrpcUser(GrpcUser):
    """Calls Triton's ModelInfer with one prebuilt request."""

    abstract = True
    #: the prebuilt ModelInferRequest
    infer_request: ClassVar[Any] = None
    timeout_s: ClassVar[float] = 5.0

    def on_start(self) -> None:
        from tritonclient.grpc import service_pb2_grpc

        self.stub_class = service_pb2_grpc.GRPCInferenceServiceStub
        super().on_start()

    @task
    def infer(self) -> None:
        self.stub.ModelInfer(self.infer_request, timeout=self.timeout_s)


class PlainFastHttpUser(FastHttpUser):
    """POSTs a fixed body with fixed headers to one path."""

    abstract = True
    wait_time = constant(0)
    #: path of the POST, e.g. /predictions/identity
    post_path: ClassVar[str] = "/"
    body: ClassVar[bytes] = b""
    headers: ClassVar[dict[str, str]] = {}

    @task
    def infer(self) -> None:
        self.client.post(self.post_path, data=self.body, headers=self.headers)  # type: ignore[arg-type]  # bytes bodies work (Locust's hint is too narrow)
