"""The engine reading a generation's stream (`check.answer` `openai_chat` / `openai_completions`)
against the reference server's scripted generation, whose truth is known: `stream_responses`
content events, event i written no earlier than i + 1 holds of the fixed draw after the service
started, around them a role prelude, keep-alive comments, split or coalesced writes, a usage tail.

The engine's per-call stream timing says: content events only (never the prelude, a comment, the
finish chunk, the usage tail or `[DONE]`), the time to the first content event (TTFT) no earlier
than one hold, the gaps between content events (ICL) no shorter than a hold but where two events
came in one write (then 0). A stream that ends in an error event, or before `[DONE]`, fails with a
reason that says so. These drive the engine's own API (the kinds that use it: test_generative_targets.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES
from tests.support.engine_triton import wait_for_calls
from tests.support.reference_server import reference_server

native = pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

HOLD_MS = 8.0
EVENTS = 4
#: a hold ends late by the timer's wake-up, the machine's load: generous, as the bound is only above
LATE_MS = 500.0
TARGET_NUMBERS = itertools.count()


@pytest.fixture
def engine() -> Iterator[Any]:
    created = native.Engine()
    yield created
    created.close()


def chat_body(stream: bool = True) -> bytes:
    request: dict[str, Any] = {"model": "identity", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    return json.dumps(request).encode()


def call_once(
    engine: Any, address: str, answer: str = "openai_chat", path: str = "/v1/chat/completions", body: bytes | None = None
) -> tuple[Any, Any]:
    """One call of a new one-request target; its completion and its stream timing."""
    target = engine.add_target(
        f"generation-{next(TARGET_NUMBERS)}",
        "POST",
        "http",
        address,
        address,
        30.0,
        [],
        [(path, body if body is not None else chat_body(), [("Content-Type", "application/json")])],
        {"answer": answer},
        max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
    )
    slot = engine.open_slot(target)
    ticket = engine.call(slot, 0)
    (done,) = wait_for_calls(engine, 1)
    assert done[0] == ticket
    return done, engine.stream_timing(ticket)


def test_the_stream_s_content_events_and_their_times(engine: Any) -> None:
    generation = {"tokens_per_event": 2, "keep_alive": True}
    with reference_server(stream_responses=EVENTS, generation=generation, delay={"law": "fixed", "ms": HOLD_MS}) as server:
        done, timing = call_once(engine, server.http_url)
        records = server.records()
    assert done[1] is None and done[8] == 200
    events, ttft_ms, gaps_ms = timing
    assert events == EVENTS  # not the prelude, the comments, the finish chunk, the usage tail or [DONE]
    assert HOLD_MS <= ttft_ms < HOLD_MS + LATE_MS
    assert len(gaps_ms) == EVENTS - 1
    # event i is written no earlier than start + (i + 1) holds: the last no earlier than EVENTS holds
    assert ttft_ms + sum(gaps_ms) >= EVENTS * HOLD_MS
    assert ttft_ms + sum(gaps_ms) <= done[3]  # the last content event came within the call
    assert len(records) == 1 and records.with_status("ok").all()


def test_two_events_in_one_write_come_at_once_and_a_split_event_is_stamped_at_its_first_byte(engine: Any) -> None:
    with reference_server(
        stream_responses=EVENTS, generation={"coalesce_events": True}, delay={"law": "fixed", "ms": HOLD_MS}
    ) as server:
        _, (events, ttft_ms, gaps_ms) = call_once(engine, server.http_url)
    assert events == EVENTS
    assert ttft_ms >= 2 * HOLD_MS  # the first event waited for the second's write
    assert gaps_ms[0] < HOLD_MS / 2 and gaps_ms[2] < HOLD_MS / 2  # one write (0 unless the kernel split it)
    assert ttft_ms + gaps_ms[0] + gaps_ms[1] >= EVENTS * HOLD_MS  # the second pair at the fourth hold

    with reference_server(
        stream_responses=EVENTS, generation={"split_events": True}, delay={"law": "fixed", "ms": HOLD_MS}
    ) as server:
        done, (events, ttft_ms, gaps_ms) = call_once(engine, server.http_url)
    assert done[1] is None and events == EVENTS
    assert HOLD_MS <= ttft_ms < HOLD_MS + LATE_MS


def test_completions_are_read_by_their_text(engine: Any) -> None:
    body = json.dumps({"model": "identity", "prompt": "hi", "stream": True}).encode()
    with reference_server(stream_responses=3) as server:
        done, (events, _, gaps_ms) = call_once(engine, server.http_url, "openai_completions", "/v1/completions", body)
    assert done[1] is None and events == 3 and len(gaps_ms) == 2


def test_an_error_event_mid_stream_fails_the_call_and_says_what_the_server_wrote(engine: Any) -> None:
    with reference_server(stream_responses=5, generation={"fail_after_events": 2}) as server:
        done, timing = call_once(engine, server.http_url)
    assert done[1] == ("RequestError", "stream error after 2 content events: scripted failure")
    assert timing is None  # a failed stream's figures are kept apart from the successes'


def test_an_http_error_before_the_stream_is_judged_as_one(engine: Any) -> None:
    with reference_server(failures={"share": 1.0, "http_status": 503}) as server:
        done, timing = call_once(engine, server.http_url)
    assert done[1][0] == "HttpStatusError" and done[1][1].startswith("HTTP 503") and timing is None


def test_a_whole_answer_is_not_a_stream(engine: Any) -> None:
    with reference_server(stream_responses=3) as server:
        done, timing = call_once(engine, server.http_url, body=chat_body(stream=False))
    assert done[1] == (
        "RequestError",
        'bad stream: the answer is application/json, not text/event-stream (did the request ask for "stream": true?)',
    )
    assert timing is None


def test_a_per_call_generation_gives_its_text_and_figures_and_is_recorded_when_asked(engine: Any) -> None:
    """A conversation's turn: the answer's text (its content events joined), its time to the first token,
    the server's prompt and output tokens; recorded by the engine, as its loops record, only when asked."""
    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}) as server:
        target = engine.add_target(
            "chat",
            "POST",
            "http",
            server.http_url,
            server.http_url,
            30.0,
            [],
            [("/v1/chat/completions", chat_body(), [("Content-Type", "application/json")])],
            {"answer": "openai_chat"},
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
        slot = engine.open_slot(target)
        recorded = engine.call(slot, 0, want_answer=True, record=True)
        (turn,) = wait_for_calls(engine, 1)
        engine.call(slot, 0, want_answer=True)
        (plain,) = wait_for_calls(engine, 1)
    assert turn[0] == recorded and turn[1] is None
    assert turn[7] == "é".encode() * EVENTS and plain[7] == turn[7]  # the text, not the events
    ttft_ms, prompt_tokens, output_tokens = turn[9]
    assert HOLD_MS <= ttft_ms < HOLD_MS + LATE_MS and (prompt_tokens, output_tokens) == (1, EVENTS)  # the usage tail's
    entries = engine.drain()["locust"]
    assert [entry["num_requests"] for entry in entries] == [1]  # the recorded call only
