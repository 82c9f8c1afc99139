"""The generative kinds (`openai-chat`, `openai-completions`, `triton-generate`) run end to end with
`inferload run` against the reference server's generation routes (OpenAI's and Triton's generate
extension), whose truth is scripted: each request's
answer is `stream_responses` content events, event i written i + 1 holds of a fixed draw after
its service started (tests/integration/test_reference_generation.py holds the server to that).

So a chat target's summary says: every request streamed exactly that many content events, the
first one (TTFT) no earlier than one hold, the gaps between them (ICL) about one hold, the request's
latency no shorter than all of its holds; its output tokens are the server's usage count
(`tokens_per_event` per event), the time per output token the content's span over N - 1 tokens;
the server's records count every request sent. A request is good when it meets every goodput
threshold: a time to first token of half a hold is met by none. The start
check names a model the server does not serve, or a route that is not OpenAI's, in one line (exit 2).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import inferload
from tests.support.reference_server import reference_server
from tests.support.scenario_factory import write_scenario

pytest.importorskip("inferload._native", reason="the native engine is not built (make build)")

HOLD_MS = 10.0
#: a hold ends late by the timer's wake-up and the machine's load: the truth bounds figures from below,
#: this generous margin from above
LATE_MS = 500.0
EVENTS = 4
SLOTS = 4
TOKENS_PER_EVENT = 2


def chat_target(address: str, **extra: Any) -> dict[str, Any]:
    return {"name": "chat", "kind": "openai-chat", "address": address, "model": "identity", **extra}


def run(folder: Path, target: dict[str, Any], users: int = 2, env: dict[str, str] | None = None) -> Any:
    data = {"name": "gen", "duration": "3s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": users}}
    folder.mkdir(exist_ok=True)
    scenario = write_scenario(folder, data)
    return inferload("run", str(scenario), "--headless", "--out", str(folder / "out"), env=env)


def summary_of(folder: Path, target: str) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads((folder / "out" / "summary.json").read_text())["targets"][target]
    return figures


def test_a_chat_target_streams_and_its_summary_has_the_scripted_events_and_times(tmp_path: Path) -> None:
    generation = {"tokens_per_event": TOKENS_PER_EVENT, "timings": True}
    with reference_server(
        stream_responses=EVENTS, generation=generation, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS
    ) as server:
        done = run(tmp_path, chat_target(server.http_url, generation={"max_tokens": 16}))
        records = server.records()
    assert done.returncode == 0, done.stdout + done.stderr
    figures = summary_of(tmp_path, "chat")
    assert (figures["server"], figures["kind"], figures["failures"]) == ("openai", "openai-chat", 0)
    assert figures["requests"] > 20  # two users, 2 s steady, ~40 ms a request: ~100
    stream = figures["decoupled"]
    assert stream["requests"] == figures["requests"] and stream["max_responses_per_request"] == EVENTS
    assert stream["responses"] == EVENTS * stream["requests"]  # content events only: no prelude, usage tail or [DONE]
    assert HOLD_MS <= stream["first_response_ms"]["p50"] < HOLD_MS + LATE_MS
    # event deadlines count from the service's start: a late event shortens the gap after it
    assert 0 < stream["inter_response_ms"]["p50"] < HOLD_MS + LATE_MS
    assert figures["latency_ms"]["p50"] >= EVENTS * HOLD_MS
    assert figures["server_side"] is None  # an OpenAI server's counters are not read
    tokens = figures["generation"]
    assert tokens["generations"] == figures["requests"] and tokens["token_source"] == "usage"
    assert "ttft_from_intended_ms" not in tokens  # closed loop: no intended send
    assert tokens["output_tokens"] == EVENTS * TOKENS_PER_EVENT * tokens["generations"]
    assert tokens["output_tokens_per_request"] == tokens["max_output_tokens"] == EVENTS * TOKENS_PER_EVENT
    # the content spans about EVENTS - 1 holds over N - 1 tokens (less when the first event was late)
    span_per_token = (EVENTS - 1) * HOLD_MS / (EVENTS * TOKENS_PER_EVENT - 1)
    assert 0 < tokens["tpot_ms"]["p50"] < span_per_token + LATE_MS
    # no tokenizer counts each event's tokens: each event counts one, so the second token is the second
    # event (two holds) and ITL is ICL
    assert 2 * HOLD_MS <= tokens["ttst_ms"]["p50"] < 2 * HOLD_MS + LATE_MS
    # per window: whole generations' tokens, every one EVENTS * TOKENS_PER_EVENT
    with (tmp_path / "out" / "windows.csv").open() as rows:
        windows = [row for row in csv.DictReader(rows) if row["target"] == "chat" and row["output_tokens"]]
    per_window = [int(row["output_tokens"]) for row in windows]
    assert per_window and all(n % (EVENTS * TOKENS_PER_EVENT) == 0 for n in per_window), per_window
    assert sum(per_window) >= tokens["output_tokens"]  # the warm-up's windows too
    assert tokens["itl_ms"]["p50"] == pytest.approx(stream["inter_response_ms"]["p50"], abs=0.1)
    # the server's own times (llama.cpp's `timings`, as the reference server measures them from the
    # service's start): its prefill is the first event's hold; the client's TTFT adds the residual
    server = tokens["server"]
    assert server["generations"] == tokens["generations"]
    assert HOLD_MS <= server["prefill_ms"]["p50"] < HOLD_MS + LATE_MS
    assert 0 <= server["ttft_residual_ms"]["p50"] < LATE_MS
    # TTFT is the prefill plus the residual, each request's residual floored at 0 (a busy server may
    # stamp its first event after the client read it: CI once, a sum 0.03 ms over the mean TTFT), so
    # the sum of the means is never under the mean TTFT and over it by little
    residual_floored_ms = server["prefill_ms"]["mean"] + server["ttft_residual_ms"]["mean"] - stream["first_response_ms"]["mean"]
    assert -0.01 <= residual_floored_ms < HOLD_MS / 10, (stream["first_response_ms"], server)
    served = records.with_protocol("generate")
    assert served.all() and len(records) >= figures["requests"]


def test_goodput_counts_the_requests_meeting_every_threshold_and_its_slo_sets_the_exit_code(tmp_path: Path) -> None:
    # every first token comes at least one hold after the send: a TTFT threshold of half a hold is met by
    # no request, thresholds of a minute by every one (the reference server fails none)
    minute = 60_000.0
    met = chat_target("", name="met", generation={"goodput": {"ttft_ms": minute, "tpot_ms": minute, "e2e_ms": minute}})
    missed = chat_target("", name="missed", generation={"goodput": {"ttft_ms": HOLD_MS / 2, "e2e_ms": minute}})
    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        targets = [{**t, "address": server.http_url, "slo": {"min_goodput_pct": 50}} for t in (met, missed)]
        data = {"name": "gen", "duration": "3s", "warmup": "1s", "targets": targets, "shape": {"kind": "steady", "users": 2}}
        done = inferload("run", str(write_scenario(tmp_path, data)), "--headless", "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stdout + done.stderr  # one target's goodput SLO failed
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    good = {name: summary["targets"][name]["generation"]["goodput"] for name in ("met", "missed")}
    requests = summary["targets"]["met"]["requests"]
    assert good["met"]["good"] == requests > 5 and good["met"]["attainment_pct"] == 100.0
    # every request good and none failed: goodput is the throughput, over the same steady seconds
    assert good["met"]["per_s"] == pytest.approx(summary["targets"]["met"]["throughput_rps"], rel=1e-6)
    assert (good["missed"]["good"], good["missed"]["attainment_pct"], good["missed"]["per_s"]) == (0, 0.0, 0.0)
    assert (good["missed"]["ttft_ms"], good["missed"]["tpot_ms"]) == (HOLD_MS / 2, None)  # the thresholds, as set
    checks = {check["target"]: (check["metric"], check["value"], check["passed"]) for check in summary["slo"]["checks"]}
    assert checks == {"met": ("min_goodput_pct", 100.0, True), "missed": ("min_goodput_pct", 0.0, False)}
    assert "goodput attainment (%)" in done.stdout


def letter_tokenizer(path: Path) -> Path:
    """A tokenizer whose only token is the reference server's token text (`é`)."""
    model = {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["\u00e9", -1.0]], "byte_fallback": False}
    empty = ("truncation", "padding", "normalizer", "pre_tokenizer", "post_processor", "decoder")
    document: dict[str, Any] = {"version": "1.0", "added_tokens": [], "model": model, **dict.fromkeys(empty)}
    path.write_text(json.dumps(document))
    return path


