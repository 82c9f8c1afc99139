"""A generative target's data set (`generation.dataset`): a JSONL file whose every line is one
distinct request, a prompt, an OpenAI ``messages`` list or a ShareGPT conversation, sent in turn
with its own output tokens where the line gives them (a ShareGPT answer's length where it does
not); every bad line refused with the file and the line named; and the summary's prompt lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from inferload.results.summary import lengths_figures
from inferload.scenario.targets import GenerativeTarget, Target
from inferload.users.classes import user_class_for
from inferload.users.request_pool import RequestData, RequestSource

BASE = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8080", "model": "m"}

LINES: list[dict[str, Any]] = [
    {"prompt": "Tell me a story.", "output_tokens": 7},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]},
    {
        "conversations": [
            {"from": "human", "value": "What is a lighthouse?"},
            {"from": "gpt", "value": "A tower with a light that guides ships"},
            {"from": "human", "value": "Who keeps it?"},
        ]
    },
]


def dataset_target(tmp_path: Path, lines: list[Any], kind: str = "openai-chat", **generation: Any) -> GenerativeTarget:
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    data = {**BASE, "kind": kind, "generation": {"dataset": "requests.jsonl", **generation}}
    return GenerativeTarget.model_validate(data, context={"base_dir": str(tmp_path)})


def bodies(made: Target) -> list[dict[str, Any]]:
    cls = user_class_for(made, Path("."))
    size = RequestSource(made, Path(".")).size
    return [json.loads(cls.encode_request(RequestData(index=index, samples=(), arrays=()))) for index in range(size)]


def test_each_line_is_a_request_sent_in_turn_as_its_line_says(tmp_path: Path) -> None:
    sent = bodies(dataset_target(tmp_path, LINES, max_tokens=50))
    assert len(sent) == 3  # the pool holds one request per line
    assert sent[0]["messages"] == [{"role": "user", "content": "Tell me a story."}] and sent[0]["max_tokens"] == 7
    assert sent[1]["messages"] == LINES[1]["messages"] and sent[1]["max_tokens"] == 50  # the target's
    # ShareGPT: the first human turn; its recorded answer's length (8 words, no tokenizer) is asked
    assert sent[2]["messages"] == [{"role": "user", "content": "What is a lighthouse?"}] and sent[2]["max_tokens"] == 8


def test_a_completions_target_sends_the_user_turn_as_its_prompt_and_takes_no_messages_line(tmp_path: Path) -> None:
    sent = bodies(dataset_target(tmp_path, [LINES[0], LINES[2]], kind="openai-completions"))
    assert [body["prompt"] for body in sent] == ["Tell me a story.", "What is a lighthouse?"]
    with pytest.raises(ValidationError) as caught:
        dataset_target(tmp_path, LINES, kind="openai-completions")
    (error,) = caught.value.errors()
    assert "generation.dataset: a messages line is a chat's: only an openai-chat target sends it" in error["msg"], error


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "line 2: expected a JSON object"),
        ({"text": "hi"}, "line 2: expected a JSON object with one of prompt, messages, conversations"),
        ({"prompt": "a", "messages": []}, "one of prompt, messages, conversations; got prompt, messages"),
        ({"prompt": ""}, "line 2: prompt: expected a non-empty text"),
        ({"prompt": "a", "output_tokens": 0}, "line 2: output_tokens: expected an integer from 1 to 1,000,000; got 0"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "line 2: messages[0].role: expected one of assistant, developer"),
        ({"messages": [{"role": "user"}]}, "line 2: messages[0]: expected an object with a role and a text content"),
        ({"conversations": [{"from": "gpt", "value": "x"}]}, "line 2: conversations: no human turn"),
        ({"conversations": [{"from": "bot", "value": "x"}]}, "line 2: conversations[0].from: expected one of system, human"),
    ],
)
def test_a_bad_line_is_refused_naming_the_file_and_the_line(tmp_path: Path, line: Any, says: str) -> None:
    (tmp_path / "requests.jsonl").write_text(json.dumps(LINES[0]) + "\n" + (line if isinstance(line, str) else json.dumps(line)))
    with pytest.raises(ValidationError) as caught:
        Target.model_validate({**BASE, "generation": {"dataset": "requests.jsonl"}}, context={"base_dir": str(tmp_path)})
    (error,) = caught.value.errors()
    assert error["loc"] == ("generation", "dataset") and str(tmp_path / "requests.jsonl") in error["msg"], error
    assert says in error["msg"], error


def test_a_data_set_and_the_keys_that_also_make_prompts_are_one_or_the_other(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text(json.dumps(LINES[0]) + "\n")
    prompts = [{"name": "p", "dtype": "BYTES", "shape": [1], "data": {"generator": "constant", "value": "hi"}}]
    fixed = {"law": "fixed", "tokens": 5}
    cases: tuple[tuple[dict[str, Any], dict[str, Any], str], ...] = (
        ({"prompt": "hi"}, {}, "gives each request's prompt: remove generation.prompt"),
        ({"lengths": {"output_tokens": fixed}}, {}, "remove generation.lengths"),
        ({}, {"inputs": prompts}, "gives the prompts already: dataset makes them"),
    )
    for generation, keys, says in cases:
        data = {**BASE, "generation": {"dataset": "requests.jsonl", **generation}, **keys}
        with pytest.raises(ValidationError, match=says):
            Target.model_validate(data, context={"base_dir": str(tmp_path)})


def test_the_summary_counts_each_requests_prompt_and_the_output_it_asked(tmp_path: Path) -> None:
    made = dataset_target(tmp_path, LINES, max_tokens=50)
    assert made.generation is not None
    figures = lengths_figures(made.generation, achieved_per_request=13.0)
    assert figures.requests == 3 and figures.input_counted_in == "words"
    # the message contents in words: 4; "Be brief." + "Hi there": 4; the human turn: 4
    assert figures.input_tokens is not None and (figures.input_tokens.min, figures.input_tokens.max) == (4, 4)
    # asked where a line sets it: 7 (given) and 8 (the ShareGPT answer); the messages line asks the target's 50
    assert figures.output_tokens_asked is not None and (figures.output_tokens_asked.min, figures.output_tokens_asked.max) == (
        7,
        8,
    )


def test_with_a_tokenizer_the_prompts_and_a_sharegpt_answer_are_counted_in_its_tokens(tmp_path: Path) -> None:
    pytest.importorskip("inferload._native", reason="the engine counts tokens (make build)")
    from inferload import _native
    from inferload.local.models.llm import write_tokenizer

    tokenizer = str(write_tokenizer(tmp_path / "tokenizer.json"))
    made = dataset_target(tmp_path, LINES, tokenizer="tokenizer.json")
    drawn = made.generation.distinct_requests() if made.generation is not None else None
    assert drawn is not None
    answer = LINES[2]["conversations"][1]["value"]
    assert drawn[2].output_tokens == _native.count_tokens(tokenizer, [answer])[0]
    assert [d.counted_input_tokens for d in drawn] == _native.count_tokens(
        tokenizer, ["Tell me a story.", "Be brief.\nHi there", "What is a lighthouse?"]
    )
