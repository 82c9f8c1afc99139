"""TorchServe over REST: `POST /predictions/<model>[/<version>]` with geventhttpclient.

The bodies (per the target's `content_type`: raw array bytes, .npy, JSON with an optional
``body_template``, a data set's files as they are, UTF-8 text; see `encode_body` below)
are encoded once per process, up front, one per distinct request of the target's request pool, and
each call sends the next one (`next_request()`). What counts as a success is the target's
``response_check``: ``status`` (the default) takes any HTTP 200 without reading the body, since
real handlers answer a bare number, an object, text or bytes; ``none`` takes any 2xx; ``shape``
wants a JSON list with one entry per item in the request (what the sample handler answers), and a
failure then says what came instead; ``expected`` compares the answer with its samples' own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath
from typing import Any, ClassVar

import numpy as np

from inferload.errors import HttpStatusError, SequenceRefused
from inferload.scenario.bodies import DEFAULT_MEDIA_TYPES, fill_template, guess_media_type
from inferload.scenario.datasets import dataset_file_names
from inferload.scenario.kinds import kinds_spoken_by
from inferload.scenario.targets import Target, TorchServeTarget
from inferload.users.base import InferenceUser, ModelFit
from inferload.users.engine import NativeTarget
from inferload.users.expected import ExpectedCheck, expected_check_of
from inferload.users.failures import Reason
from inferload.users.http_answer import (
    DETAIL_CHARS,
    check_list_answer,
    close_client,
    open_client,
    post_for_answer,
)
from inferload.users.payload import encode_json, encode_npy, encode_octet_stream
from inferload.users.request_pool import RequestData, RequestPool
from inferload.users.sequence import (
    UserSequences,
    native_sequence,
    torchserve_sequence_headers,
    torchserve_sequence_settings,
    torchserve_user_sequences,
)
from inferload.users.tls import native_tls


# TorchServe request bodies: one request's input arrays → the bytes on the wire and their
# Content-Type. Pure functions, called once per distinct request, up front (never per call).
#
# | content_type | body |
# |---|---|
# | octet-stream | raw C-order bytes of each input, concatenated (BYTES: 4-byte little-endian length + bytes) |
# | npy | the one input in ``.npy`` format |
# | json | the one input as a nested JSON list; with ``body_template`` that list replaces each ``$data`` |
# | raw | the one sample's bytes as they are (a file of a folder data set: ``curl -T digit.png``) |
# | text | the one BYTES input's elements as UTF-8 text, joined by a newline |
#
# A sample that cannot travel as asked (raw: more than one element; text: bytes that are not UTF-8)
# raises ``BodyError``, which names the sample when the caller knows it.
class BodyError(ValueError):
    """A request's data cannot be sent as the target's body."""


def encode_raw(array: np.ndarray) -> bytes:
    """One sample's bytes as they are: a BYTES element, or a numeric array's raw bytes (a UINT8 file)."""
    if array.dtype == object:
        elements = array.reshape(-1)
        if elements.size != 1:
            raise BodyError(f"a raw body is one sample's bytes; this request holds {elements.size} elements")
        item = elements[0]
        return bytes(item) if isinstance(item, (bytes, bytearray)) else str(item).encode()
    return np.ascontiguousarray(array).tobytes()


def encode_text(array: np.ndarray) -> bytes:
    """Every BYTES element in C order, each UTF-8 text, joined by a newline."""
    if array.dtype != object:
        raise BodyError(f"a text body takes BYTES elements; this input holds {array.dtype} numbers")
    lines: list[bytes] = []
    for position, item in enumerate(array.reshape(-1)):
        value = bytes(item) if isinstance(item, (bytes, bytearray)) else str(item).encode()
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BodyError(
                f"element {position} is not UTF-8 text (byte {error.start}: {value[error.start : error.start + 4]!r})"
            ) from None
        lines.append(value)
    return b"\n".join(lines)


def encode_json_body(array: np.ndarray, template: str | None = None) -> bytes:
    """The array as a nested JSON list, or ``template`` with each ``$data`` replaced by that list."""
    data = encode_json(array)
    if template is None:
        return data
    return fill_template(template, data.decode()).encode()


def encode_body(content_type: str, arrays: Sequence[np.ndarray], template: str | None = None) -> bytes:
    """The body of one request: ``arrays`` are its inputs in scenario order, batch dimension first."""
    if content_type == "octet-stream":
        return encode_octet_stream(arrays)
    if len(arrays) != 1:
        raise BodyError(f"content_type {content_type!r} sends one input; this target has {len(arrays)}")
    (array,) = arrays
    if content_type == "npy":
        return encode_npy(array)
    if content_type == "json":
        return encode_json_body(array, template)
    if content_type == "raw":
        return encode_raw(array)
    if content_type == "text":
        return encode_text(array)
    raise BodyError(f"unknown content_type {content_type!r}")


def header_media_type(content_type: str, media_type: str | None, file_names: Iterable[str | PurePath] = ()) -> str:
    """The Content-Type header: ``media_type`` when given; for raw bodies the type ``mimetypes``
    guesses from the data set's file names when they all agree; else the content_type's default."""
    if media_type is not None:
        return media_type
    if content_type == "raw":
        return guess_media_type(file_names)
    return DEFAULT_MEDIA_TYPES[content_type]


class TorchServeRestUser(InferenceUser):
    abstract = True
    target: ClassVar[TorchServeTarget]
    target_kinds = kinds_spoken_by("TorchServeRestUser")
    request_type = "REST"
    native_sequences = True
    #: a stateful model's sequence ids of this user (the target's ``sequence``; made in ``connect``)
    _sequences: UserSequences | None = None

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's HTTP target: the pre-encoded bodies, TorchServe's status rule and list check."""
        target = cls.target
        headers = {
            "Content-Type": content_type_header(target, cls.scenario_dir),
            **target.request_headers(cls.scenario_dir),
        }
        return NativeTarget(
            protocol="http",
            address=target.address if "://" in target.address else f"http://{target.address}",
            requests=[(predictions_path(target), body, []) for body in pool.encoded_requests],
            check=native_list_check(target, TORCHSERVE_REASON),
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
            sequence=native_sequence(torchserve_sequence_settings(target.sequence), headers=True),
        )

    def connect(self) -> None:
        target = self.target
        self._client = open_client(target, self.scenario_dir)
        self._expected = expected_check_of(self)  # response_check: expected (file read once per process)
        self._path = predictions_path(target)
        self.request_pool()  # the first user of the target in this process encodes every request here
        # the target's own headers (its token, its secrets from the environment) may set Content-Type too
        self._headers = {
            "Content-Type": content_type_header(target, self.scenario_dir),
            **target.request_headers(self.scenario_dir),
        }
        self._sequences = torchserve_user_sequences(target.sequence)  # a stateful model: this user's sequence ids

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        """One request's body (up front); a sample that cannot travel so names the target and request."""
        target = cls.target
        try:
            return encode_body(target.content_type, [array for _, array in data.arrays], target.body_template)
        except BodyError as error:
            samples = f" (samples {list(data.samples)})" if data.samples else ""
            raise BodyError(f"target {target.name!r}: request {data.index}{samples}: {error}") from None

    def send(self) -> int:
        index, request_body = self.next_request()  # a pick: encoded up front (the index names its samples)
        headers = self._headers
        if self._sequences is not None:  # the call's sequence id (and end flag) in TorchServe's headers
            headers = {**headers, **torchserve_sequence_headers(self._sequences.next_step())}
        try:
            body = post_for_answer(
                self._client,
                self._path,
                request_body,
                headers,
                self.target.response_check,
                TORCHSERVE_REASON.of,
                self.target.max_answer_bytes,
            )
        except HttpStatusError as error:
            if self._sequences is not None and error.status == 503 and self._sequences.opened:
                # a new sequence refused: the server still holds its old ones; open the same one again, later
                self._sequences.open_again()
                raise SequenceRefused(error.status, error.detail) from None
            if self._sequences is not None:
                self._sequences.abandon()
            raise
        except Exception:
            if self._sequences is not None:  # no answer, or the server's error: that sequence starts afresh
                self._sequences.abandon()
            raise
        check_list_answer(body, self.target, self._expected, self.request_pool(), index, self.request_batch())
        return len(body)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.body(answer, samples)

    def close(self) -> None:
        close_client(self)