def test_a_tokenizer_counts_each_event_s_tokens_and_says_how_far_usage_differs(tmp_path: Path) -> None:
    # each content event carries TOKENS_PER_EVENT tokens: the tokenizer finds them where the server sends
    # no usage (N, and each gap shared by the event's tokens), and agrees with usage where it sends one
    tokenizer = letter_tokenizer(tmp_path / "tokenizer.json").name
    counted = chat_target("", name="counted", generation={"include_usage": False, "tokenizer": tokenizer})
    both = chat_target("", name="both", generation={"tokenizer": tokenizer})
    broken = chat_target("", generation={"tokenizer": "scenario.yaml"})
    with reference_server(
        stream_responses=EVENTS, generation={"tokens_per_event": TOKENS_PER_EVENT}, delay={"law": "fixed", "ms": HOLD_MS}
    ) as server:
        targets = [{**t, "address": server.http_url} for t in (counted, both)]
        data = {"name": "gen", "duration": "3s", "warmup": "1s", "targets": targets, "shape": {"kind": "steady", "users": 2}}
        done = inferload("run", str(write_scenario(tmp_path, data)), "--headless", "--out", str(tmp_path / "out"))
        refused = run(tmp_path / "broken", {**broken, "address": server.http_url})
    assert done.returncode == 0, done.stdout + done.stderr
    figures = summary_of(tmp_path, "counted")
    tokens, stream = figures["generation"], figures["decoupled"]
    assert figures["failures"] == 0 and tokens["generations"] == figures["requests"] > 5
    assert tokens["token_source"] == "tokenizer" and "token_count" not in tokens  # no usage to compare with
    assert tokens["output_tokens_per_request"] == tokens["max_output_tokens"] == EVENTS * TOKENS_PER_EVENT
    # the first event brings the second token: TTST is TTFT, request by request
    assert tokens["ttst_ms"]["p50"] == pytest.approx(stream["first_response_ms"]["p50"], abs=0.01)
    # each gap between events is shared by the later event's tokens
    assert tokens["itl_ms"]["p50"] == pytest.approx(stream["inter_response_ms"]["p50"] / TOKENS_PER_EVENT, rel=0.01)
    compared = summary_of(tmp_path, "both")["generation"]
    assert compared["token_source"] == "usage"
    assert compared["token_count"] == {
        "compared": compared["generations"],
        "differing": 0,
        "tokenizer_tokens": compared["output_tokens"],
        "usage_tokens": compared["output_tokens"],
        "difference_pct": 0.0,
    }
    assert "tokens: tokenizer − usage (%)" in done.stdout
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "cannot read a tokenizer from" in refused.stderr and "scenario.yaml" in refused.stderr


