"""The reference server's OpenAI-compatible generation (native/src/refserver/generate.rs) as a
client on the wire sees it: the events of a chat or completions stream in order, each write of the
server one HTTP/1.1 chunk (so a split or coalesced write shows in the bytes, whatever the reader's
timing), content events no earlier than their scripted times, and records that say what happened.

A raw socket reads the answer, so that nothing between the wire and the test reframes it; times
are only compared with the server's scripted holds (an event is never early) or within generous
intervals.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any

import requests

from tests.support.reference_server import reference_server

MS = 1_000_000
TOKEN = "é"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    #: the body's HTTP/1.1 chunks: one per write of the server
    chunks: list[bytes]
    #: the body's events (their data), in order
    events: list[str]
    #: when each event's first byte was read, ns after the request was sent
    event_ns: list[int]


def ask(address: str, path: str, request: dict[str, Any], timeout_s: float = 30.0) -> Answer:
    """POST ``request`` as JSON over a fresh connection and read the whole answer as it comes."""
    host, port = address.rsplit(":", 1)
    body = json.dumps(request).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    reads: list[tuple[int, bytes]] = []
    with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
        sent = time.monotonic_ns()
        connection.sendall(head + body)
        while data := connection.recv(65536):
            reads.append((time.monotonic_ns() - sent, data))
    raw = b"".join(data for _, data in reads)
    ends, total = [], 0
    for at, data in reads:
        total += len(data)
        ends.append((total, at))
    header_end = raw.index(b"\r\n\r\n") + 4
    status_line, *header_lines = raw[:header_end].decode().strip().split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in header_lines)}
    chunks: list[bytes] = []
    chunk_offsets: list[int] = []  # where each chunk's bytes start in `raw`
    at = header_end
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size_end = raw.index(b"\r\n", at)
            size = int(raw[at:size_end], 16)
            if size == 0:
                break
            chunk_offsets.append(size_end + 2)
            chunks.append(raw[size_end + 2 : size_end + 2 + size])
            at = size_end + 2 + size + 2
    else:
        chunk_offsets.append(header_end)
        chunks.append(raw[header_end:])

    def arrival(offset: int) -> int:
        return next(when for end, when in ends if offset < end)

    stream = b"".join(chunks)
    raw_offset = [start + index for start, chunk in zip(chunk_offsets, chunks, strict=True) for index in range(len(chunk))]
    events, event_ns = [], []
    position = 0
    for block in stream.split(b"\n\n"):
        data_lines = [line[len(b"data: ") :] for line in block.split(b"\n") if line.startswith(b"data: ")]
        if data_lines:
            first = block.index(b"data: ")
            events.append(b"\n".join(data_lines).decode())
            event_ns.append(arrival(raw_offset[position + first]))
        position += len(block) + 2
    return Answer(int(status_line.split()[1]), headers, chunks, events, event_ns)


def content(event: str, chat: bool = True) -> str | None:
    """The generated text an event carries (None: none)."""
    if event == "[DONE]":
        return None
    choices = json.loads(event).get("choices") or []
    if not choices:
        return None
    text = choices[0].get("delta", {}).get("content") if chat else choices[0].get("text")
    return text or None


def chat(stream: bool = True, usage: bool = True, model: str = "identity") -> dict[str, Any]:
    request: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if stream and usage:
        request["stream_options"] = {"include_usage": True}
    return request


def test_a_chat_stream_is_a_role_prelude_the_content_events_a_finish_a_usage_tail_and_done() -> None:
    with reference_server(stream_responses=4, generation={"tokens_per_event": 3}, delay={"law": "fixed", "ms": 15}) as server:
        answer = ask(server.http_address, "/v1/chat/completions", chat())
        records = server.records()
    assert answer.status == 200 and answer.headers["content-type"] == "text/event-stream"
    events = answer.events
    assert json.loads(events[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    texts = [content(event) for event in events]
    assert texts[1:5] == [TOKEN * 3] * 4 and texts[0] is None and texts[5:] == [None, None, None]
    assert json.loads(events[5])["choices"][0]["finish_reason"] == "length"
    tail = json.loads(events[6])
    assert tail["choices"] == [] and tail["usage"]["completion_tokens"] == 12
    assert events[7] == "[DONE]"
    # content event i is written after i + 1 holds of 15 ms from the service's start: never earlier
    for index, at in enumerate(answer.event_ns[1:5]):
        assert 15 * MS * (index + 1) <= at < 15 * MS * (index + 1) + 2_000 * MS
    assert len(records) == 1 and records.with_protocol("generate").all() and records.with_status("ok").all()
    assert (records.hold_ns == 4 * 15 * MS).all()
    # the record keeps when the first and the last content event were handed to the transport: each
    # at its deadline from the service's start or later (a late first event shortens the gap to the
    # last, so the gap itself has no lower bound)
    start, first, last = int(records.start_ns[0]), int(records.first_event_ns[0]), int(records.last_event_ns[0])
    assert 15 * MS <= first - start < 15 * MS + 2_000 * MS
    assert 4 * 15 * MS <= last - start < 4 * 15 * MS + 2_000 * MS
    assert first < last <= int(records.answered_ns[0])


def test_without_include_usage_there_is_no_usage_tail_and_completions_carry_text() -> None:
    with reference_server(stream_responses=2) as server:
        answer = ask(server.http_address, "/v1/completions", {"model": "identity", "prompt": "hi", "stream": True})
    assert [content(event, chat=False) for event in answer.events] == [TOKEN, TOKEN, None, None]
    assert all("usage" not in event for event in answer.events[:-1]) and answer.events[-1] == "[DONE]"


def test_keep_alive_comments_and_split_or_coalesced_writes_show_in_the_chunks() -> None:
    with reference_server(stream_responses=4, generation={"keep_alive": True, "split_events": True}) as server:
        split = ask(server.http_address, "/v1/chat/completions", chat())
    content_chunks = [chunk for chunk in split.chunks if b"keep-alive" in chunk or b'"content":"' in chunk]
    # each content event's write is cut inside its token's character: a chunk ends with its first byte
    assert sum(chunk.endswith(TOKEN.encode()[:1]) for chunk in split.chunks) == 4
    assert any(chunk.startswith(b": keep-alive\n\n") for chunk in content_chunks)
    assert [content(event) for event in split.events][1:5] == [TOKEN] * 4  # the character is whole once joined

    with reference_server(stream_responses=4, generation={"coalesce_events": True}) as server:
        coalesced = ask(server.http_address, "/v1/chat/completions", chat())
    pairs = [chunk for chunk in coalesced.chunks if chunk.count(b'"content":"' + TOKEN.encode()) == 2]
    assert len(pairs) == 2  # events 1+2 and 3+4, each pair one write


def test_an_error_mid_stream_ends_it_after_the_events_before_and_the_record_says_failed() -> None:
    with reference_server(stream_responses=5, generation={"fail_after_events": 2}) as server:
        answer = ask(server.http_address, "/v1/chat/completions", chat())
        records = server.records()
    texts = [content(event) for event in answer.events]
    assert texts[1:3] == [TOKEN, TOKEN]
    assert json.loads(answer.events[-1])["error"]["message"] == "scripted failure"
    assert "[DONE]" not in answer.events
    assert records.with_status("failed").all() and len(records) == 1


def test_a_whole_answer_models_and_refusals() -> None:
    with reference_server(stream_responses=3, generation={"tokens_per_event": 2}) as server:
        whole = requests.post(f"{server.http_url}/v1/chat/completions", json=chat(stream=False), timeout=30).json()
        models = requests.get(f"{server.http_url}/v1/models", timeout=30).json()
        unknown = requests.post(f"{server.http_url}/v1/chat/completions", json=chat(model="nope"), timeout=30)
        stats = server.stats()
    assert whole["choices"][0]["message"]["content"] == TOKEN * 6 and whole["usage"]["completion_tokens"] == 6
    assert [model["id"] for model in models["data"]] == ["identity"]  # OpenAI's list
    assert models["models"] == ["identity"]  # and KServe v1's, on the same route
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    assert stats["rejected"] == 1 and stats["received"] == 1


def test_a_scripted_failure_is_an_http_error_before_any_event() -> None:
    with reference_server(failures={"share": 1.0, "http_status": 503}) as server:
        answer = ask(server.http_address, "/v1/chat/completions", chat())
    assert answer.status == 503 and json.loads(answer.chunks[0])["error"]["message"] == "scripted failure"
