"""Triton over gRPC (tritonclient.grpc).

gRPC under gevent needs `grpc.experimental.gevent.init_gevent()` before any channel is made;
the locustfile does that at import. Each user closes its client in `on_stop`, or a headless
run prints its summary and then never exits.
"""

from __future__ import annotations

import tritonclient.grpc as grpcclient

from inferload.request_errors import check_output_shape
from inferload.users.base import InferenceUser


class TritonGrpcUser(InferenceUser):
    abstract = True
    request_type = "gRPC"

    def connect(self) -> None:
        target = self.target
        self._client = grpcclient.InferenceServerClient(url=target.address)
        self._inputs = []
        for spec, array in self.input_arrays():
            infer_input = grpcclient.InferInput(spec.name, list(array.shape), spec.dtype)
            infer_input.set_data_from_numpy(array)  # encoded once, reused by every call
            self._inputs.append(infer_input)
        self._outputs = [grpcclient.InferRequestedOutput(name) for name in target.outputs] or None
        self._version = target.version or ""

    def send(self) -> int:
        result = self._client.infer(
            self.target.model,
            self._inputs,
            model_version=self._version,
            outputs=self._outputs,
            client_timeout=self.target.timeout,
        )
        response = result.get_response()
        if self.expected_outputs:
            for output in response.outputs:
                expected = self.expected_outputs.get(output.name)
                if expected is not None:
                    check_output_shape(output.name, tuple(output.shape), expected)
        return sum(len(raw) for raw in response.raw_output_contents)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

