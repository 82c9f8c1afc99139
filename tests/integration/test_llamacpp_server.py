"""The generative kinds against a real LLM server: llama.cpp (the ``xllamacpp`` wheel) serving the
built-in LLM (4 layers, random weights, words only). Its truth is what llama.cpp itself counts: every
answer is exactly ``max_tokens`` tokens in its ``usage``, one content event each; its stream starts
with a role-only event and ends with a usage-only tail (with its per-request ``timings``) and
``[DONE]``, none of them tokens. The model's tokenizer, named by the target, counts in the engine
exactly the tokens the server's usage counts, request by request; its /metrics (the target's
``metrics_url``) gives the sequences it decoded together per call. `inferload servers up` starts it and `down` leaves nothing running.
Prompt and answer lengths a target draws, its data set gives, or a recorded trace gives each arrival,
are held by it: every answer as long as its request asked; a conversation's later turns carry its
history, which llama.cpp's prompt token counts show.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferload.local.models.llm import llm_model_path, tokenizer_path
from tests.support.cli import inferload
from tests.support.llamacpp import LLM_NAME, llamacpp_server
from tests.support.scenario_factory import write_scenario

pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

MAX_TOKENS = 12


def run(folder: Path, target: dict[str, Any], duration: str = "2s") -> Any:
    """A 2-user run of ``target``: 2 s of steady load held 12 (uncached 56-token prompts) to 274
    answers in this module's runs, with nothing else on this 2-core machine."""
    data = {"name": "llm", "duration": duration, "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    folder.mkdir(exist_ok=True)
    scenario = write_scenario(folder, data)
    return inferload("run", str(scenario), "--headless", "--out", str(folder / "out"))


def chat_figures(folder: Path, llama: str, generation: dict[str, Any], duration: str = "2s") -> tuple[dict[str, Any], str]:
    """A chat target with ``generation`` run against llama.cpp: its summary figures, and the console."""
    target = {"name": "chat", "kind": "openai-chat", "address": llama, "model": LLM_NAME, "generation": generation}
    done = run(folder, target, duration)
    assert done.returncode == 0, done.stdout + done.stderr
    figures: dict[str, Any] = json.loads((folder / "out" / "summary.json").read_text())["targets"]["chat"]
    return figures, done.stdout


def prefix_cache_hit_pct(folder: Path, llama: str, lengths: dict[str, Any]) -> float:
    """A chat target with ``lengths`` run against llama.cpp: the share of the prompt tokens asked that
    llama.cpp's prompt cache held (its /metrics, over the steady state). 3 s of steady state: a share
    over 1 s of a busy machine's few answers weighs each slot's first, cold prompts too much (in
    abc3160's clean clone a 2 s run of the trace's shared blocks read 31 % held, under the 50 % asked)."""
    target = {
        "name": "chat",
        "kind": "openai-chat",
        "address": llama,
        "model": LLM_NAME,
        "generation": {"lengths": lengths, "ignore_eos": True},
        "metrics_url": f"{llama}/metrics",
    }
    done = run(folder, target, duration="4s")
    assert done.returncode == 0, done.stdout + done.stderr
    side = json.loads((folder / "out" / "summary.json").read_text())["targets"]["chat"]["server_side"]
    return float(side["prefix_cache_hit_pct"])


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One llama.cpp server for the module: its URL."""
    with llamacpp_server(tmp_path_factory.mktemp("llamacpp")) as url:
        yield url


def test_prompt_and_answer_lengths_from_a_file_are_sent_and_held_by_the_server(tmp_path: Path, llama: str) -> None:
    """Two requests' lengths from a file: prompts made to 8 and 20 tokens of the model's tokenizer,
    asking for 3 and 9 tokens; llama.cpp generates what each asks (the built-in LLM never ends early)."""
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text('{"input_tokens": 8, "output_tokens": 3}\n{"input_tokens": 20, "output_tokens": 9}\n')
    tokenizer = str(tokenizer_path(llm_model_path()))
    generation = {"lengths": {"file": str(lengths)}, "ignore_eos": True, "tokenizer": tokenizer}
    figures, stdout = chat_figures(tmp_path / "lengths", llama, generation)
    tokens = figures["generation"]
    assert figures["failures"] == 0 and tokens["generations"] > 5
    assert tokens["lengths"]["requests"] == 2 and tokens["lengths"]["input_counted_in"] == "tokens"
    assert tokens["lengths"]["input_tokens"] == {"mean": 14.0, "min": 8, "max": 20}
    assert tokens["lengths"]["output_tokens_asked"] == {"mean": 6.0, "min": 3, "max": 9}
    # each request got what it asked: the longest answer is 9 tokens, and the mean lies between the two
    assert tokens["max_output_tokens"] == 9 and 3 <= tokens["output_tokens_per_request"] <= 9
    assert "output tokens achieved" in stdout and "prompt tokens (mean)" in stdout  # the console table
    achieved = tokens["lengths"]["output_tokens_achieved_pct"]
    assert achieved == pytest.approx(100 * tokens["output_tokens_per_request"] / 6.0, abs=0.01)


def test_prompts_that_share_a_prefix_show_as_the_server_s_prefix_cache_hits(tmp_path: Path, llama: str) -> None:
    """Prompts of 8 drawn words after one shared prefix of 48, against prompts of 56 words of their own,
    3,000 distinct of each so that none repeats in the run (llama.cpp also keeps whole prompts it has
    seen: 16 prompts in rotation read 99 % held here): llama.cpp computes only what its cached prompts
    do not hold, and its /metrics counts the tokens it took from them; the share of the prompt tokens
    asked that it held is high for the first (84 % measured) and low for the second (their chat
    template's few tokens are all they share: 2.5 % measured)."""

    def hit_pct(name: str, lengths: dict[str, Any]) -> float:
        return prefix_cache_hit_pct(tmp_path / name, llama, lengths)

    def fixed(tokens: int) -> dict[str, Any]:
        return {"law": "fixed", "tokens": tokens}

    prefix = {"groups": 1, "tokens": 48}
    shared = hit_pct("shared", {"input_tokens": fixed(8), "output_tokens": fixed(2), "requests": 3000, "shared_prefix": prefix})
    own = hit_pct("own", {"input_tokens": fixed(56), "output_tokens": fixed(2), "requests": 3000})
    assert shared >= 50.0 and own <= 30.0, (shared, own)


def test_a_trace_s_shared_blocks_show_as_the_server_s_prefix_cache_hits(tmp_path: Path, llama: str) -> None:
    """Mooncake's `hash_ids` through `trace-to-replay --hash-ids-field`: 3,000 requests of two blocks
    of 48 tokens, the first one of 4 shared blocks, against 3,000 whose blocks are all their own: the
    share of the prompt tokens llama.cpp held in its cache is high for the first and low for the
    second, as with `shared_prefix` above."""

    def hit_pct(name: str, first_block: Any) -> float:
        rows = [
            {"timestamp": i, "input_length": 56, "output_length": 2, "hash_ids": [first_block(i), 10_000 + i]}
            for i in range(3000)
        ]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        fields = [
            "--input-tokens-field",
            "input_length",
            "--output-tokens-field",
            "output_length",
            "--hash-ids-field",
            "hash_ids",
        ]
        out = tmp_path / f"{name}.csv"
        done = inferload("trace-to-replay", str(tmp_path / f"{name}.jsonl"), "--time-unit", "ms", *fields, "--out", str(out))
        assert done.returncode == 0, done.stdout + done.stderr
        lengths = {"file": str(tmp_path / f"{name}.lengths.jsonl"), "block_tokens": 48}
        return prefix_cache_hit_pct(tmp_path / name, llama, lengths)

    shared = hit_pct("shared", lambda i: i % 4)
    own = hit_pct("own", lambda i: 20_000 + i)
    assert shared >= 50.0 and own <= 30.0, (shared, own)


def test_a_data_set_of_chat_messages_and_sharegpt_conversations_is_sent_and_held_by_the_server(
    tmp_path: Path, llama: str
) -> None:
    """A data set of two requests: a chat with a system turn asking 24 tokens, and a ShareGPT
    conversation whose recorded answer (counted with the model's tokenizer) sets its length; llama.cpp
    takes both and generates what each asks."""
    from inferload import _native

    tokenizer = str(tokenizer_path(llm_model_path()))
    answer = "the keeper lights the lamp every night"
    answer_tokens = _native.count_tokens(tokenizer, [answer])[0]
    assert 1 <= answer_tokens < 24
    lines = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "output_tokens": 24},
        {"conversations": [{"from": "human", "value": "Who keeps the light?"}, {"from": "gpt", "value": answer}]},
    ]
    dataset = tmp_path / "chats.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    generation = {"dataset": str(dataset), "ignore_eos": True, "tokenizer": tokenizer}
    figures, _ = chat_figures(tmp_path / "dataset", llama, generation)
    tokens = figures["generation"]
    assert figures["failures"] == 0 and tokens["generations"] > 5  # llama.cpp took both requests
    assert tokens["lengths"]["requests"] == 2 and tokens["lengths"]["input_counted_in"] == "tokens"
    assert tokens["lengths"]["output_tokens_asked"] == {"mean": (24 + answer_tokens) / 2, "min": answer_tokens, "max": 24}
    assert tokens["max_output_tokens"] == 24 and answer_tokens <= tokens["output_tokens_per_request"] <= 24


