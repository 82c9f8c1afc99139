"""What the REST users of TorchServe, BentoML and KServe share: one POST read whole, its status judged.

``post_for_answer`` sends one pre-encoded body and reads the whole answer (its length is the
reported response size), up to the target's ``max_answer_bytes``; the target's ``response_check`` decides which statuses count: ``none``
takes any 2xx, every other check wants 200. A refused status becomes an ``HttpStatusError`` whose
message is the first line of the server's own reason (``detail(answer)``: a kind's
`failures.Reason`). ``check_list_answer`` is the answer check of the users
whose ``shape`` is a JSON list of one entry per item (TorchServe, BentoML): ``shape`` counts the
list, ``expected`` compares the answer with its samples' own. ``close_client`` closes a user's client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import geventhttpclient.client
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPParseError, HTTPSocketPoolResponse
from geventhttpclient.url import URL

from inferload.errors import HttpStatusError, RequestError
from inferload.scenario.targets import Target
from inferload.users.expected import ExpectedCheck
from inferload.users.failures import check_json_list
from inferload.users.request_pool import RequestPool
from inferload.users.tls import http_tls_options

#: at most this many characters of a server's reason go in a failure message (TorchServe's reason for
#: refusing a sequence comes after its first 120: "... If this is a sequence inference, please check ...")
DETAIL_CHARS = 300
#: bytes read from an answer at a time (the bound is checked between reads)
READ_BLOCK_BYTES = 256 * 1024
#: the most an answer's head (status line, headers, interim answers) may take
MAX_HEAD_BYTES = 1024 * 1024


class _BoundedHeadResponse(HTTPSocketPoolResponse):
    """geventhttpclient's response, refusing a head longer than `MAX_HEAD_BYTES`."""

    _head_bytes = 0

    def feed(self, data: str | bytes) -> None:
        if not self.headers_complete or self.get_code() < 200:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                raise HTTPParseError(f"answer head larger than {MAX_HEAD_BYTES} bytes")
        super().feed(data)


def bound_answer_heads() -> None:
    """Make geventhttpclient's clients (the Python transport's, tritonclient.http's) refuse an answer
    whose head passes `MAX_HEAD_BYTES`. geventhttpclient reads a head, and the interim answers
    before it, for as long as bytes come, without yielding to gevent while they do: a server that
    sends header lines (or ``100 Continue``) without end held the user's greenlet, and with it
    every timeout and the run's end. Its response class is a module global it looks up per
    request, so this sets it, once per process; idempotent."""
    geventhttpclient.client.HTTPSocketPoolResponse = _BoundedHeadResponse  # type: ignore[misc]


class Answer(Protocol):
    """What ``post_for_answer`` uses of an HTTP response (geventhttpclient's)."""

    @property
    def status_code(self) -> int: ...
    @property
    def content_length(self) -> int | None: ...
    def read(self, length: int | None = None) -> bytes: ...
    def release(self) -> None: ...


class PostClient(Protocol):
    """What ``post_for_answer`` uses of an HTTP client (geventhttpclient's ``HTTPClient``)."""

    def post(self, request_uri: str, body: bytes, headers: Mapping[str, str]) -> Answer: ...


def post_for_answer(
    client: PostClient,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    response_check: str | None,
    detail: Callable[[bytes], str],
    max_answer_bytes: int,
) -> bytes:
    """The whole answer to ``POST path``; HttpStatusError(status, detail(answer)) unless its status is
    accepted; RequestError once the answer passes ``max_answer_bytes`` (its connection closed, the rest unread)."""
    response = client.post(path, body=body, headers=headers)
    try:
        answer = _read_bounded(response, max_answer_bytes)
    finally:
        response.release()
    status = response.status_code
    accepted = 200 <= status < 300 if response_check == "none" else status == 200
    if not accepted:
        raise HttpStatusError(status, detail(answer))
    return answer


def answer_too_large(max_answer_bytes: int) -> RequestError:
    return RequestError(f"answer larger than {max_answer_bytes} bytes (the target's max_answer_bytes)")


def _read_bounded(response: Answer, max_answer_bytes: int) -> bytes:
    """The answer's body, read in blocks; past the bound its connection is dropped, not returned to the
    pool with the body unread (geventhttpclient has no public call for it: its pool's ``release_socket``
    closes the socket)."""
    declared = response.content_length
    parts: list[bytes] = []
    size = 0
    while declared is None or declared <= max_answer_bytes:
        block = response.read(READ_BLOCK_BYTES)
        if not block:
            return b"".join(parts)
        size += len(block)
        if size > max_answer_bytes:
            break
        parts.append(block)
    pool, sock = getattr(response, "_pool", None), getattr(response, "_sock", None)
    if pool is not None and sock is not None:
        pool.release_socket(sock)
        response._sock = None  # type: ignore[attr-defined]
    raise answer_too_large(max_answer_bytes)


def open_client(target: Target, scenario_dir: Path) -> HTTPClient:
    """One user's client of the target's address (http:// when it names no scheme), with its timeout
    and, for an https:// address, the target's tls (CA, client certificate, server name)."""
    bound_answer_heads()
    url = URL(target.address if "://" in target.address else f"http://{target.address}")
    tls = http_tls_options(target.tls, scenario_dir, target.name) if target.tls is not None else {}
    return HTTPClient.from_url(url, concurrency=1, connection_timeout=target.timeout, network_timeout=target.timeout, **tls)


def close_client(user: object) -> None:
    """Close a user's HTTP client (its ``_client``), if ``connect()`` made one and no earlier call closed it."""
    client: HTTPClient | None = getattr(user, "_client", None)
    if client is not None:
        client.close()
        delattr(user, "_client")


def check_list_answer(
    answer: bytes, target: Target, expected: ExpectedCheck | None, pool: RequestPool[Any], index: int, batch: int
) -> None:
    """``response_check: shape``: a JSON list of ``batch`` items (request ``index``'s rows: the
    target's ``batch_size``, or a replay row's); ``expected``: request ``index``'s samples' answers."""
    if target.response_check == "shape":
        check_json_list(answer, batch)
    elif expected is not None:
        expected.body(answer, pool.samples(index))
