"""A stand-in for geventhttpclient's client and response: what the REST users' `post_for_answer` uses of them
(`inferload.users.http_answer.PostClient`, `Answer`), answering every POST with one scripted response."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class StubResponse:
    status_code: int
    body: bytes
    fail_read: bool = False
    released: bool = False
    #: the Content-Length the response declares (None: chunked)
    content_length: int | None = None
    #: bytes of the body read so far
    offset: int = 0

    def read(self, length: int | None = None) -> bytes:
        if self.fail_read:
            raise TimeoutError("read timed out")
        block = self.body[self.offset : None if length is None else self.offset + length]
        self.offset += len(block)
        return block

    def release(self) -> None:
        self.released = True


@dataclass
class StubClient:
    response: StubResponse
    posts: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)

    def post(self, request_uri: str, body: bytes, headers: Mapping[str, str]) -> StubResponse:
        self.posts.append((request_uri, body, dict(headers)))
        return self.response
