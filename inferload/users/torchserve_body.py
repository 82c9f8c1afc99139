"""TorchServe request bodies: one request's input arrays → the bytes on the wire and their
Content-Type. Pure functions, called once per distinct request, up front (never per call).

| content_type | body |
|---|---|
| octet-stream | raw C-order bytes of each input, concatenated (BYTES: 4-byte little-endian length + bytes) |
| npy | the one input in ``.npy`` format |
| json | the one input as a nested JSON list; with ``body_template`` that list replaces each ``$data`` |
| raw | the one sample's bytes as they are (a file of a folder data set: ``curl -T digit.png``) |
| text | the one BYTES input's elements as UTF-8 text, joined by a newline |

A sample that cannot travel as asked (raw: more than one element; text: bytes that are not UTF-8)
raises ``BodyError``, which names the sample when the caller knows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np

from inferload.scenario.bodies import DEFAULT_MEDIA_TYPES, fill_template, guess_media_type
from inferload.users.payload import encode_json, encode_npy, encode_octet_stream


class BodyError(ValueError):
    """A request's data cannot be sent as the target's body."""


@dataclass(frozen=True, slots=True)
class TorchServeBody:
    """One pre-encoded request: the body and its Content-Type header value."""

    body: bytes
    content_type: str


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
