"""The REST users' shared answer handling (`inferload.users.http_answer`), against a stub client."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from inferload.errors import HttpStatusError, RequestError
from inferload.users.bentoml import BENTOML_REASON
from inferload.users.failures import error_reason
from inferload.users.http_answer import DETAIL_CHARS, READ_BLOCK_BYTES, close_client, post_for_answer
from tests.support.http_stub import StubClient, StubResponse

LIMIT = 1024


def test_the_whole_answer_comes_back_and_the_response_is_released() -> None:
    client = StubClient(StubResponse(200, b"[1, 2]"))
    answer = post_for_answer(client, "/p", b"{}", {"Content-Type": "application/json"}, "status", BENTOML_REASON.of, LIMIT)
    assert answer == b"[1, 2]"
    assert client.posts == [("/p", b"{}", {"Content-Type": "application/json"})]
    assert client.response.released


def test_a_failed_read_still_releases_the_response() -> None:
    client = StubClient(StubResponse(200, b"", fail_read=True))
    with pytest.raises(TimeoutError):
        post_for_answer(client, "/p", b"", {}, "status", BENTOML_REASON.of, LIMIT)
    assert client.response.released


@pytest.mark.parametrize("declared", [None, 2 * READ_BLOCK_BYTES + 1], ids=["chunked", "content-length"])
def test_an_answer_past_max_answer_bytes_fails_and_is_not_read_further(declared: int | None) -> None:
    response = StubResponse(200, b"x" * (4 * READ_BLOCK_BYTES), content_length=declared)
    with pytest.raises(
        RequestError, match=f"^answer larger than {2 * READ_BLOCK_BYTES} bytes \\(the target's max_answer_bytes\\)$"
    ):
        post_for_answer(StubClient(response), "/p", b"", {}, "status", BENTOML_REASON.of, 2 * READ_BLOCK_BYTES)
    assert response.offset <= 3 * READ_BLOCK_BYTES and response.released  # read no further than one block past it
    exact = StubResponse(200, b"x" * (2 * READ_BLOCK_BYTES))
    assert (
        len(post_for_answer(StubClient(exact), "/p", b"", {}, "status", BENTOML_REASON.of, 2 * READ_BLOCK_BYTES))
        == 2 * READ_BLOCK_BYTES
    )


@pytest.mark.parametrize(
    ("check", "status", "accepted"),
    [
        ("none", 204, True),
        ("none", 299, True),
        ("none", 300, False),
        ("status", 204, False),
        ("shape", 200, True),
        (None, 201, False),
    ],
)
def test_none_takes_any_2xx_and_every_other_check_wants_200(check: str | None, status: int, accepted: bool) -> None:
    client = StubClient(StubResponse(status, b'{"error": "model busy\\nretry later"}'))
    if accepted:
        assert post_for_answer(client, "/p", b"", {}, check, BENTOML_REASON.of, LIMIT) == client.response.body
        return
    with pytest.raises(HttpStatusError) as raised:
        post_for_answer(client, "/p", b"", {}, check, BENTOML_REASON.of, LIMIT)
    assert raised.value.status == status
    assert str(raised.value) == f"HTTP {status}: model busy"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"message": "first\\nsecond"}', "first"),
        (b'{"other": "x"}', '{"other": "x"}'),
        (b'{"message": null}', '{"message": null}'),
        (b'{"message": "  "}', '{"message": "  "}'),
        (b'{"message": {"text": "deeper"}}', '{"message": {"text": "deeper"}}'),
        (b"[1, 2]", "[1, 2]"),
        (b"plain text\nmore", "plain text"),
        (b"  \r\n indented\rmore", "indented"),
        (b"\xff\xfe bytes", "\ufffd\ufffd bytes"),
        (b"", ""),
        (b'{"message": "' + b"x" * (DETAIL_CHARS + 80) + b'"}', "x" * DETAIL_CHARS),
    ],
)
def test_the_reason_is_the_first_line_of_a_key_that_holds_a_string_or_of_the_body(body: bytes, detail: str) -> None:
    assert error_reason(body, ("message",), DETAIL_CHARS) == detail


def test_a_reason_may_sit_deeper_and_the_first_key_with_a_string_wins() -> None:
    keys = ("error.message", "error", "detail")
    assert error_reason(b'{"error": {"message": "not found\\nmore"}}', keys, 50) == "not found"
    assert error_reason(b'{"error": "overloaded"}', keys, 50) == "overloaded"
    assert error_reason(b'{"error": "", "detail": "validation"}', keys, 50) == "validation"


@dataclass
class ClosingClient:
    closed: int = 0

    def close(self) -> None:
        self.closed += 1


class UserWithClient:
    _client: ClosingClient


def test_close_client_closes_once_and_passes_over_a_user_that_never_connected() -> None:
    user = UserWithClient()
    close_client(user)  # connect() never ran: nothing to close
    client = user._client = ClosingClient()
    close_client(user)
    close_client(user)
    assert client.closed == 1
    assert not hasattr(user, "_client")
