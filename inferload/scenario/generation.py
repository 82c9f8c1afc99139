"""What a generative target (``openai-chat``, ``openai-completions``) sends: its ``generation`` key,
and the rules a generative target's other keys follow.

A generative target's request is a prompt. It is ``generation.prompt`` (the same in every request),
or one input named as you like, of ``dtype: BYTES`` and ``shape: [1]``, whose data gives the prompts:
``data: {dataset: prompts.txt}`` (a line each) or ``data: {dataset: prompts.jsonl, key: prompt}``,
sent in the target's rotation. The request asks for ``max_tokens`` tokens (exactly that many with
``ignore_eos: true``, where the server takes it), streamed as server-sent events by default
(``stream: false``: one JSON answer); a stream asks for the server's token count
(``stream_options.include_usage``) unless ``include_usage: false``. The routes are under
``base_path`` (``/v1``; KServe's OpenAI frontend: ``/openai/v1``). ``goodput`` sets per-request
thresholds (``ttft_ms``, ``tpot_ms``, ``e2e_ms``): a request is good when it meets all of them, and
the summary reports the good requests per second and their share of all requests (the attainment).
``tokenizer`` names a Hugging Face ``tokenizer.json`` (relative to the scenario file) the engine
counts each stream's tokens with: N when the server sends no ``usage``, and each event's tokens
(the ITL's weights) always; where both count, the summary says how far they differ. ``lengths``
draws each distinct request's prompt length and ``max_tokens`` (`inferload.scenario.lengths`);
``dataset`` reads them from a JSONL file of prompts, chat messages or ShareGPT conversations
(`inferload.scenario.generation_dataset`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, StrictBool, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario.fields import FrozenModel, Number, Seconds
from inferload.scenario.generation_dataset import dataset_requests, read_dataset_lines
from inferload.scenario.input_files import not_regular_problem, scenario_file, unreadable_problem
from inferload.scenario.lengths import DrawnRequest, LengthsSpec, drawn_requests
from inferload.scenario.messages import Check, custom_error

if TYPE_CHECKING:
    from inferload.scenario.inputs import InputSpec

#: the prompt of a generative target that names none
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper."
#: the tokens a generative target asks for when it names no number
DEFAULT_MAX_TOKENS = 128
#: the most characters of one prompt written in a scenario
MAX_PROMPT_CHARS = 1_000_000


class GoodputSpec(FrozenModel):
    """Per-request thresholds (ms) a good request meets, each optional, at least one: the time to
    its first token, its time per output token, and the time to its last token."""

    ttft_ms: Annotated[Number, Field(gt=0)] | None = None
    tpot_ms: Annotated[Number, Field(gt=0)] | None = None
    e2e_ms: Annotated[Number, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> GoodputSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise custom_error("set at least one of ttft_ms, tpot_ms, e2e_ms (the most each good request may take)")
        return self

    def engine_limits(self) -> dict[str, float]:
        """The thresholds set, as the engine's ``check.goodput`` takes them."""
        return {key: float(value) for key, value in self.model_dump().items() if value is not None}


#: the most turns one conversation may have
MAX_TURNS = 1000


class ConversationSpec(FrozenModel):
    """Multi-turn sessions (``openai-chat``): each user holds one conversation at a time. Its first turn
    is the target's next request; each later turn sends the whole conversation so far (every message
    sent, each answer as the assistant's message) and the last message of the target's next request
    as the new one, with that request's ``max_tokens``. After ``turns`` turns, or a turn that failed,
    the user's next conversation starts. ``think_time``: the pause after each answer before the next turn."""

    turns: Annotated[int, Field(ge=2, le=MAX_TURNS, strict=True)]
    think_time: Annotated[Seconds, Field(ge=0, le=3600)] = 0.0


def _engine_tokenizer_problem(path: Path) -> str | None:
    """Why the native engine (which counts the tokens) cannot load the tokenizer; None when it can, or
    when the engine is not built (then no stream is read event by event and nothing is counted)."""
    try:
        from inferload import _native
    except ImportError:
        return None
    problem: str | None = _native.tokenizer_problem(str(path))
    return problem


