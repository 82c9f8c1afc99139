"""Conversations (``generation.conversation``): each user holds one at a time; every later turn sends
the conversation so far (each answer as the assistant's message) and the next request's last message,
with that request's own settings; a failed turn, or the last one, starts the next conversation. The
turns' figures (time to the first token, the server's prompt tokens) merge over workers by turn
position; a conversation needs a chat target, a stream and a closed-loop shape, and the native engine
(the Python transport reads no stream's text), each refused with what to change."""

from __future__ import annotations

import json
from itertools import count

import pytest

from inferload.errors import ScenarioError
from inferload.measure.generation_record import GenerationRecord
from inferload.measure.hdr import LatencyStats
from inferload.results.summary import generation_figures
from inferload.scenario.generation import ConversationSpec
from inferload.scenario.loader import scenario_from_dict
from inferload.scenario.targets import GenerativeTarget
from inferload.users.generation import Conversation
from tests.support.locust_runner import run_locust
from tests.support.ports import free_port
from tests.support.scenario_factory import targets_of, write_scenario


def encoded(index: int) -> bytes:
    """The target's request ``index`` as its users encode it: its prompt as the one user message."""
    body = {"model": "m", "messages": [{"role": "user", "content": f"q{index}"}], "max_tokens": 10 + index, "stream": True}
    return json.dumps(body).encode()


def conversation(turns: int, think_time: float = 0.0) -> Conversation:
    indices = count()

    def next_request() -> tuple[int, bytes]:
        index = next(indices)
        return index, encoded(index)

    return Conversation(ConversationSpec(turns=turns, think_time=think_time), next_request)


def sent(body: bytes) -> tuple[list[tuple[str, str]], int]:
    data = json.loads(body)
    return [(m["role"], m["content"]) for m in data["messages"]], data["max_tokens"]


def test_each_turn_carries_the_conversation_so_far_and_the_next_requests_own_settings() -> None:
    talk = conversation(turns=3, think_time=0.5)
    turn, body = talk.next_turn()
    assert turn == 1 and sent(body) == ([("user", "q0")], 10)
    assert talk.answered("a0") == 0.5  # the think time before the next turn
    turn, body = talk.next_turn()
    assert turn == 2 and sent(body) == ([("user", "q0"), ("assistant", "a0"), ("user", "q1")], 11)
    talk.answered("a1")
    turn, body = talk.next_turn()
    assert turn == 3
    assert sent(body) == ([("user", "q0"), ("assistant", "a0"), ("user", "q1"), ("assistant", "a1"), ("user", "q2")], 12)
    assert talk.answered("a2") == 0.0  # the last turn: the next conversation starts at once
    turn, body = talk.next_turn()
    assert turn == 1 and sent(body) == ([("user", "q3")], 13)


def test_a_failed_turn_ends_its_conversation() -> None:
    talk = conversation(turns=4, think_time=1.0)
    talk.next_turn()
    talk.answered("a0")
    talk.next_turn()
    assert talk.answered(None) == 0.0  # no answer to carry: the next turn starts a new conversation
    turn, body = talk.next_turn()
    assert turn == 1 and sent(body) == ([("user", "q2")], 12)


def test_a_data_sets_messages_open_the_conversation_and_later_turns_take_their_last_message() -> None:
    lines = [
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "second"}],
    ]
    bodies = iter(json.dumps({"model": "m", "messages": m, "max_tokens": 5}).encode() for m in lines)
    talk = Conversation(ConversationSpec(turns=2), lambda: (0, next(bodies)))
    _, first = talk.next_turn()
    talk.answered("ok")
    _, second = talk.next_turn()
    assert sent(first)[0] == [("system", "be brief"), ("user", "first")]
    assert sent(second)[0] == [("system", "be brief"), ("user", "first"), ("assistant", "ok"), ("user", "second")]


def test_a_recorded_conversation_sends_its_later_human_turns_asking_each_recorded_answers_tokens(tmp_path) -> None:
    """A ShareGPT line of three human turns: its first opens the conversation (the tokens of the answer
    after it asked), the next two follow it, each asking for the words of the answer recorded after it
    (none recorded: the target's max_tokens); the conversation ends with the recording, even where
    ``turns`` allows more; a prompt line opens the next conversation, its later turns the next requests'."""
    lines = [
        {
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "one two three"},
                {"from": "human", "value": "and then"},
                {"from": "gpt", "value": "four five"},
                {"from": "human", "value": "last"},
            ]
        },
        {"prompt": "alone"},
    ]
    dataset = tmp_path / "talks.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = chat_scenario(dataset=str(dataset), max_tokens=7, conversation={"turns": 5})
    (target,) = targets_of(GenerativeTarget, scenario_from_dict(data))
    generation = target.generation
    assert generation is not None and generation.conversation is not None
    drawn = generation.distinct_requests()
    assert drawn is not None and drawn[0].follow_ups == (("and then", 2), ("last", None))
    bodies = [
        json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": r.prompt}], "max_tokens": r.output_tokens or 7}
        ).encode()
        for r in drawn
    ]
    indices = count()

    def next_request() -> tuple[int, bytes]:
        index = next(indices) % 2
        return index, bodies[index]

    talk = Conversation(generation.conversation, next_request, lambda index: drawn[index].follow_ups, generation.max_tokens)
    sent_turns = []
    for answer in ("a1", "a2", "a3", "b1", "b2"):
        turn, body = talk.next_turn()
        sent_turns.append((turn, *sent(body)))
        talk.answered(answer)
    assert sent_turns == [
        (1, [("user", "hi")], 3),
        (2, [("user", "hi"), ("assistant", "a1"), ("user", "and then")], 2),
        (3, [("user", "hi"), ("assistant", "a1"), ("user", "and then"), ("assistant", "a2"), ("user", "last")], 7),
        (1, [("user", "alone")], 7),  # the recording ended: the next request opens the next conversation
        (2, [("user", "alone"), ("assistant", "b1"), ("user", "hi")], 3),
    ]


