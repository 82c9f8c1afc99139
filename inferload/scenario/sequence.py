"""A target's ``sequence`` key: how a sequence (stateful) model is driven, on Triton or TorchServe.

A Triton model with ``sequence_batching`` in its config keeps state per sequence: every request
carries a correlation ID and START/END flags. ``length`` is the number of requests per sequence
(START on the first, END on the last), ``concurrent`` the number of sequences each user keeps open
at once, its calls taking them in turn (interleaved). The start checks read the model's config: a
sequence model without the key is driven with these defaults (and the run says so); the key on a
model that is not a sequence model is a start error (``inferload.run.triton_check``).

A TorchServe model with ``sequenceBatching`` (its model-config.yaml) keeps state per sequence id,
the request header ``ts_request_sequence_id``; a request without one opens a sequence of its own.
With the key, each user's sequences carry ids of their own in that header, ``length`` requests each
(the last also carrying ``ts_request_sequence_end: true``, which closes it on TorchServe's
continuous batching), ``concurrent`` of them per user in turn; TorchServe serves the requests of one
sequence one at a time, so one id for every user (a static header) serialises the whole load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, StrictInt

from inferload.scenario.fields import FrozenModel
from inferload.scenario.limits import MAX_SEQUENCE_LENGTH, MAX_SEQUENCES_PER_USER

#: requests per sequence when the key is not given (perf_analyzer's ``--sequence-length`` default)
DEFAULT_SEQUENCE_LENGTH = 20
#: TorchServe's request headers of a sequence (its defaults; config.properties ts_header_key_sequence_* rename them)
TS_SEQUENCE_ID_HEADER = "ts_request_sequence_id"
TS_SEQUENCE_END_HEADER = "ts_request_sequence_end"


class SequenceSpec(FrozenModel):
    """``sequence: {length: 8, concurrent: 2}``; ``sequence: {}`` takes both defaults."""

    length: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCE_LENGTH)] = DEFAULT_SEQUENCE_LENGTH
    concurrent: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCES_PER_USER)] = 1


def static_sequence_id_note(name: str, kind: str, headers: Mapping[str, str] | None, spec: SequenceSpec | None) -> str | None:
    """A TorchServe target that sends one ``ts_request_sequence_id`` in its static headers (no ``sequence``
    key): what that does to the load, and the key that gives each user ids of its own; None otherwise."""
    if kind != "torchserve-rest" or spec is not None:
        return None
    value = next((v for k, v in (headers or {}).items() if k.lower() == TS_SEQUENCE_ID_HEADER), None)
    if value is None:
        return None
    return (
        f"target {name!r}: every request of every user carries the one {TS_SEQUENCE_ID_HEADER} {value!r} (its headers):"
        " TorchServe serves the requests of one sequence one at a time, so the whole load waits in one queue; remove the"
        " header and set the target's sequence: {length, concurrent} for sequence ids of each user's own"
    )