class GenerationSpec(FrozenModel):
    """A generative target's request: the prompt and what is asked of the answer."""

    #: the prompt of every request, when no input gives the prompts
    prompt: Annotated[StrictStr, Field(min_length=1, max_length=MAX_PROMPT_CHARS)] = DEFAULT_PROMPT
    #: the most tokens each answer may have (the request's ``max_tokens``)
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] = DEFAULT_MAX_TOKENS
    #: the answer streamed as server-sent events (false: one JSON answer, timed whole)
    stream: StrictBool = True
    #: a stream asks for the server's token count in a last ``usage`` event
    include_usage: StrictBool = True
    #: ask the server to generate ``max_tokens`` whatever it samples (``ignore_eos``: vLLM, llama.cpp, SGLang)
    ignore_eos: StrictBool = False
    #: where the OpenAI routes are (``{base_path}/chat/completions``, ``{base_path}/models``)
    base_path: StrictStr = "/v1"
    #: per-request thresholds of a good request (goodput); None: goodput not measured
    goodput: GoodputSpec | None = None
    #: a Hugging Face ``tokenizer.json`` the engine counts each stream's tokens with
    tokenizer: StrictStr | None = None
    #: each distinct request's prompt length and asked output tokens (`inferload.scenario.lengths`)
    lengths: LengthsSpec | None = None
    #: a JSONL file of requests (prompts, chat messages or ShareGPT conversations), one per line
    dataset: StrictStr | None = None
    #: multi-turn sessions, each turn carrying the conversation so far (None: one request per call)
    conversation: ConversationSpec | None = None

    @field_validator("dataset")
    @classmethod
    def _dataset_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario file; read (every line checked) when its folder is known."""
        return scenario_file(value, info, "a JSONL file of requests", lambda path: unreadable_problem(path, read_dataset_lines))

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario file; a regular file the engine can load a tokenizer from."""
        return scenario_file(
            value, info, "a tokenizer.json", lambda path: not_regular_problem(path) or _engine_tokenizer_problem(path)
        )

    @field_validator("base_path")
    @classmethod
    def _base_path(cls, value: str) -> str:
        path = value.strip()
        if not path.startswith("/") or any(c in path for c in "?# ") or "//" in path:
            raise custom_error(f"expected a path like '/v1' or '/openai/v1'; got {value!r}")
        return path.rstrip("/") or ""

    @model_validator(mode="after")
    def _goodput_needs_a_stream(self) -> GenerationSpec:
        if self.goodput is not None and not self.stream:
            raise custom_error("generation.goodput needs stream: true (a whole answer has no token times to judge); remove one")
        if self.tokenizer is not None and not self.stream:
            raise custom_error("generation.tokenizer needs stream: true (the engine counts a stream's events); remove one")
        if self.conversation is not None and not self.stream:
            raise custom_error(
                "generation.conversation needs stream: true (the engine reads each answer's text from its events); remove one"
            )
        # (a target written out carries the defaults: those are not given)
        if self.dataset is not None:
            if self.lengths is not None:
                raise custom_error("generation.dataset gives each request: remove generation.lengths (or the data set)")
            if self.prompt != DEFAULT_PROMPT:
                raise custom_error("generation.dataset gives each request's prompt: remove generation.prompt")
        if self.lengths is not None:
            if self.lengths.output_tokens is not None and self.max_tokens != DEFAULT_MAX_TOKENS:
                raise custom_error(
                    "generation.lengths.output_tokens sets each request's max_tokens: remove generation.max_tokens"
                )
            if self.lengths.input_tokens is not None and self.prompt != DEFAULT_PROMPT:
                raise custom_error("generation.lengths.input_tokens makes each request's prompt: remove generation.prompt")
        return self

    def asks_prompts(self) -> bool:
        """The prompts are made from lengths (``lengths.input_tokens`` or a lengths file) or read from a data set."""
        return self.dataset is not None or (
            self.lengths is not None and (self.lengths.input_tokens is not None or self.lengths.file is not None)
        )

    def distinct_requests(self) -> tuple[DrawnRequest, ...] | None:
        """Each distinct request's prompt and lengths, sent in turn: the data set's lines or the drawn
        lengths (None: neither, every request the target's own prompt)."""
        if self.dataset is not None:
            return dataset_requests(self.dataset, self.tokenizer)
        if self.lengths is not None:
            return drawn_requests(self.lengths, self.tokenizer)
        return None


def generative_problems(
    inputs: tuple[InputSpec, ...],
    prompt_given: bool,
    batch_size: int,
    tensor_keys: dict[str, object],
    kind: str,
    made_prompts: str | None = None,
) -> list[Check]:
    """Every way a generative target's keys do not fit: its prompt input (``made_prompts``: the
    ``generation`` key that makes the prompts, ``lengths`` or ``dataset``), and the tensor keys it
    takes none of (``tensor_keys``: each such key's value; set when not None or empty)."""
    checks: list[Check] = []
    if len(inputs) > 1:
        checks.append(
            (("inputs",), f"this {kind} target's request is one prompt: give one input (the prompts); got {len(inputs)}")
        )
    for index, spec in enumerate(inputs[:1]):
        if spec.dtype != "BYTES" or tuple(spec.shape) != (1,):
            checks.append(
                (
                    ("inputs", index),
                    f"the prompts' input is dtype: BYTES, shape: [1] (one prompt per request); got {spec.dtype} {list(spec.shape)}",
                )
            )
        elif prompt_given:
            checks.append((("generation", "prompt"), f"inputs[{index}] gives the prompts already: give one or the other"))
        elif made_prompts is not None:
            checks.append(
                (
                    ("generation", made_prompts),
                    f"inputs[{index}] gives the prompts already: {made_prompts} makes them: give one or the other",
                )
            )
    if batch_size != 1:
        checks.append((("batch_size",), f"this {kind} target sends one prompt per request; got batch_size {batch_size}"))
    for key, value in sorted(tensor_keys.items()):
        if value is not None and value != ():
            checks.append(((key,), f"does not apply to an {kind} target (its answer is generated text)"))
    return checks
