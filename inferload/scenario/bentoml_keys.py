"""The scenario keys of a ``bentoml-http`` target: which bodies it sends (``content_type``).

A BentoML API takes its parameters by name: ``json`` (the default) sends a JSON object with one
field per input, the input's array as nested lists (the batch dimension first, as a batchable API
wants it); ``raw`` sends one file of a data set as ``multipart/form-data``, in the form field named
after the input (what BentoML expects for a ``pathlib.Path`` or image parameter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferload.scenario.messages import custom_error

BENTOML_CONTENT_TYPES = ("json", "raw")


def bentoml_content_type(value: str | None, inputs: Sequence[Any], batch_size: int) -> str:
    """The target's content_type (default ``json``); a custom error naming what fits otherwise."""
    if value is None:
        return "json"
    if value not in BENTOML_CONTENT_TYPES:
        raise custom_error(
            "a bentoml-http target sends json (a JSON object, one field per input) or raw (a data set's file"
            f" as multipart/form-data); got {value!r}"
        )
    if value == "raw" and len(inputs) > 1:
        raise custom_error(f"raw bodies carry one file (one input); this target has {len(inputs)} (use json)")
    if value == "raw" and batch_size != 1:
        raise custom_error(f"raw bodies carry one file each: batch_size must be 1; got {batch_size}")
    return value
