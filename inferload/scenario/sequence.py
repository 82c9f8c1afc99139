"""A target's ``sequence`` key: how a Triton sequence (stateful) model is driven.

A model with ``sequence_batching`` in its config keeps state per sequence: every request carries
a correlation ID and START/END flags. ``length`` is the number of requests per sequence (START on
the first, END on the last), ``concurrent`` the number of sequences each user keeps open at once,
its calls taking them in turn (interleaved). The start checks read the model's config: a sequence
model without the key is driven with these defaults (and the run says so); the key on a model that
is not a sequence model is a start error (``inferload.run.model_check``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt

from inferload.scenario.fields import FrozenModel
from inferload.scenario.limits import MAX_SEQUENCE_LENGTH, MAX_SEQUENCES_PER_USER

#: requests per sequence when the key is not given (perf_analyzer's ``--sequence-length`` default)
DEFAULT_SEQUENCE_LENGTH = 20


class SequenceSpec(FrozenModel):
    """``sequence: {length: 8, concurrent: 2}``; ``sequence: {}`` takes both defaults."""

    length: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCE_LENGTH)] = DEFAULT_SEQUENCE_LENGTH
    concurrent: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCES_PER_USER)] = 1
