"""TorchServe over REST: `POST /predictions/<model>[/<version>]` with geventhttpclient.

The body (raw float32 bytes, .npy or JSON, per the target's `content_type`) is encoded once per
user. What counts as a success is the target's ``response_check``: ``status`` (the default) takes
any HTTP 200 without reading the body, since real handlers answer a bare number, an object, text
or bytes; ``none`` takes any 2xx; ``shape`` wants a JSON list with one entry per item in the request
(what the sample handler answers), and a failure then says what came instead.
"""

from __future__ import annotations

import json

from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from inferload.errors import HttpStatusError
from inferload.scenario.headers import request_headers
from inferload.users.base import InferenceUser
from inferload.users.failures import check_json_list
from inferload.users.payload import encode_json, encode_npy, encode_octet_stream

CONTENT_TYPES = {
    "octet-stream": "application/octet-stream",
    "npy": "application/x-npy",
    "json": "application/json",
}


class TorchServeRestUser(InferenceUser):
    abstract = True
    request_type = "REST"

    def connect(self) -> None:
        target = self.target
        url = URL(target.address if "://" in target.address else f"http://{target.address}")
        self._client = HTTPClient.from_url(
            url,
            concurrency=1,
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
        )
        path = f"/predictions/{target.model}"
        if target.version:
            path += f"/{target.version}"
        self._path = path
        arrays = [array for _, array in self.input_arrays()]
        content_type = target.content_type or "octet-stream"  # validation fills it in for TorchServe targets
        self._body = _encode(content_type, arrays)
        # the target's own headers (its token, its secrets from the environment) may set Content-Type too
        self._headers = {
            "Content-Type": CONTENT_TYPES[content_type],
            **request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir),
        }

    def send(self) -> int:
        response = self._client.post(self._path, body=self._body, headers=self._headers)
        try:
            body = response.read()
        finally:
            response.release()
        check = self.target.response_check
        accepted = 200 <= response.status_code < 300 if check == "none" else response.status_code == 200
        if not accepted:
            raise HttpStatusError(response.status_code, _detail(body))
        if check == "shape":
            check_json_list(body, self.target.batch_size)
        return len(body)

    def close(self) -> None:
        client: HTTPClient | None = getattr(self, "_client", None)
        if client is not None:
            client.close()
            del self._client


def _encode(content_type: str, arrays: list) -> bytes:
    if content_type == "octet-stream":
        return encode_octet_stream(arrays)
    if len(arrays) != 1:
        raise ValueError(f"content_type {content_type!r} carries exactly one input")
    return encode_npy(arrays[0]) if content_type == "npy" else encode_json(arrays[0])


def _detail(body: bytes) -> str:
    """TorchServe's error JSON has a 'message'; keep the first line, no per-request ids."""
    try:
        message = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        message = body[:120].decode("utf-8", "replace")
    return str(message).splitlines()[0][:120] if message else ""
