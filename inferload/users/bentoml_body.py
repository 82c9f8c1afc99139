"""BentoML request bodies, pure: one request's arrays → the bytes and Content-Type of ``POST /<api>``.

BentoML takes an API's parameters by name. ``json``: a JSON object with one field per input, the
input's values as a nested list, batch dimension first (a batchable API splits and joins along it;
BYTES elements as UTF-8 strings). ``raw``: the single input's file as ``multipart/form-data``, in
the form field named after the input (BentoML's way for a ``pathlib.Path`` or image parameter),
with the file's media type when known.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferload.users.torchserve_body import BodyError, encode_raw

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