def test_turn_figures_merge_over_workers_by_turn_position() -> None:
    def turn_wire(ttfts: list[float], prompts: list[int]) -> list[object]:
        """A turn position's figures as a worker's engine drains them: TTFT, [prompt tokens counted, sum, min, max]."""
        stats = LatencyStats()
        for ttft in ttfts:
            stats.record_success(ttft)
        return [stats.to_wire(), [len(prompts), sum(prompts), min(prompts), max(prompts)]]

    workers = []
    for ttfts, prompts in (([4.0, 5.0], [50, 52]), ([6.0], [54])):
        wire = GenerationRecord().drain_to_wire()
        # the second turn also has a generation from a server that sent no usage: a time, no prompt tokens
        later = turn_wire([t * 10 for t in ttfts] + [70.0], [p * 4 for p in prompts])
        wire["turns"] = [["chat", 1, turn_wire(ttfts, prompts)], ["chat", 2, later]]
        workers.append(wire)
    master = GenerationRecord()
    for wire in workers:
        master.merge_wire({**wire, "steady": {"chat": _one_generation()}})
    block = generation_figures(master, "chat", steady_s=1.0)
    assert block is not None and block.turns is not None
    first, second = block.turns
    assert (first.turn, first.generations, second.turn, second.generations) == (1, 3, 2, 5)
    assert first.prompt_tokens is not None and (first.prompt_tokens.min, first.prompt_tokens.max) == (50, 54)
    assert first.prompt_tokens.mean == pytest.approx(52.0)
    assert second.prompt_tokens is not None and (second.prompt_tokens.min, second.prompt_tokens.max) == (200, 216)
    assert first.ttft_ms.max == pytest.approx(6.0, rel=0.01) and second.ttft_ms.max == pytest.approx(70.0, rel=0.01)


def _one_generation() -> dict:
    """A steady total of one generation (the block exists when the target had one)."""
    from inferload.measure.generation_record import GenerationTotals

    totals = GenerationTotals()
    totals.counts.add_wire([1, 1, 1, 1, 0, 0, 0])
    return totals.to_wire()


def chat_scenario(shape: dict | None = None, kind: str = "openai-chat", **generation: object) -> dict:
    target = {"name": "chat", "kind": kind, "address": "http://127.0.0.1:1", "model": "m", "generation": generation}
    return {"name": "c", "duration": "3s", "targets": [target], "shape": shape or {"kind": "steady", "users": 1}}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            chat_scenario(conversation={"turns": 1}),
            "targets[0].generation.conversation.turns: must be at least 2; got 1",
        ),
        (
            chat_scenario(conversation={"turns": 2, "think": "1s"}),
            "targets[0].generation.conversation.think: unknown key 'think' (did you mean 'think_time'?)",
        ),
        (
            chat_scenario(conversation={"turns": 2}, stream=False),
            "targets[0].generation: generation.conversation needs stream: true (the engine reads each answer's text"
            " from its events); remove one",
        ),
        (
            chat_scenario(kind="openai-completions", conversation={"turns": 2}),
            "targets[0].generation.conversation: a conversation is a chat's messages: only an openai-chat target"
            " holds one; this target is openai-completions",
        ),
        (
            chat_scenario({"kind": "poisson", "rate": 5}, conversation={"turns": 2}),
            "targets[0].generation.conversation: needs a closed-loop shape (users hold the conversations, one each);"
            " this scenario's shape is poisson",
        ),
    ],
)
def test_a_conversation_that_cannot_be_held_is_refused_naming_its_key(data: dict, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    assert f"<scenario>: {problem}" in str(caught.value).splitlines()


def test_a_conversation_on_the_python_transport_stops_the_run_at_its_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INFERLOAD_TRANSPORT", "python")
    data = chat_scenario(conversation={"turns": 2})
    data["targets"][0]["address"] = f"http://127.0.0.1:{free_port()}"  # nothing listens: no call is made
    run = run_locust(write_scenario(tmp_path, data), tmp_path, "--skip-start-checks", timeout_s=60)
    assert run.returncode == 2, run.output
    assert (
        "target 'chat': generation.conversation carries each answer's text into the next turn, which the native"
        " engine reads from the stream; this process sends through the Python transport" in run.output
    )
    assert "Traceback" not in run.output


def test_the_console_lists_each_turns_time_to_first_token_and_prompt_tokens() -> None:
    from inferload.results.figures import TURNS_SHOWN, format_table

    def turn(number: int, prompt: float | None) -> dict:
        tokens = None if prompt is None else {"mean": prompt, "min": prompt, "max": prompt}
        return {"turn": number, "generations": 5, "ttft_ms": {"p50": 4.0 * number, "p99": 5.0 * number}, "prompt_tokens": tokens}

    turns = [turn(1, 54.0), turn(2, None), *(turn(n, 100.0 * n) for n in range(3, TURNS_SHOWN + 3))]
    lines = format_table({"chat": {"requests": 10, "generation": {"generations": 10, "turns": turns}}}).splitlines()
    assert "  chat: turn 1: 5 generations, TTFT p50 4.00 ms, p99 5.00 ms, prompt tokens 54 (mean, the server's count)" in lines
    assert "  chat: turn 2: 5 generations, TTFT p50 8.00 ms, p99 10.00 ms" in lines  # no usage: no prompt tokens
    assert "  chat: 2 more turns in summary.json (generation.turns)" in lines
    assert not any(f"turn {TURNS_SHOWN + 1}:" in line for line in lines)