def test_each_turn_of_a_conversation_carries_its_history_and_the_last_answer(tmp_path: Path, llama: str) -> None:
    """Conversations of three turns, one prompt: llama.cpp's own count of each turn's prompt tokens
    (its ``usage``) grows by the history. Without the answer, a second turn would be the first prompt
    twice (its template included: about twice the first turn's count); the answer of 16 tokens it
    carries makes it more than that by at least half the answer (16 generated tokens re-tokenized in
    context: 120 to 180 more, measured), and a third turn carries one answer more."""
    conversation = {"turns": 3, "think_time": "0.05s"}
    generation = {"max_tokens": 16, "prompt": "the keeper of the light", "conversation": conversation}
    # (4 s: 20 conversations' turns, 6 to 8 each, in 2 s here; each turn needs 3 on a busy machine)
    figures, stdout = chat_figures(tmp_path / "conversation", llama, generation, duration="4s")
    assert figures["failures"] == 0, stdout
    turns = figures["generation"]["turns"]
    assert [turn["turn"] for turn in turns] == [1, 2, 3]
    assert all(turn["generations"] >= 3 for turn in turns), turns
    first, second, third = (turn["prompt_tokens"] for turn in turns)
    assert first["min"] == first["max"]  # the same prompt opens every conversation
    assert second["min"] > 2 * first["max"] + 8, turns  # the first prompt twice, and the first answer
    assert third["min"] > second["max"] + 8, turns  # and one answer more
    assert sum(turn["generations"] for turn in turns) == figures["generation"]["generations"]


