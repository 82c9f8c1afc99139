"""BentoML over HTTP: ``POST /<api>`` (the target's ``model`` is the API's name) with geventhttpclient.

The bodies (``content_type: json``, the default: one JSON field per input; ``raw``: a data set's
file as multipart/form-data; see `inferload.users.bentoml_body`) are encoded once per process, up
front, one per distinct request of the target's request pool. What counts as a success is the
target's ``response_check``: ``status`` (the default) takes any HTTP 200 without reading further;
``none`` any 2xx; ``shape`` wants a JSON list with one entry per item in the request (what a
batchable API returning an array answers); ``expected`` compares the answer with its samples' own.
The response size reported is the body's real length. BentoML answers 503 when its adaptive
batching expects to miss the API's ``max_latency_ms``: that is a failure (HTTP 503), as any other.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import ClassVar

from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from inferload.scenario.bodies import guess_media_type
from inferload.scenario.datasets import dataset_path
from inferload.scenario.headers import request_headers
from inferload.scenario.targets import Target
from inferload.users.base import InferenceUser
from inferload.users.bentoml_body import BentoMLBody, encode_bentoml_body
from inferload.users.expected import expected_check_of
from inferload.users.http_answer import check_list_answer, close_client, json_error_detail, post_for_answer
from inferload.users.request_pool import RequestData
from inferload.users.tls import http_tls_options
from inferload.users.torchserve_body import BodyError


class BentoMLHttpUser(InferenceUser):
    abstract = True
    request_type = "REST"
    #: the raw file's (name, media type) for ``content_type: raw`` (worked out once per process)
    file_part_of_class: ClassVar[tuple[str, str] | None] = None

    def connect(self) -> None:
        target = self.target
        tls = http_tls_options(target.tls, self.scenario_dir, target.name) if target.tls is not None else {}
        self._client = HTTPClient.from_url(
            URL(target.address),
            concurrency=1,
            connection_timeout=target.timeout,
            network_timeout=target.timeout,
            **tls,
        )
        self._expected = expected_check_of(type(self))
        self._path = api_path(target)
        self.request_pool()  # the first user of the target in this process encodes every request here
        # the Content-Type travels with each encoded body (a multipart boundary is per request); the target's own headers
        self._own_headers = request_headers(
            target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir
        )

    @classmethod
    def encode_request(cls, data: RequestData) -> BentoMLBody:
        """One request's body and Content-Type (up front); a sample that cannot travel so names the target and request."""
        target = cls.target
        file_name, media_type = cls._file_part()
        try:
            return encode_bentoml_body(
                target.content_type or "json",
                [spec.name for spec, _ in data.arrays],
                [array for _, array in data.arrays],
                file_name,
                media_type,
            )
        except BodyError as error:
            samples = f" (samples {list(data.samples)})" if data.samples else ""
            raise BodyError(f"target {target.name!r}: request {data.index}{samples}: {error}") from None

    @classmethod
    def _file_part(cls) -> tuple[str, str]:
        value = cls.__dict__.get("file_part_of_class")
        if value is None:
            value = cls.file_part_of_class = raw_file_part(cls.target, cls.scenario_dir)
        return value

    def send(self) -> int:
        index, request = self.next_request()
        headers = {"Content-Type": request.content_type, **self._own_headers}
        body = post_for_answer(self._client, self._path, request.body, headers, self.target.response_check, error_detail)
        check_list_answer(body, self.target, self._expected, self.request_pool(), index)
        return len(body)

    def close(self) -> None:
        close_client(self)


def api_path(target: Target) -> str:
    """``/<api>``: BentoML serves each API at its name (the target's ``model``)."""
    return "/" + target.model.strip("/")


def raw_file_part(target: Target, scenario_dir: Path) -> tuple[str, str]:
    """(file name, media type) of a raw body's form part: from the suffixes of the data set's files."""
    if target.content_type != "raw" or target.inputs[0].data.dataset is None:
        return "file", "application/octet-stream"
    data = target.inputs[0].data
    folder = dataset_path(data, scenario_dir)
    names = [p.name for p in folder.glob(data.pattern or "*") if p.is_file() and not p.name.startswith(".")]
    suffixes = {PurePath(name).suffix.lower() for name in names}
    file_name = "file" + (suffixes.pop() if len(suffixes) == 1 else "")
    return file_name, guess_media_type(names)


def error_detail(body: bytes) -> str:
    """BentoML's error JSON has an 'error'; keep its first line."""
    return json_error_detail(body, "error")
