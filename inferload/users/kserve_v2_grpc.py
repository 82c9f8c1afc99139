"""The Open Inference Protocol (KServe v2) over gRPC: ``inference.GRPCInferenceService/ModelInfer``.

tritonclient's generated stubs (``tritonclient.grpc.service_pb2``) are the same proto package and
service (``inference.GRPCInferenceService``) as KServe's ``grpc_predict_v2.proto``: Triton's
service is the standard one plus extensions (statistics, repository control, streaming) this user
never calls. ``ModelInferRequest``/``ModelInferResponse`` carry the same field numbers, so the
Triton gRPC user's pre-serialized requests (tensors in ``raw_input_contents``) are sent unchanged.
Some servers answer in typed ``contents`` rather than ``raw_output_contents``: the reported size
is then the outputs' encoded size.
"""

from __future__ import annotations

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.grpc._utils import get_error_grpc

from inferload.users.expected import grpc_outputs
from inferload.users.failures import check_output_shape
from inferload.users.triton_grpc import TritonGrpcUser


def response_size(response: service_pb2.ModelInferResponse) -> int:
    """Bytes of the answer's tensors: raw contents, or the typed contents' encoded size."""
    raw = sum(len(chunk) for chunk in response.raw_output_contents)
    return raw if raw else sum(output.contents.ByteSize() for output in response.outputs)


def output_arrays(response: service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    """The answer's outputs decoded: raw contents as Triton sends them, typed contents as KServe does."""
    if response.raw_output_contents:
        return grpc_outputs(response)
    result = InferResult(response)
    decoded = {output.name: result.as_numpy(output.name) for output in response.outputs}
    return {name: array for name, array in decoded.items() if array is not None}


class KServeV2GrpcUser(TritonGrpcUser):
    abstract = True
    target_kinds = ("kserve-v2-grpc",)

    def send(self) -> int:
        index, request_bytes = self.next_request()
        try:
            response = self._model_infer(request_bytes, timeout=self.target.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise get_error_grpc(exc) from None
        if self.expected_outputs and self.target.response_check == "shape":
            shapes = self.expected_outputs_now()
            for output in response.outputs:
                expected = shapes.get(output.name)
                if expected is not None:
                    check_output_shape(output.name, tuple(output.shape), expected)
        if self._expected is not None:
            self._expected.arrays(output_arrays(response), self.request_pool().samples(index))
        return response_size(response)
