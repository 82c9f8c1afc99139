"""TorchServe over REST: `POST /predictions/<model>[/<version>]` with geventhttpclient.

The bodies (per the target's `content_type`: raw array bytes, .npy, JSON with an optional
``body_template``, a data set's files as they are, UTF-8 text; see `inferload.users.torchserve_body`)
are encoded once per process, up front, one per distinct request of the target's request pool, and
each call sends the next one (`next_request()`). What counts as a success is the target's
``response_check``: ``status`` (the default) takes any HTTP 200 without reading the body, since
real handlers answer a bare number, an object, text or bytes; ``none`` takes any 2xx; ``shape``
wants a JSON list with one entry per item in the request (what the sample handler answers), and a
failure then says what came instead; ``expected`` compares the answer with its samples' own.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from inferload.scenario.datasets import dataset_path
from inferload.scenario.headers import request_headers
from inferload.scenario.targets import Target
from inferload.users.base import InferenceUser
from inferload.users.expected import expected_check_of
from inferload.users.http_answer import check_list_answer, close_client, json_error_detail, post_for_answer
from inferload.users.request_pool import RequestData
from inferload.users.tls import http_tls_options
from inferload.users.torchserve_body import BodyError, encode_body, header_media_type


class TorchServeRestUser(InferenceUser):
    abstract = True
    request_type = "REST"
    #: the Content-Type of the target's bodies (worked out once per process, by its first user)
    content_type_of_class: ClassVar[str | None] = None

    def connect(self) -> None:
        target = self.target
        url = URL(target.address if "://" in target.address else f"http://{target.address}")
        tls = http_tls_options(target.tls, self.scenario_dir, target.name) if target.tls is not None else {}
        self._client = HTTPClient.from_url(
            url,
            concurrency=1,
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
            **tls,  # an https:// address (the target's tls): CA, client certificate, server name
        )
        self._expected = expected_check_of(type(self))  # response_check: expected (file read once per process)
        path = f"/predictions/{target.model}"
        if target.version:
            path += f"/{target.version}"
        self._path = path
        self.request_pool()  # the first user of the target in this process encodes every request here
        # the target's own headers (its token, its secrets from the environment) may set Content-Type too
        self._headers = {
            "Content-Type": self._content_type(),
            **request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir),
        }

    def _content_type(self) -> str:
        cls = type(self)
        value = cls.__dict__.get("content_type_of_class")
        if value is None:
            value = cls.content_type_of_class = content_type_header(cls.target, cls.scenario_dir)
        return str(value)

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        """One request's body (up front); a sample that cannot travel so names the target and request."""
        target = cls.target
        try:
            return encode_body(target.content_type or "octet-stream", [array for _, array in data.arrays], target.body_template)
        except BodyError as error:
            samples = f" (samples {list(data.samples)})" if data.samples else ""
            raise BodyError(f"target {target.name!r}: request {data.index}{samples}: {error}") from None

    def send(self) -> int:
        index, request_body = self.next_request()  # a pick: encoded up front (the index names its samples)
        body = post_for_answer(self._client, self._path, request_body, self._headers, self.target.response_check, _detail)
        check_list_answer(body, self.target, self._expected, self.request_pool(), index)
        return len(body)

    def close(self) -> None:
        close_client(self)


def content_type_header(target: Target, scenario_dir: Path) -> str:
    """The Content-Type the target's bodies carry: its ``media_type``; for a raw body without one, the
    type the suffixes of its folder's files agree on (``mimetypes``); else the content_type's default."""
    content_type = target.content_type or "octet-stream"  # validation fills it in for TorchServe targets
    names: list[str] = []
    if content_type == "raw" and target.media_type is None and target.inputs[0].data.dataset is not None:
        data = target.inputs[0].data
        folder = dataset_path(data, scenario_dir)
        names = [p.name for p in folder.glob(data.pattern or "*") if p.is_file() and not p.name.startswith(".")]
    return header_media_type(content_type, target.media_type, names)


def _detail(body: bytes) -> str:
    """TorchServe's error JSON has a 'message'; keep the first line, no per-request ids."""
    return json_error_detail(body, "message")
