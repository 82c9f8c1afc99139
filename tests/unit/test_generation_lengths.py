"""A generative target's request lengths (`generation.lengths`): laws drawn once per distinct request
with their seed, or a file of pairs; each request's body asks its own output length with its own
prompt of the asked length (counted with the target's tokenizer when it names one); every bad key
refused at its place; and the summary's account of what was asked against what came back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from inferload.results.summary import lengths_figures
from inferload.scenario.generation import GenerationSpec
from inferload.scenario.lengths import LengthLaw, LengthsSpec, drawn_requests
from inferload.scenario.targets import GenerativeTarget
from inferload.users.classes import user_class_for
from inferload.users.request_pool import RequestData, RequestSource

BASE = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8080", "model": "m"}


def target(generation: dict[str, Any], context: dict[str, Any] | None = None, **keys: Any) -> GenerativeTarget:
    return GenerativeTarget.model_validate({**BASE, "generation": generation, **keys}, context=context)


def test_each_law_draws_within_its_bounds_and_the_seed_repeats_the_draws() -> None:
    rng = np.random.default_rng(3)
    assert set(LengthLaw(law="fixed", tokens=7).draw(rng, 50).tolist()) == {7}
    uniform = LengthLaw(law="uniform", min=4, max=8).draw(rng, 2000)
    assert set(uniform.tolist()) == {4, 5, 6, 7, 8}  # both ends included
    normal = LengthLaw(law="normal", mean=100, sd=40, min=60, max=150).draw(rng, 5000)
    assert normal.min() == 60 and normal.max() == 150  # cut to its bounds
    assert 95 <= float(np.median(normal)) <= 105
    spec = LengthsSpec(output_tokens=LengthLaw(law="uniform", min=1, max=1000), requests=20, seed=9)
    assert drawn_requests(spec, None) == drawn_requests(LengthsSpec.model_validate(spec.model_dump()), None)
    other = drawn_requests(spec.model_copy(update={"seed": 10}), None)
    assert [d.output_tokens for d in other] != [d.output_tokens for d in drawn_requests(spec, None)]


@pytest.mark.parametrize(
    ("lengths", "says"),
    [
        ({}, "give input_tokens, output_tokens (laws) or file"),
        ({"output_tokens": {"law": "uniform", "min": 9}}, "law uniform takes min, max; missing max"),
        ({"output_tokens": {"law": "fixed", "tokens": 5, "sd": 2}}, "law fixed takes tokens; sd not for this law"),
        ({"output_tokens": {"law": "uniform", "min": 9, "max": 3}}, "min 9 is above max 3"),
        ({"output_tokens": {"law": "fixed", "tokens": 0}}, "greater than or equal to 1"),
        ({"output_tokens": {"law": "poisson", "tokens": 5}}, "'fixed', 'uniform' or 'normal'"),
        (
            {"file": "l.jsonl", "output_tokens": {"law": "fixed", "tokens": 5}},
            "as laws (input_tokens, output_tokens) or as a file",
        ),
        ({"file": "l.jsonl", "requests": 10}, "a lengths file's lines are the requests: remove requests"),
    ],
)
def test_bad_lengths_are_refused_at_their_key(lengths: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        target({"lengths": lengths})
    messages = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]
    assert any(says in message and where.startswith("generation.lengths") for where, message in messages), messages


def test_lengths_and_the_keys_they_replace_are_one_or_the_other() -> None:
    fixed = {"law": "fixed", "tokens": 5}
    prompts = [{"name": "p", "dtype": "BYTES", "shape": [1], "data": {"generator": "constant", "value": "hi"}}]
    cases: tuple[tuple[dict[str, Any], dict[str, Any], str], ...] = (
        (
            {"lengths": {"output_tokens": fixed}, "max_tokens": 9},
            {},
            "sets each request's max_tokens: remove generation.max_tokens",
        ),
        ({"lengths": {"input_tokens": fixed}, "prompt": "hi"}, {}, "makes each request's prompt: remove generation.prompt"),
        ({"lengths": {"input_tokens": fixed}}, {"inputs": prompts}, "gives the prompts already: lengths makes them"),
    )
    for generation, keys, says in cases:
        with pytest.raises(ValidationError, match=says):
            target(generation, **keys)
    # real prompts from a data set with drawn answer lengths: allowed
    assert target({"lengths": {"output_tokens": fixed}}, inputs=prompts).generation is not None


def test_a_lengths_file_is_read_relative_to_the_scenario_and_a_bad_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text('{"input_tokens": 4, "output_tokens": 2}\n\n{"output_tokens": 6}\n')
    (tmp_path / "bad.jsonl").write_text('{"input_tokens": 4}\n{"output_tokens": "six"}\n')
    context = {"base_dir": str(tmp_path)}
    made = target({"lengths": {"file": "pairs.jsonl"}}, context)
    assert made.generation is not None and made.generation.lengths is not None
    drawn = drawn_requests(made.generation.lengths, None)
    assert [(d.input_tokens, d.output_tokens) for d in drawn] == [(4, 2), (None, 6)]
    assert drawn[0].prompt is not None and len(drawn[0].prompt.split()) == 4 and drawn[1].prompt is None
    for name, says in (
        ("bad.jsonl", f"{tmp_path / 'bad.jsonl'}: line 2: output_tokens: expected an integer from 1 to 1,000,000; got 'six'"),
        ("missing.jsonl", "does not exist"),
    ):
        with pytest.raises(ValidationError) as caught:
            target({"lengths": {"file": name}}, context)
        (error,) = caught.value.errors()
        assert error["loc"] == ("generation", "lengths", "file") and says in error["msg"], error


def test_each_distinct_request_asks_its_own_length_with_a_prompt_of_its_own_length() -> None:
    lengths = {
        "input_tokens": {"law": "uniform", "min": 3, "max": 30},
        "output_tokens": {"law": "normal", "mean": 20, "sd": 5, "min": 10, "max": 30},
        "requests": 40,
    }
    made = target({"lengths": lengths})
    assert RequestSource(made, Path(".")).size == 40  # the pool holds every drawn request
    cls = user_class_for(made, Path("."))
    assert made.generation is not None and made.generation.lengths is not None
    drawn = drawn_requests(made.generation.lengths, None)
    prompts = set()
    for index, own in enumerate(drawn):
        body = json.loads(cls.encode_request(RequestData(index=index, samples=(), arrays=())))
        assert body["max_tokens"] == own.output_tokens and 10 <= body["max_tokens"] <= 30
        prompt = body["messages"][0]["content"]
        assert len(prompt.split()) == own.input_tokens == own.counted_input_tokens
        prompts.add(prompt.split()[0] + " " + prompt.split()[1])
    assert len(prompts) > 30  # prompts differ from their first words on


def test_with_a_tokenizer_every_prompt_holds_its_asked_tokens(tmp_path: Path) -> None:
    pytest.importorskip("inferload._native", reason="the engine counts tokens (make build)")
    from inferload import _native
    from inferload.local.models.llm import write_tokenizer

    tokenizer = str(write_tokenizer(tmp_path / "tokenizer.json"))
    # (the built-in tokenizer counts 3 tokens for the cheapest word at the start of a text: no prompt is shorter)
    spec = LengthsSpec(input_tokens=LengthLaw(law="uniform", min=3, max=300), requests=200)
    drawn = drawn_requests(spec, tokenizer)
    assert all(d.counted_input_tokens == d.input_tokens for d in drawn)
    prompts = [d.prompt or "" for d in drawn]
    assert _native.count_tokens(tokenizer, prompts) == [d.input_tokens for d in drawn]  # counted whole, as the engine counts


def test_the_summary_says_what_was_asked_and_how_much_of_it_came_back() -> None:
    generation = GenerationSpec.model_validate(
        {"lengths": {"input_tokens": {"law": "fixed", "tokens": 12}, "output_tokens": {"law": "uniform", "min": 10, "max": 30}}}
    )
    assert generation.lengths is not None
    asked = [d.output_tokens or 0 for d in drawn_requests(generation.lengths, None)]
    figures = lengths_figures(generation, achieved_per_request=float(np.mean(asked)) / 2)
    assert figures.requests == 1000 and figures.input_counted_in == "words"
    assert figures.input_tokens is not None and (figures.input_tokens.mean, figures.input_tokens.min) == (12.0, 12)
    assert figures.output_tokens_asked is not None and figures.output_tokens_asked.min >= 10
    assert figures.output_tokens_asked.max <= 30 and figures.output_tokens_achieved_pct == 50.0
    assert lengths_figures(generation, None).output_tokens_achieved_pct is None


def test_prompts_in_a_group_share_their_prefix_and_then_differ() -> None:
    spec = LengthsSpec.model_validate(
        {"input_tokens": {"law": "uniform", "min": 5, "max": 20}, "requests": 30, "shared_prefix": {"groups": 3, "tokens": 12}}
    )
    drawn = drawn_requests(spec, None)
    prefixes = [" ".join((d.prompt or "").split()[:12]) for d in drawn]
    assert all(prefixes[i] == prefixes[i % 3] for i in range(30)) and len(set(prefixes[:3])) == 3
    assert len({" ".join((d.prompt or "").split()[12:14]) for d in drawn}) > 20  # their own parts differ
    assert all(d.counted_input_tokens == (d.input_tokens or 0) + 12 for d in drawn)  # the prompt as sent, prefix included
    with pytest.raises(ValidationError, match="shared_prefix starts the prompts that input_tokens makes"):
        LengthsSpec.model_validate({"output_tokens": {"law": "fixed", "tokens": 5}, "shared_prefix": {"groups": 2, "tokens": 4}})


def test_with_a_tokenizer_a_shared_prefix_and_its_prompts_hold_their_tokens(tmp_path: Path) -> None:
    pytest.importorskip("inferload._native", reason="the engine counts tokens (make build)")
    from inferload.local.models.llm import write_tokenizer

    tokenizer = str(write_tokenizer(tmp_path / "tokenizer.json"))
    spec = LengthsSpec.model_validate(
        {"input_tokens": {"law": "uniform", "min": 1, "max": 80}, "requests": 100, "shared_prefix": {"groups": 4, "tokens": 30}}
    )
    assert all(d.counted_input_tokens == (d.input_tokens or 0) + 30 for d in drawn_requests(spec, tokenizer))


def test_a_trace_s_hash_ids_give_each_block_the_same_words_wherever_it_is_named(tmp_path: Path) -> None:
    """Mooncake's layout: blocks of `block_tokens` tokens; two requests naming blocks 7 and 8 share
    their first two blocks' words, then differ; the last block is cut to the prompt's length."""
    lines = [
        {"input_tokens": 10, "output_tokens": 3, "hash_ids": [7, 8, 9]},
        {"input_tokens": 9, "output_tokens": 3, "hash_ids": [7, 8, 5]},
        {"input_tokens": 4, "output_tokens": 2, "hash_ids": [8]},
        {"input_tokens": 6},
    ]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    made = target({"lengths": {"file": "trace.jsonl", "block_tokens": 4}}, {"base_dir": str(tmp_path)})
    assert made.generation is not None and made.generation.lengths is not None
    drawn = drawn_requests(made.generation.lengths, None)
    words = [(d.prompt or "").split() for d in drawn]
    assert [len(w) for w in words] == [10, 9, 4, 6] and [d.counted_input_tokens for d in drawn] == [10, 9, 4, 6]
    assert words[0][:8] == words[1][:8] and words[0][8:] != words[1][8:9]  # blocks 7 and 8 shared, then 9 against 5
    assert words[2] == words[0][4:8]  # block 8 alone: the same words as in the others
    assert words[3] != words[0][:6]  # a line without hash_ids: its own words


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (
            {"input_tokens": 10, "hash_ids": [1, 2]},
            "request 1: 2 hash_ids for input_tokens 10: blocks of 4 tokens (block_tokens) make 3",
        ),
        ({"output_tokens": 10, "hash_ids": [1]}, "line 1: hash_ids name the prompt's blocks: give its input_tokens too"),
        ({"input_tokens": 3, "hash_ids": [-1]}, "line 1: hash_ids: expected a list of block ids (whole numbers >= 0)"),
        ({"input_tokens": 3, "hash_ids": []}, "line 1: hash_ids: expected a list of block ids"),
    ],
)
def test_hash_ids_that_cannot_make_the_prompt_are_named_with_their_line(tmp_path: Path, line: dict[str, Any], says: str) -> None:
    (tmp_path / "trace.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValidationError) as caught:
        target({"lengths": {"file": "trace.jsonl", "block_tokens": 4}}, {"base_dir": str(tmp_path)})
    assert says in str(caught.value), caught.value


def test_with_a_tokenizer_blocked_prompts_hold_their_tokens_and_share_their_blocks(tmp_path: Path) -> None:
    pytest.importorskip("inferload._native", reason="the engine counts tokens (make build)")
    from inferload.local.models.llm import write_tokenizer

    tokenizer = str(write_tokenizer(tmp_path / "tokenizer.json"))
    lines = [{"input_tokens": 60, "hash_ids": [1, 2]}, {"input_tokens": 50, "hash_ids": [1, 3]}]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    made = target(
        {"lengths": {"file": "trace.jsonl", "block_tokens": 32}, "tokenizer": str(tokenizer)}, {"base_dir": str(tmp_path)}
    )
    assert made.generation is not None and made.generation.lengths is not None
    drawn = drawn_requests(made.generation.lengths, tokenizer)
    first, second = ((d.prompt or "").split() for d in drawn)
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert shared >= 28  # block 1's words (about 32 tokens) in both
    assert all(abs((d.counted_input_tokens or 0) - (d.input_tokens or 0)) <= 3 for d in drawn), drawn