def test_in_open_loop_the_time_to_first_token_is_also_timed_from_each_arrival_s_intended_send(tmp_path: Path) -> None:
    # 60 arrivals a second for requests of 4 holds on 4 slots: the slots keep up, the lag is small but
    # never negative, so every request's TTFT from its intended send is at least its TTFT from the send
    shape = {"kind": "constant-rate", "rate": 60, "max_in_flight": 16}
    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        data = {"name": "gen", "duration": "3s", "warmup": "1s", "targets": [chat_target(server.http_url)], "shape": shape}
        done = inferload("run", str(write_scenario(tmp_path, data)), "--headless", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    figures = summary_of(tmp_path, "chat")
    first, intended = figures["decoupled"]["first_response_ms"], figures["generation"]["ttft_from_intended_ms"]
    assert figures["failures"] == 0 and figures["requests"] > 60
    for key in ("p50", "p99", "max"):
        assert intended[key] >= first[key] >= HOLD_MS, key
    assert intended["p50"] < first["p50"] + LATE_MS
    assert "TTFT from intended send p50 (ms)" in done.stdout


def test_a_completions_target_sends_each_prompt_of_its_data_set_and_a_whole_answer_is_timed_whole(tmp_path: Path) -> None:
    (tmp_path / "prompts.txt").write_text("first prompt\nsecond prompt\nthird prompt\n")
    target = {
        "name": "complete",
        "kind": "openai-completions",
        "address": "",
        "model": "identity",
        "inputs": [{"name": "prompt", "dtype": "BYTES", "shape": [1], "data": {"dataset": "prompts.txt"}}],
        "generation": {"stream": False, "max_tokens": 8},
    }
    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        done = run(tmp_path, {**target, "address": server.http_url}, 1)
        records = server.records()
    assert done.returncode == 0, done.stdout + done.stderr
    figures = summary_of(tmp_path, "complete")
    assert figures["failures"] == 0 and figures["requests"] > 10
    assert "decoupled" not in figures and "generation" not in figures  # a whole answer has no stream figures
    assert figures["latency_ms"]["p50"] >= EVENTS * HOLD_MS  # the whole answer waits for every hold
    assert records.with_protocol("generate").all()


def test_the_python_transport_reads_the_stream_whole_and_says_so(tmp_path: Path) -> None:
    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        done = run(tmp_path, chat_target(server.http_url), 1, env={"INFERLOAD_TRANSPORT": "python"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on the Python transport a stream is read whole" in done.stderr
    figures = summary_of(tmp_path, "chat")
    assert "decoupled" not in figures and "generation" not in figures
    assert figures["failures"] == 0 and figures["requests"] > 10
    assert figures["latency_ms"]["p50"] >= EVENTS * HOLD_MS


def test_a_model_the_server_does_not_list_or_a_route_that_is_not_openai_s_stops_the_run_at_start(tmp_path: Path) -> None:
    with reference_server(stream_responses=EVENTS) as server:
        wrong_model = run(tmp_path / "model", chat_target(server.http_url, model="llama-3"))
        wrong_route = run(tmp_path / "route", chat_target(server.http_url, generation={"base_path": "/openai/v1"}))
        assert len(server.records()) == 0  # nothing was generated
    assert wrong_model.returncode == 2, wrong_model.stdout + wrong_model.stderr
    assert f"target 'chat': {server.http_url}/v1/models does not list model 'llama-3'; it serves: 'identity'" in (
        wrong_model.stderr
    )
    assert wrong_route.returncode == 2, wrong_route.stdout + wrong_route.stderr
    assert "/openai/v1/models answered HTTP 404 without an OpenAI model list" in wrong_route.stderr
    assert "generation.base_path: '/openai/v1'" in wrong_route.stderr


def test_a_triton_generate_target_streams_text_output_events_without_done_and_whole_answers_too(tmp_path: Path) -> None:
    def generate(**extra: Any) -> dict[str, Any]:
        return {"name": "gen", "kind": "triton-generate", "address": "", "model": "identity", **extra}

    with reference_server(stream_responses=EVENTS, delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        streamed = run(tmp_path / "stream", {**generate(generation={"max_tokens": 8}), "address": server.http_address})
        whole = run(tmp_path / "whole", {**generate(generation={"stream": False}), "address": server.http_address})
        wrong = run(tmp_path / "wrong", {**generate(model="llama"), "address": server.http_address})
        records = server.records()
    assert streamed.returncode == 0, streamed.stdout + streamed.stderr
    # the reference model's one input is INPUT0: the start check says where the prompt would go
    assert "has no input 'text_input'" in streamed.stderr
    figures = summary_of(tmp_path / "stream", "gen")
    assert (figures["server"], figures["failures"]) == ("triton", 0) and figures["requests"] > 20
    assert figures["decoupled"]["responses"] == EVENTS * figures["decoupled"]["requests"]  # the body's end ends it
    assert figures["generation"]["token_source"] == "events"  # Triton's generate has no usage
    assert HOLD_MS <= figures["decoupled"]["first_response_ms"]["p50"] < HOLD_MS + LATE_MS
    assert whole.returncode == 0, whole.stdout + whole.stderr
    answered = summary_of(tmp_path / "whole", "gen")
    assert answered["failures"] == 0 and "generation" not in answered
    assert answered["latency_ms"]["p50"] >= EVENTS * HOLD_MS
    assert wrong.returncode == 2 and "llama" in wrong.stderr, wrong.stdout + wrong.stderr
    assert records.with_protocol("generate").all()
