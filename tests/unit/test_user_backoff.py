"""A closed-loop user's pause after refused connections: 10 ms doubling to 1 s, gone at the first answer."""

from __future__ import annotations

import pytest

from inferload.errors import ConnectionRefused, HttpStatusError, RequestTimeout, SequenceRefused
from inferload.users.base import RefusedBackoff


def test_refusals_back_off_exponentially_up_to_a_second():
    backoff = RefusedBackoff()
    pauses = [backoff.after(ConnectionRefused("refused: cannot connect to x")) for _ in range(10)]
    assert pauses[:7] == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64])
    assert pauses[7:] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("answer", [None, HttpStatusError(503, "busy"), RequestTimeout("timeout: no answer from x in time")])
def test_any_outcome_but_a_refusal_ends_the_backoff(answer):  # a timeout took its own time already
    backoff = RefusedBackoff()
    for _ in range(5):
        backoff.after(ConnectionRefused("refused: cannot connect to x"))
    assert backoff.after(answer) == 0.0
    assert backoff.after(ConnectionRefused("refused: cannot connect to x")) == 0.01  # starts again from the bottom


def test_a_refused_sequence_backs_off_as_a_refused_connection_does():
    backoff = RefusedBackoff()
    refused = SequenceRefused(
        503, 'Model "stateful" has no worker to serve inference request. ... If this is a sequence inference'
    )
    assert [backoff.after(refused) for _ in range(3)] == pytest.approx([0.01, 0.02, 0.04])
    assert str(refused).startswith("HTTP 503: Model") and refused.status == 503  # grouped with the other 503s
