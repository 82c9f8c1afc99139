"""A generative target (openai-chat, openai-completions) as a scenario writes it: a prompt per request
(`generation.prompt`, or one BYTES input that gives the prompts), what is asked of the answer, and a
clear refusal, at its key, of every tensor key it takes none of; the body each request sends; the
start check's reading of a model list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from inferload.scenario.generation import DEFAULT_PROMPT, GenerationSpec
from inferload.scenario.inputs import InputSpec
from inferload.scenario.targets import GenerativeTarget, Target
from inferload.startchecks.openai import served_models
from inferload.users.generation import OPENAI_REASON, TritonGenerateUser, prompt_of, request_body
from inferload.users.request_pool import RequestData

PROMPTS = [{"name": "prompt", "dtype": "BYTES", "shape": [1], "data": {"generator": "constant", "value": "hi"}}]


def target(**keys: Any) -> GenerativeTarget:
    return GenerativeTarget.model_validate(
        {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8080", "model": "m", **keys}
    )


def problems(**keys: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        target(**keys)
    found = []
    for error in caught.value.errors():
        found.append((".".join(str(part) for part in error["loc"]), error["msg"]))
    return found


def test_a_chat_target_needs_no_inputs_and_streams_its_default_prompt() -> None:
    made = target()
    assert made.inputs == () and made.address == "http://127.0.0.1:8080"
    assert made.generation == GenerationSpec(
        prompt=DEFAULT_PROMPT, max_tokens=128, stream=True, include_usage=True, base_path="/v1"
    )
    assert made.response_check == "shape"  # the answer read as its format says


def test_the_prompts_may_come_from_one_bytes_input() -> None:
    assert target(inputs=PROMPTS).inputs[0].name == "prompt"


@pytest.mark.parametrize(
    ("keys", "where", "says"),
    [
        ({"batch_size": 2}, "batch_size", "one prompt per request; got batch_size 2"),
        ({"outputs": ["OUT"]}, "outputs", "does not apply to an openai-chat target"),
        ({"inputs": [{"name": "x", "dtype": "FP32", "shape": [4]}]}, "inputs.0", "dtype: BYTES, shape: [1]"),
        ({"inputs": [*PROMPTS, {**PROMPTS[0], "name": "other"}]}, "inputs", "give one input (the prompts); got 2"),
        ({"inputs": PROMPTS, "generation": {"prompt": "x"}}, "generation.prompt", "give one or the other"),
        ({"generation": {"base_path": "v1"}}, "generation.base_path", "expected a path like '/v1'"),
        ({"generation": {"max_tokens": 0}}, "generation.max_tokens", "greater than or equal to 1"),
        ({"generation": {"goodput": {}}}, "generation.goodput", "set at least one of ttft_ms, tpot_ms, e2e_ms"),
        ({"generation": {"goodput": {"ttft_ms": 0}}}, "generation.goodput.ttft_ms", "greater than 0"),
        ({"generation": {"goodput": {"ttft": 5}}}, "generation.goodput.ttft", "Extra inputs are not permitted"),
        ({"generation": {"stream": False, "goodput": {"e2e_ms": 9}}}, "generation", "goodput needs stream: true"),
        (
            {"response_check": "none", "generation": {"goodput": {"e2e_ms": 9}}},
            "generation.goodput",
            "needs response_check: shape",
        ),
        ({"generation": {"stream": False, "tokenizer": "t.json"}}, "generation", "tokenizer needs stream: true"),
        (
            {"response_check": "status", "generation": {"tokenizer": "t.json"}},
            "generation.tokenizer",
            "needs response_check: shape",
        ),
        ({"generation": {"tokenizer": " "}}, "generation.tokenizer", "expected the path of a tokenizer.json"),
        ({"slo": {"min_goodput_pct": 90}}, "slo.min_goodput_pct", "needs generation.goodput"),
        (
            {"generation": {"goodput": {"ttft_ms": 9}}, "slo": {"min_goodput_pct": 101}},
            "slo.min_goodput_pct",
            "less than or equal to 100",
        ),
    ],
)
def test_a_key_that_does_not_fit_a_generative_target_is_refused_at_its_key(keys: dict[str, Any], where: str, says: str) -> None:
    found = problems(**keys)
    # the checks of several keys come as one error at the target, each message at its key path
    assert any(says in message and (loc == where or f"{where}: " in message) for loc, message in found), found


def test_a_tokenizer_is_read_relative_to_the_scenario_and_one_the_engine_cannot_load_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("inferload._native", reason="the engine loads tokenizers (make build)")
    unigram = {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": unigram}))
    (tmp_path / "broken.json").write_text('{"model": {"type": "Unigram"}}')
    context = {"base_dir": str(tmp_path)}
    base = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8080", "model": "m"}

    def read(path: str) -> GenerativeTarget:
        return GenerativeTarget.model_validate({**base, "generation": {"tokenizer": path}}, context=context)

    generation = read("tokenizer.json").generation
    assert generation is not None and generation.tokenizer == str(tmp_path / "tokenizer.json")
    for path, says in (("missing.json", "does not exist"), ("broken.json", "cannot read a tokenizer from")):
        with pytest.raises(ValidationError) as caught:
            read(path)
        (error,) = caught.value.errors()
        assert error["loc"] == ("generation", "tokenizer") and says in error["msg"], error


def test_a_tensor_target_takes_no_generation_and_still_needs_its_inputs() -> None:
    keys = {"name": "t", "kind": "triton-grpc", "address": "127.0.0.1:8001", "model": "m"}
    with pytest.raises(ValidationError, match="required key is missing"):
        Target.model_validate(keys)
    with pytest.raises(
        ValidationError,
        match="only applies to openai-chat, openai-completions and triton-generate targets; this target is triton-grpc",
    ):
        Target.model_validate({**keys, "inputs": [{"name": "x", "dtype": "FP32", "shape": [4]}], "generation": {}})


def test_a_base_path_keeps_its_own_prefix_without_a_trailing_slash() -> None:
    assert target(generation={"base_path": "/openai/v1/"}).generation == GenerationSpec(base_path="/openai/v1")


def test_each_request_body_asks_for_the_stream_and_the_server_s_token_count() -> None:
    chat = json.loads(request_body("openai-chat", "m", "hello", GenerationSpec(max_tokens=7)))
    assert chat == {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    whole = json.loads(request_body("openai-completions", "m", "héllo", GenerationSpec(stream=False, ignore_eos=True)))
    assert whole == {"model": "m", "prompt": "héllo", "max_tokens": 128, "ignore_eos": True, "stream": False}


def test_a_request_s_prompt_is_its_input_s_one_element_else_the_generation_s() -> None:
    spec = InputSpec.model_validate(PROMPTS[0])
    data = RequestData(index=0, samples=(), arrays=((spec, np.array([[b"from the data set"]], dtype=object)),))
    assert prompt_of(data, GenerationSpec()) == "from the data set"
    assert prompt_of(RequestData(index=0, samples=(), arrays=()), GenerationSpec(prompt="own")) == "own"


def test_an_openai_error_answer_is_read_by_its_message() -> None:
    body = json.dumps({"error": {"message": "model 'x' not found\nmore", "type": "invalid_request_error"}}).encode()
    assert OPENAI_REASON.of(body) == "model 'x' not found"
    assert OPENAI_REASON.of(b'{"error": "overloaded"}') == "overloaded"
    assert OPENAI_REASON.of(b"plain text") == "plain text"


def test_a_model_list_is_read_from_its_data_and_anything_else_is_no_list() -> None:
    assert served_models({"object": "list", "data": [{"id": "a"}, {"id": "b"}, {"x": 1}]}) == ["a", "b"]
    assert served_models({"models": ["a"]}) is None
    assert served_models(["a"]) is None


def test_token_slos_are_checked_against_the_summary_s_stream_and_generation_figures() -> None:
    from inferload.results.slo import evaluate, format_checks
    from inferload.scenario.schema import Scenario

    slo = {"ttft_p99_ms": 50, "tpot_p99_ms": 5, "min_output_tokens_per_s": 100}
    scenario = Scenario.model_validate(
        {
            "name": "s",
            "duration": "10s",
            "targets": [target(slo=slo).model_dump(exclude_none=True)],
            "shape": {"kind": "steady", "users": 1},
        }
    )
    figures = {
        "chat": {
            "decoupled": {"first_response_ms": {"p99": 40.0}},
            "generation": {"tpot_ms": {"p99": 7.5}, "output_tokens_per_s": 120.0},
        }
    }
    checks = {check.metric: (check.value, check.passed) for check in evaluate(scenario, figures)}
    assert checks == {"ttft_p99_ms": (40.0, True), "tpot_p99_ms": (7.5, False), "min_output_tokens_per_s": (120.0, True)}
    assert "SLO FAILED" in format_checks(evaluate(scenario, figures))


def test_goodput_is_the_share_of_requests_meeting_every_threshold_and_its_slo_is_a_least_share() -> None:
    from inferload.measure.generation_record import GenerationRecord
    from inferload.results.slo import evaluate
    from inferload.results.summary import generation_figures
    from inferload.scenario.schema import Scenario

    made = target(generation={"goodput": {"ttft_ms": 200, "tpot_ms": 20}}, slo={"min_goodput_pct": 90})
    assert made.generation is not None and made.generation.goodput is not None
    assert made.generation.goodput.engine_limits() == {"ttft_ms": 200.0, "tpot_ms": 20.0}  # the engine's check.goodput
    record = GenerationRecord()
    # 40 generations, 30 good (the engine's count, last); 50 requests in all: 10 failed
    record.merge_wire({"steady": {"chat": {**_empty_totals(), "n": [40, 400, 10, 40, 0, 0, 30]}}})
    block = generation_figures(record, "chat", steady_s=10.0, requests=50, goodput=made.generation.goodput)
    assert block is not None and block.goodput is not None
    assert (block.goodput.good, block.goodput.per_s, block.goodput.attainment_pct) == (30, 3.0, 60.0)
    assert (block.goodput.ttft_ms, block.goodput.tpot_ms, block.goodput.e2e_ms) == (200.0, 20.0, None)
    unjudged = generation_figures(record, "chat", steady_s=10.0, requests=50)
    assert unjudged is not None and "goodput" not in unjudged.model_dump()  # no thresholds, no goodput block
    scenario = Scenario.model_validate(
        {"name": "s", "duration": "10s", "targets": [made.model_dump(exclude_none=True)], "shape": {"kind": "steady", "users": 1}}
    )
    (check,) = evaluate(scenario, {"chat": {"generation": block.model_dump()}})
    assert (check.metric, check.limit, check.value, check.passed) == ("min_goodput_pct", 90.0, 60.0, False)


def _empty_totals() -> dict[str, Any]:
    from inferload.measure.generation_record import GenerationTotals

    return GenerationTotals().to_wire()


def test_a_tensor_target_takes_no_token_slo() -> None:
    keys = {"name": "t", "kind": "triton-grpc", "address": "127.0.0.1:8001", "model": "m"}
    inputs = [{"name": "x", "dtype": "FP32", "shape": [4]}]
    with pytest.raises(ValidationError, match="only a generative target measures it"):
        Target.model_validate({**keys, "inputs": inputs, "slo": {"tpot_p99_ms": 5}})
    assert Target.model_validate({**keys, "inputs": inputs, "slo": {"ttft_p99_ms": 5}}).slo is not None  # a decoupled model's


def test_a_generative_target_written_out_reads_back_the_same() -> None:
    made = target(inputs=PROMPTS, generation={"max_tokens": 9, "base_path": "/openai/v1"}, slo={"ttft_p99_ms": 80})
    assert Target.model_validate(made.model_dump(exclude_none=True)) == made


def test_a_triton_generate_request_is_text_input_and_parameters_on_the_model_s_generate_route() -> None:
    from inferload.users.classes import user_class_for

    body = json.loads(request_body("triton-generate", "m", "hello", GenerationSpec(max_tokens=5, ignore_eos=True)))
    assert body == {"text_input": "hello", "parameters": {"max_tokens": 5, "stream": True, "ignore_eos": True}}
    keys = {"name": "gen", "kind": "triton-generate", "address": "http://127.0.0.1:8000", "model": "my model"}
    made = Target.model_validate({**keys, "version": 2})
    assert made.address == "127.0.0.1:8000" and made.version == "2"  # Triton's HTTP form; a version is Triton's
    cls = user_class_for(made, Path("."))
    assert issubclass(cls, TritonGenerateUser)
    assert cls.route() == "/v2/models/my%20model/versions/2/generate_stream"
    assert cls.address() == "http://127.0.0.1:8000" and cls.stream_format() == "triton_generate"
    whole = user_class_for(Target.model_validate({**keys, "generation": {"stream": False}}), Path("."))
    assert issubclass(whole, TritonGenerateUser)
    assert whole.route() == "/v2/models/my%20model/generate"
