"""TorchServe request bodies as a scenario states them: the JSON ``body_template`` rule, the
``media_type`` (Content-Type header) form and each ``content_type``'s default header, and what raw
and text bodies need of their input. Pure; the encoding itself is ``inferload.users.torchserve``.

The template rule, exactly: every occurrence of the literal text ``$data`` in ``body_template`` is
replaced by the request's data as compact JSON (the input array, batch dimension first, as
``content_type: json`` sends it without a template); nothing else in the template is touched (no
other ``$`` names, no escapes). A template is valid when it holds ``$data`` and is JSON once each
``$data`` is replaced by a JSON value, so ``$data`` must stand where a JSON value goes, never inside
a quoted string.
"""

from __future__ import annotations

import json
import math
import mimetypes
import re
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from inferload.scenario.datasets import DatasetError, dataset_format, dataset_path, read_dataset
from inferload.scenario.messages import Check

if TYPE_CHECKING:
    from inferload.scenario.inputs import InputSpec

#: what ``body_template`` holds where the request's data goes
DATA_PLACEHOLDER = "$data"
#: the Content-Type header each content_type sends unless ``media_type`` says otherwise
#: (``raw``: guessed from the data set's file names, this when they do not agree or are unknown)
DEFAULT_MEDIA_TYPES = {
    "octet-stream": "application/octet-stream",
    "npy": "application/x-npy",
    "json": "application/json",
    "raw": "application/octet-stream",
    "text": "text/plain; charset=utf-8",
}

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
#: RFC 9110 media type: type "/" subtype *( ";" parameter ), a parameter value a token or quoted string
_MEDIA_TYPE_RE = re.compile(rf'{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|"[^"\\\x00-\x1f\x7f]*"))*')
#: a JSON value no quoted string can swallow: where ``$data`` is substituted to check a template
_PROBE_VALUE = '"$"'


def fill_template(template: str, data_json: str) -> str:
    """The template with every ``$data`` replaced by ``data_json``."""
    return template.replace(DATA_PLACEHOLDER, data_json)


#: the longest JSON text of one element (the client's `json.dumps` of numbers: -1.2345678901234567e-308)
_JSON_CHARS = {"BOOL": 6, "BYTES": 0}
_JSON_NUMBER_CHARS = 25


def json_body_estimate(spec: InputSpec, batch_size: int) -> int:
    """About how many bytes the input's data takes as JSON in a body (its longest form; BYTES: each
    element as a string of its length, escapes counted twice)."""
    if any(dim < 0 for dim in spec.shape):
        return 0
    elements = batch_size * math.prod(spec.shape)
    if spec.dtype == "BYTES":
        length = spec.data.length or 16
        return elements * (2 * length + 3)
    return elements * (_JSON_CHARS.get(spec.dtype) or _JSON_NUMBER_CHARS)


def template_problem(template: str) -> str | None:
    """Why ``template`` is no valid ``body_template`` (None when it is)."""
    if DATA_PLACEHOLDER not in template:
        return (
            f"must hold {DATA_PLACEHOLDER} where the request's data goes"
            f" (each {DATA_PLACEHOLDER} is replaced by the request's data as JSON)"
        )
    try:
        json.loads(fill_template(template, _PROBE_VALUE))
    except json.JSONDecodeError as error:
        return (
            f"is not JSON once {DATA_PLACEHOLDER} is replaced by a value ({error.msg} at character {error.pos});"
            f" {DATA_PLACEHOLDER} must stand where a JSON value goes, not inside quotes"
        )
    except RecursionError:
        return "is nested too deep for a JSON reader (thousands of arrays or objects inside each other)"
    return None


def media_type_problem(value: str) -> str | None:
    """Why ``value`` is no Content-Type header value like ``image/png`` (None when it is)."""
    if _MEDIA_TYPE_RE.fullmatch(value.strip()) is None:
        return f"expected a media type like image/png or text/plain; charset=utf-8; got {value!r}"
    return None


def template_key_problem(value: str | None, content_type: str | None) -> str | None:
    """Why ``body_template`` cannot be ``value`` on a target of this content_type (None: it can)."""
    if value is None:
        return None
    if content_type is not None and content_type != "json":
        return f"only applies to content_type json; this target's is {content_type}"
    return template_problem(value)


def guess_media_type(names: Iterable[str | PurePath]) -> str:
    """The one media type ``mimetypes`` guesses from every file name's suffix, else octet-stream."""
    guessed = {mimetypes.guess_type(PurePath(name).name, strict=False)[0] for name in names}
    if len(guessed) == 1 and None not in guessed:
        return str(guessed.pop())
    return DEFAULT_MEDIA_TYPES["raw"]


def body_problems(content_type: str, spec: InputSpec, base_dir: Path | None) -> list[Check]:
    """What keeps the one input ``spec`` from travelling as a raw or text body (paths below the input).

    raw: the input must be fed from a folder data set (each file one sample). text: the input must be
    BYTES, and when ``base_dir`` is known (files may be read) every element of its data set UTF-8 text.
    """
    if content_type == "raw":
        return _raw_problems(spec, base_dir)
    if content_type == "text":
        return _text_problems(spec, base_dir)
    return []


def _raw_problems(spec: InputSpec, base_dir: Path | None) -> list[Check]:
    data = spec.data
    if data.dataset is None:
        return [
            (
                ("data",),
                f"a raw body is a file's bytes: feed this input from a folder data set; it uses generator {data.generator}",
            )
        ]
    try:
        kind = dataset_format(data, dataset_path(data, base_dir or Path(".")))
    except DatasetError:
        return []  # the data set's own check says what is wrong with it
    if kind != "folder":
        return [(("data", "dataset"), f"a raw body is a file's bytes: give a folder of files; this data set is {kind}")]
    return []


def _text_problems(spec: InputSpec, base_dir: Path | None) -> list[Check]:
    if spec.dtype != "BYTES":
        return [(("dtype",), f"a text body sends UTF-8 text: the input must be BYTES; got {spec.dtype}")]
    if spec.data.dataset is None or base_dir is None:
        return []
    try:
        dataset = read_dataset(spec, base_dir)
    except DatasetError:
        return []  # the data set's own check says what is wrong with it
    for sample, name in zip(dataset.samples, dataset.names, strict=True):
        for item in sample.reshape(-1):
            try:
                bytes(item).decode("utf-8")
            except UnicodeDecodeError as error:
                return [
                    (
                        ("data", "dataset"),
                        f"{dataset.path.name}: {name} is not UTF-8 text (byte {error.start}); a text body sends each sample as text",
                    )
                ]
    return []