def test_a_recorded_conversation_replays_its_human_turns_with_its_answers_lengths(tmp_path: Path, llama: str) -> None:
    """A ShareGPT conversation of two human turns under ``turns: 4``: every conversation has the two
    turns it recorded, no more; the second carries the first and its answer (llama.cpp's prompt count
    grows), and each answer is as long as the one recorded after its turn (the built-in LLM never
    stops early): each generation's mean output tokens is the two recorded answers' weighted by turn."""
    from inferload import _native

    tokenizer = str(tokenizer_path(llm_model_path()))
    first, second = "the keeper lights the lamp", "every night the sea is dark and wide and cold"
    first_tokens, second_tokens = _native.count_tokens(tokenizer, [first, second])  # as the target counts them
    assert first_tokens < second_tokens
    talk = [
        {"from": "human", "value": "Who keeps the light?"},
        {"from": "gpt", "value": first},
        {"from": "human", "value": "And then?"},
        {"from": "gpt", "value": second},
    ]
    dataset = tmp_path / "talks.jsonl"
    dataset.write_text(json.dumps({"conversations": talk}) + "\n")
    generation = {"dataset": str(dataset), "ignore_eos": True, "tokenizer": tokenizer, "conversation": {"turns": 4}}
    figures, stdout = chat_figures(tmp_path / "recorded", llama, generation)
    tokens = figures["generation"]
    assert figures["failures"] == 0, stdout
    assert [turn["turn"] for turn in tokens["turns"]] == [1, 2]
    opening, follow_up = (turn["prompt_tokens"] for turn in tokens["turns"])
    assert follow_up["min"] > opening["max"] + first_tokens // 2  # the first turn and its answer, and the new turn
    ones, twos = (turn["generations"] for turn in tokens["turns"])
    assert abs(ones - twos) <= 2  # each user's conversations: turn 1, then turn 2 (one may be cut by the end)
    expected = (first_tokens * ones + second_tokens * twos) / (ones + twos)  # the steady generations' mean
    assert tokens["output_tokens_per_request"] == pytest.approx(expected, abs=0.01)


