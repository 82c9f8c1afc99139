"""Triton over HTTP/REST (tritonclient.http, built on geventhttpclient: native under Locust)."""

from __future__ import annotations

import tritonclient.http as httpclient

from inferload.scenario.headers import request_headers
from inferload.users.base import InferenceUser
from inferload.users.failures import check_output_shape


def _host_port(address: str) -> str:
    for scheme in ("http://", "https://"):
        if address.startswith(scheme):
            return address[len(scheme) :].rstrip("/")
    return address.rstrip("/")


class TritonHttpUser(InferenceUser):
    abstract = True
    request_type = "HTTP"

    def connect(self) -> None:
        target = self.target
        self._client = httpclient.InferenceServerClient(
            url=_host_port(target.address),
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
        )
        self._inputs = []
        for spec, array in self.input_arrays():
            infer_input = httpclient.InferInput(spec.name, list(array.shape), spec.dtype)
            infer_input.set_data_from_numpy(array, binary_data=True)  # encoded once
            self._inputs.append(infer_input)
        self._outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in target.outputs] or None
        self._version = target.version or ""
        self._headers = (
            request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir) or None
        )

    def send(self) -> int:
        result = self._client.infer(
            self.target.model, self._inputs, model_version=self._version, outputs=self._outputs, headers=self._headers
        )
        size = 0
        check_shapes = self.target.response_check == "shape"
        for output in result.get_response().get("outputs", []):
            expected = self.expected_outputs.get(output["name"]) if check_shapes else None
            if expected is not None:
                check_output_shape(output["name"], tuple(output["shape"]), expected)
            size += int(output.get("parameters", {}).get("binary_data_size", 0))
        return size

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None
