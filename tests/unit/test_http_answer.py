"""The REST users' shared answer handling (`inferload.users.http_answer`), against a stub client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from inferload.errors import HttpStatusError
from inferload.users.bentoml import error_detail as bentoml_detail
from inferload.users.http_answer import DETAIL_CHARS, close_client, json_error_detail, post_for_answer


@dataclass
class StubResponse:
    status_code: int
    body: bytes
    fail_read: bool = False
    released: bool = False

    def read(self) -> bytes:
        if self.fail_read:
            raise TimeoutError("read timed out")
        return self.body

    def release(self) -> None:
        self.released = True


@dataclass
class StubClient:
    response: StubResponse
    posts: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)

    def post(self, request_uri: str, body: bytes, headers: Mapping[str, str]) -> StubResponse:
        self.posts.append((request_uri, body, dict(headers)))
        return self.response


def test_the_whole_answer_comes_back_and_the_response_is_released() -> None:
    client = StubClient(StubResponse(200, b"[1, 2]"))
    answer = post_for_answer(client, "/p", b"{}", {"Content-Type": "application/json"}, "status", bentoml_detail)
    assert answer == b"[1, 2]"
    assert client.posts == [("/p", b"{}", {"Content-Type": "application/json"})]
    assert client.response.released


def test_a_failed_read_still_releases_the_response() -> None:
    client = StubClient(StubResponse(200, b"", fail_read=True))
    with pytest.raises(TimeoutError):
        post_for_answer(client, "/p", b"", {}, "status", bentoml_detail)
    assert client.response.released


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
        assert post_for_answer(client, "/p", b"", {}, check, bentoml_detail) == client.response.body
        return
    with pytest.raises(HttpStatusError) as raised:
        post_for_answer(client, "/p", b"", {}, check, bentoml_detail)
    assert raised.value.status == status
    assert str(raised.value) == f"HTTP {status}: model busy"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"message": "first\\nsecond"}', "first"),
        (b'{"other": "x"}', ""),
        (b'{"message": null}', ""),
        (b"[1, 2]", "[1, 2]"),
        (b"plain text\nmore", "plain text"),
        (b"", ""),
        (b'{"message": "' + b"x" * (DETAIL_CHARS + 80) + b'"}', "x" * DETAIL_CHARS),
    ],
)
def test_the_error_detail_is_the_first_line_of_one_key_or_of_the_body(body: bytes, detail: str) -> None:
    assert json_error_detail(body, "message") == detail


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