def test_a_recorded_trace_replays_its_arrivals_and_each_requests_lengths(tmp_path: Path, llama: str) -> None:
    """A trace in Mooncake's layout (JSON lines: `timestamp` ms, `input_length`, `output_length`):
    `trace-to-replay` writes its arrivals with each row's request (`sample`) and the distinct lengths;
    the replay sends every arrival with its own prompt length and `max_tokens`, and llama.cpp
    generates exactly what each asked: the tokens of the steady generations are the trace's own."""
    rows = [
        {"timestamp": 1_700_000_000_000 + 125 * i, "input_length": 4 + 3 * (i % 6), "output_length": 2 + 3 * (i % 3)}
        for i in range(48)
    ]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    fields = ["--input-tokens-field", "input_length", "--output-tokens-field", "output_length"]
    done = inferload("trace-to-replay", str(trace), "--time-unit", "ms", *fields, "--out", str(tmp_path / "trace.csv"))
    assert done.returncode == 0, done.stdout + done.stderr
    pairs = [json.loads(line) for line in (tmp_path / "trace.lengths.jsonl").read_text().splitlines()]
    assert len(pairs) == len({(r["input_length"], r["output_length"]) for r in rows})  # one request per distinct pair
    assert f"{len(pairs)} distinct requests" in done.stdout
    tokenizer = str(tokenizer_path(llm_model_path()))
    generation = {"lengths": {"file": str(tmp_path / "trace.lengths.jsonl")}, "ignore_eos": True, "tokenizer": tokenizer}
    target = {"name": "chat", "kind": "openai-chat", "address": llama, "model": LLM_NAME, "generation": generation}
    shape = {"kind": "replay", "file": str(tmp_path / "trace.csv"), "max_in_flight": 16}
    data = {"name": "trace", "duration": "6s", "warmup": "1s", "targets": [target], "shape": shape}
    folder = tmp_path / "replay"
    folder.mkdir()
    done = inferload("run", str(write_scenario(folder, data)), "--headless", "--out", str(folder / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((folder / "out" / "summary.json").read_text())
    figures = summary["targets"]["chat"]
    tokens = figures["generation"]
    # the steady rows (1 s to the trace's end at 5.875 s): 125 ms apart, each its own output length
    steady = [r["output_length"] for i, r in enumerate(rows) if 0.125 * i >= 1.0]
    assert figures["failures"] == 0 and abs(tokens["generations"] - len(steady)) <= 2, (tokens["generations"], len(steady))
    assert abs(tokens["output_tokens"] - sum(steady)) <= 2 * max(steady), (tokens["output_tokens"], sum(steady))
    assert tokens["max_output_tokens"] == max(steady) and tokens["lengths"]["requests"] == len(pairs)


def test_the_servers_requests_per_window_show_where_its_slots_are_the_limit(tmp_path: Path, llama: str) -> None:
    """llama.cpp's 4 slots (its --parallel): 2 users never wait for one, 16 users keep about 12 waiting.
    Its gauges as each window closes (windows.csv: waiting, running) hold that, within what the users
    can have in flight; report.html draws them under the tokens and names where the server was the limit.
    (Not 8 users: equal requests finish together, and when the page was read just as four ended and the
    four waiting took their slots, every steady sample of a clean-clone run read 0 waiting.)"""
    from inferload.local.servers.llamacpp_local import PARALLEL

    rows_by_users = {}
    for users in (2, 4 * PARALLEL):
        folder = tmp_path / f"users-{users}"
        folder.mkdir()
        target: dict[str, Any] = {"name": "chat", "kind": "openai-chat", "address": llama, "model": LLM_NAME}
        target |= {"generation": {"max_tokens": MAX_TOKENS}, "metrics_url": f"{llama}/metrics"}
        data = {"name": "llm", "duration": "5s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": users}}
        done = inferload("run", str(write_scenario(folder, data)), "--headless", "--out", str(folder / "out"))
        assert done.returncode == 0, done.stdout + done.stderr
        with open(folder / "out" / "windows.csv", newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row["phase"] == "steady" and row["server_running"]]
        assert len(rows) >= 2, rows  # a reading as each steady window closed
        for row in rows:
            waiting, running = float(row["server_waiting"]), float(row["server_running"])
            assert 0 <= running <= min(users, PARALLEL) and waiting + running <= users, row
            assert row["server_kv_cache_used_pct"] == ""  # llama.cpp's page has no KV gauge
        rows_by_users[users] = rows
        report = (folder / "out" / "report.html").read_text()
        assert "TTFT and TPOT, tokens and goodput per second, the server&#x27;s requests over time" in report
    assert all(float(row["server_waiting"]) == 0 for row in rows_by_users[2])  # free slots: none waits
    assert max(float(row["server_waiting"]) for row in rows_by_users[4 * PARALLEL]) >= 1
    assert (
        "chat: no request waited at the server in the steady state" in (tmp_path / "users-2" / "out" / "report.html").read_text()
    )
    crowded = (tmp_path / f"users-{4 * PARALLEL}" / "out" / "report.html").read_text()
    assert "chat: the server kept requests waiting from " in crowded and "its slots are the limit at this load" in crowded


def test_a_chat_target_on_llama_cpp_counts_the_server_s_tokens_and_times_each_answer(tmp_path: Path, llama: str) -> None:
    tokenizer = str(tokenizer_path(llm_model_path()))
    generation = {"max_tokens": MAX_TOKENS, "prompt": "the keeper of the light", "tokenizer": tokenizer}
    chat = run(
        tmp_path / "chat",
        {
            "name": "chat",
            "kind": "openai-chat",
            "address": llama,
            "model": LLM_NAME,
            "generation": generation,
            "metrics_url": f"{llama}/metrics",
        },
    )
    wrong = run(tmp_path / "wrong", {"name": "chat", "kind": "openai-chat", "address": llama, "model": "llama-3"})
    assert chat.returncode == 0, chat.stdout + chat.stderr
    figures = json.loads((tmp_path / "chat" / "out" / "summary.json").read_text())["targets"]["chat"]
    assert figures["failures"] == 0 and figures["requests"] > 5
    tokens = figures["generation"]
    assert tokens["token_source"] == "usage" and tokens["output_tokens_per_request"] == MAX_TOKENS
    assert tokens["max_output_tokens"] == MAX_TOKENS
    # the server's tokenizer in the engine: the same count as the server's usage, on every request
    assert tokens["token_count"] == {
        "compared": tokens["generations"],
        "differing": 0,
        "tokenizer_tokens": tokens["output_tokens"],
        "usage_tokens": tokens["output_tokens"],
        "difference_pct": 0.0,
    }
    stream = figures["decoupled"]
    assert stream["responses_per_request"] == MAX_TOKENS  # one event per token
    assert 0 < stream["first_response_ms"]["p50"] <= figures["latency_ms"]["p50"]
    assert 0 < tokens["tpot_ms"]["p50"] < figures["latency_ms"]["p50"]
    # llama.cpp's own `timings` of each request, joined to it: the client's TTFT is the server's prefill
    # plus the residual, request by request; a residual below 0 (llama.cpp's prompt time a little longer
    # than the client's TTFT: the means differed by 0.015 ms here once) is floored at 0, so the means add
    # up to no less
    server = tokens["server"]
    assert server["generations"] == tokens["generations"]
    assert server["prefill_ms"]["p50"] > 0 and server["decode_ms_per_token"]["p50"] > 0
    joined = server["prefill_ms"]["mean"] + server["ttft_residual_ms"]["mean"]
    assert stream["first_response_ms"]["mean"] - 0.01 <= joined < stream["first_response_ms"]["mean"] + 0.5
    # llama.cpp's /metrics: two users' streams decode together in its 4 slots, one or two per decode call
    side = figures["server_side"]
    # (llama.cpp prints its running average to 6 digits: the slot-decodes derived from it may be off by
    # one or two, so the bounds have a little room)
    assert 0.95 <= side["avg_batch_size"] <= 2.05, side
    assert side["queue_ms_avg"] is None and "requests_deferred" in side["unknown"]["queue_ms_avg"]
    assert 0.0 <= side["prefix_cache_hit_pct"] <= 100.0 and "preemptions" not in side  # llama.cpp counts none
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert f"does not list model 'llama-3'; it serves: '{LLM_NAME}'" in wrong.stderr
