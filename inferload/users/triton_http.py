"""Triton over HTTP/REST (tritonclient.http, built on geventhttpclient: native under Locust).

Each distinct request's body (JSON header + binary tensors, from tritonclient's own
``generate_request_body``) is built once per process and target (``users.request_pool``); a call
picks the next one and posts it through the tritonclient client (so its TLS settings apply),
instead of ``infer()``, which rebuilds the body on every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import tritonclient.http as httpclient
from tritonclient.http._utils import _raise_if_error

from inferload.scenario.headers import request_headers
from inferload.users.base import InferenceUser
from inferload.users.engine import NativeTarget
from inferload.users.expected import expected_check_of, http_outputs
from inferload.users.failures import check_output_shape
from inferload.users.request_pool import RequestData
from inferload.users.sequence import http_body_with_sequence, native_sequence, user_sequences
from inferload.users.tls import http_tls_options, native_tls
from inferload.users.trace_ids import http_body_with_id


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


class TritonHttpUser(InferenceUser):
    abstract = True
    target_kinds = ("triton-http",)
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
    def native_target(cls) -> NativeTarget:
        """The engine's HTTP target: each pre-built body with its JSON header's length, Triton's answer checks."""
        target = cls.target
        headers = request_headers(target.name, target.headers, target.headers_from_env, target.token_file, cls.scenario_dir)
        pool = cls.request_pool_of_class
        assert pool is not None  # native_target_id encodes the pool first
        path = "/" + infer_uri(target.model, target.version or "")
        requests: list[Any] = []
        for request in pool.encoded_requests:
            own = [("Inference-Header-Content-Length", str(request.json_size))] if request.json_size is not None else []
            requests.append((path, request.body, own))
        shapes = cls.expected_outputs if target.response_check == "shape" else {}
        scheme = "https" if target.tls is not None else "http"
        return NativeTarget(
            protocol="http",
            address=f"{scheme}://{_host_port(target.address)}",
            requests=requests,
            check={
                "status": "2xx" if target.response_check == "none" else "200",
                "detail": {"json_keys": ["error"], "chars": 160},
                "answer": "triton_http",
                "shapes": {name: list(dims) for name, dims in shapes.items()},
            },
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
            sequence=native_sequence(cls.sequence_settings),
        )

    def connect(self) -> None:
        target = self.target
        tls = http_tls_options(target.tls, self.scenario_dir, target.name) if target.tls is not None else {}
        self._client = httpclient.InferenceServerClient(
            url=_host_port(target.address),
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
            ssl=target.tls is not None,
            **tls,
        )
        self._expected = expected_check_of(type(self))  # response_check: expected (file read once per process)
        self._outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in target.outputs] or None
        self._version = target.version or ""
        self._sequences = user_sequences(self.sequence_settings, target.sequence)  # None unless a sequence model
        self.request_pool()  # this process's requests of the target, encoded once (by its first user)
        self._uri = infer_uri(target.model, self._version)
        self._headers = (
            request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir) or None
        )

    def send(self) -> int:
        result = self._post_next()
        size = 0
        shapes = self.expected_outputs_now() if self.target.response_check == "shape" else None
        for output in result.get_response().get("outputs", []):
            expected = shapes.get(output["name"]) if shapes is not None else None
            if expected is not None:
                check_output_shape(output["name"], tuple(output["shape"]), expected)
            size += int(output.get("parameters", {}).get("binary_data_size", 0))
        if self._expected is not None:  # only this check decodes the answer
            samples = self.request_pool().samples(self._request_index)
            self._expected.arrays(http_outputs(result), samples)
        return size

    def _post_next(self) -> httpclient.InferResult:
        """Post the next pre-built body as it is (a pick; nothing is encoded)."""
        self._request_index, request = self.next_request()  # the index: which samples an expected check compares
        body, json_size = request.body, request.json_size
        if self._sequences is not None:  # the step's ID and flags go in the JSON header (only it is re-encoded)
            body, json_size = http_body_with_sequence(body, json_size, self._sequences.next_step())
        traced = self.trace_records
        if traced is not None:  # the trace join: an id in the JSON header, the times kept
            number, request_id = traced.next_id()
            body, json_size = http_body_with_id(body, json_size, request_id)
        headers = dict(self._headers) if self._headers else {}
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = str(json_size)
        sent_ns = time.monotonic_ns()
        try:
            response = self._client._post(self._uri, body, headers, None)
            _raise_if_error(response)
        except Exception:
            if self._sequences is not None:  # no answer, or the server's error: that sequence starts afresh
                self._sequences.abandon()
            raise
        if traced is not None:
            traced.add(number, sent_ns, time.monotonic_ns())
        return httpclient.InferResult(response, False)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None
