"""BentoML over HTTP: ``POST /<api>`` (the target's ``model`` is the API's name) with geventhttpclient.

The bodies (``content_type: json``, the default: one JSON field per input; ``raw``: a data set's
file as multipart/form-data; see `encode_bentoml_body`) are encoded once per process, up
front, one per distinct request of the target's request pool. What counts as a success is the
target's ``response_check``: ``status`` (the default) takes any HTTP 200 without reading further;
``none`` any 2xx; ``shape`` wants a JSON list with one entry per item in the request (what a
batchable API returning an array answers); ``expected`` compares the answer with its samples' own.
The response size reported is the body's real length. BentoML answers 503 when its adaptive
batching expects to miss the API's ``max_latency_ms``: that is a failure (HTTP 503), as any other.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, ClassVar

import numpy as np

from inferload.scenario.bodies import guess_media_type
from inferload.scenario.datasets import dataset_file_names
from inferload.scenario.kinds import kinds_spoken_by
from inferload.scenario.targets import BentoMLTarget, Target
from inferload.users.base import InferenceUser, ModelFit
from inferload.users.engine import NativeTarget
from inferload.users.expected import ExpectedCheck, expected_check_of
from inferload.users.failures import Reason
from inferload.users.http_answer import DETAIL_CHARS, check_list_answer, close_client, open_client, post_for_answer
from inferload.users.request_pool import RequestData, RequestPool
from inferload.users.tls import native_tls
from inferload.users.torchserve import BodyError, encode_raw, native_list_check

# -- bentoml body ------------------------------------------------------------
# BentoML request bodies, pure: one request's arrays → the bytes and Content-Type of ``POST /<api>``.
#
# BentoML takes an API's parameters by name. ``json``: a JSON object with one field per input, the
# input's values as a nested list, batch dimension first (a batchable API splits and joins along it;
# BYTES elements as UTF-8 strings). ``raw``: the single input's file as ``multipart/form-data``, in
# the form field named after the input (BentoML's way for a ``pathlib.Path`` or image parameter),
# with the file's media type when known.


JSON_MEDIA_TYPE = "application/json"


@dataclass(frozen=True)
class BentoMLBody:
    """One encoded request: the body and its Content-Type header."""

    body: bytes
    content_type: str


def _json_values(array: np.ndarray) -> object:
    if array.dtype == object:
        return np.vectorize(
            lambda item: item.decode("utf-8", "replace") if isinstance(item, (bytes, bytearray)) else str(item),
            otypes=[object],
        )(array).tolist()
    return array.tolist()


def encode_json_fields(names: Sequence[str], arrays: Sequence[np.ndarray]) -> BentoMLBody:
    """``{"<input>": [[...], ...], ...}`` (compact JSON)."""
    if len(names) != len(arrays):
        raise BodyError(f"{len(names)} input names for {len(arrays)} arrays")
    fields = {name: _json_values(array) for name, array in zip(names, arrays, strict=True)}
    return BentoMLBody(json.dumps(fields, separators=(",", ":")).encode(), JSON_MEDIA_TYPE)


def encode_multipart_file(
    name: str, array: np.ndarray, file_name: str = "file", media_type: str = "application/octet-stream", boundary: str = ""
) -> BentoMLBody:
    """One file in form field ``name`` (``multipart/form-data``, RFC 7578)."""
    if any(ch in name + file_name for ch in '"\r\n'):
        raise BodyError(f"form field {name!r} or file name {file_name!r} holds a quote or a line break")
    boundary = boundary or uuid.uuid4().hex
    head = (
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="{name}"; filename="{file_name}"\r\n'
        f"Content-Type: {media_type}\r\n\r\n"
    ).encode()
    body = head + encode_raw(array) + f"\r\n--{boundary}--\r\n".encode()
    return BentoMLBody(body, f"multipart/form-data; boundary={boundary}")


def encode_bentoml_body(
    content_type: str, names: Sequence[str], arrays: Sequence[np.ndarray], file_name: str = "file", media_type: str | None = None
) -> BentoMLBody:
    """The body a ``bentoml-http`` target's ``content_type`` ('json' or 'raw') asks for."""
    if content_type == "json":
        return encode_json_fields(names, arrays)
    if content_type == "raw":
        if len(arrays) != 1:
            raise BodyError(f"a raw body carries one file; this request has {len(arrays)} inputs")
        return encode_multipart_file(names[0], arrays[0], file_name, media_type or "application/octet-stream")
    raise BodyError(f"a bentoml-http target sends json or raw bodies; got {content_type!r}")


class BentoMLHttpUser(InferenceUser):
    target: ClassVar[BentoMLTarget]
    abstract = True
    target_kinds = kinds_spoken_by("BentoMLHttpUser")
    request_type = "REST"

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's HTTP target: each body with its own Content-Type (a multipart boundary is per request)."""
        target = cls.target
        headers = target.request_headers(cls.scenario_dir)
        path = api_path(target)
        # the target's own headers win, as in send(): they may set Content-Type too
        own_type = any(name.lower() == "content-type" for name in headers)
        return NativeTarget(
            protocol="http",
            address=target.address,
            requests=[
                (path, request.body, [] if own_type else [("Content-Type", request.content_type)])
                for request in pool.encoded_requests
            ],
            check=native_list_check(target, BENTOML_REASON),
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
        )

    def connect(self) -> None:
        target = self.target
        self._client = open_client(target, self.scenario_dir)
        self._expected = expected_check_of(self)
        self._path = api_path(target)
        self.request_pool()  # the first user of the target in this process encodes every request here
        # the Content-Type travels with each encoded body (a multipart boundary is per request); the target's own headers
        self._own_headers = target.request_headers(self.scenario_dir)

    @classmethod
    def encode_request(cls, data: RequestData) -> BentoMLBody:
        """One request's body and Content-Type (up front); a sample that cannot travel so names the target and request."""
        target = cls.target
        file_name, media_type = raw_file_part(target, cls.scenario_dir)
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

    def send(self) -> int:
        index, request = self.next_request()
        headers = {"Content-Type": request.content_type, **self._own_headers}
        body = post_for_answer(
            self._client,
            self._path,
            request.body,
            headers,
            self.target.response_check,
            BENTOML_REASON.of,
            self.target.max_answer_bytes,
        )
        check_list_answer(body, self.target, self._expected, self.request_pool(), index, self.request_batch())
        return len(body)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.body(answer, samples)

    def close(self) -> None:
        close_client(self)


def api_path(target: Target) -> str:
    """``/<api>``: BentoML serves each API at its name (the target's ``model``)."""
    return "/" + target.model.strip("/")


def raw_file_part(target: BentoMLTarget, scenario_dir: Path) -> tuple[str, str]:
    """(file name, media type) of a raw body's form part: from the suffixes of the data set's files."""
    if target.content_type != "raw" or target.inputs[0].data.dataset is None:
        return "file", "application/octet-stream"
    data = target.inputs[0].data
    names = dataset_file_names(data, scenario_dir)
    suffixes = {PurePath(name).suffix.lower() for name in names}
    file_name = "file" + (suffixes.pop() if len(suffixes) == 1 else "")
    return file_name, guess_media_type(names)


#: BentoML's error JSON has an ``error``
BENTOML_REASON = Reason(("error",), DETAIL_CHARS)