#: TorchServe's error JSON has a ``message`` (its reason for refusing a sequence comes after its first 120 characters)
TORCHSERVE_REASON = Reason(("message",), DETAIL_CHARS)


def predictions_path(target: Target) -> str:
    """``/predictions/<model>[/<version>]``."""
    return f"/predictions/{target.model}" + (f"/{target.version}" if target.version else "")


def native_list_check(target: Target, reason: Reason) -> dict[str, Any]:
    """The engine's check of a TorchServe or BentoML answer: the status rule, the reason, the list."""
    check: dict[str, Any] = {
        "status": "2xx" if target.response_check == "none" else "200",
        "detail": reason.engine_check(),
        "answer": "none",
    }
    if target.response_check == "shape":
        check.update(answer="json_list", length=target.batch_size)
    return check


def content_type_header(target: TorchServeTarget, scenario_dir: Path) -> str:
    """The Content-Type the target's bodies carry: its ``media_type``; for a raw body without one, the
    type the suffixes of its folder's files agree on (``mimetypes``); else the content_type's default."""
    content_type = target.content_type
    names: list[str] = []
    if content_type == "raw" and target.media_type is None and target.inputs[0].data.dataset is not None:
        data = target.inputs[0].data
        names = list(dataset_file_names(data, scenario_dir))
    return header_media_type(content_type, target.media_type, names)
