"""The users of the generative kinds, one prompt per request (`inferload.scenario.generation`):
``openai-chat`` (``POST {base}/chat/completions``) and ``openai-completions`` (``POST
{base}/completions``) on any OpenAI-compatible server (`OpenAIUser`), and ``triton-generate``
(Triton's generate extension: ``POST /v2/models/{model}/generate_stream``, or ``/generate`` for a
whole answer; `TritonGenerateUser`).

Each distinct request's JSON body is made once per process (`encode_request`). OpenAI: the model,
the prompt (as the user's message, or the completion's prompt), ``max_tokens``, ``stream`` and, for a
stream, ``stream_options.include_usage``. Triton: ``text_input`` and ``parameters`` (``max_tokens``,
``stream``; the model's own parameters decide what they mean). On the native transport the engine reads a streamed answer as it
arrives (docs/engine.md, "Generation streams"): a call succeeds when the server answers 200 with an
event stream that ends as the format says, and its content events give the request's time to the
first token and the gaps between content events (the summary's ``decoupled`` block). On the Python
transport (the engine not built, ``INFERLOAD_TRANSPORT=python``) the answer is read whole and judged
by its status: a request's latency, no stream figures.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from geventhttpclient.response import HTTPConnectionClosed

from inferload.scenario.generation import DEFAULT_MAX_TOKENS, ConversationSpec, GenerationSpec
from inferload.scenario.kinds import SERVER_KINDS, kinds_spoken_by
from inferload.scenario.targets import GenerativeTarget
from inferload.users.base import InferenceUser, ModelFit
from inferload.users.engine import NativeTarget
from inferload.users.failures import Reason
from inferload.users.http_answer import DETAIL_CHARS, close_client, open_client, post_for_answer
from inferload.users.request_pool import RequestData, RequestPool
from inferload.users.tls import native_tls

logger = logging.getLogger(__name__)


def request_body(
    kind: str,
    model: str,
    prompt: str,
    generation: GenerationSpec,
    max_tokens: int | None = None,
    messages: Sequence[dict[str, str]] | None = None,
) -> bytes:
    """One request's JSON body; ``max_tokens``: its own (drawn) length, else the generation's;
    ``messages``: a chat's whole conversation (None: ``prompt`` as the one user message)."""
    max_tokens = generation.max_tokens if max_tokens is None else max_tokens
    record = SERVER_KINDS[kind]
    if record.server == "triton":  # the generate extension's body
        parameters: dict[str, Any] = {"max_tokens": max_tokens, "stream": generation.stream}
        if generation.ignore_eos:
            parameters["ignore_eos"] = True
        return json.dumps({"text_input": prompt, "parameters": parameters}, ensure_ascii=False, separators=(",", ":")).encode()
    body: dict[str, Any] = {"model": model}
    if record.chat:
        body["messages"] = list(messages) if messages is not None else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body["max_tokens"] = max_tokens
    if generation.ignore_eos:
        body["ignore_eos"] = True
    body["stream"] = generation.stream
    if generation.stream and generation.include_usage:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def prompt_of(data: RequestData, generation: GenerationSpec) -> str:
    """The request's prompt: its input's one element (bytes read as UTF-8), else the generation's prompt."""
    if not data.arrays:
        return generation.prompt
    value = data.arrays[0][1].reshape(-1)[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: a recorded conversation's later user turns, each with the output tokens it asks for (None: the target's)
FollowUps = tuple[tuple[str, int | None], ...]


class Conversation:
    """One user's conversations, one at a time (``generation.conversation``). A conversation's first
    turn is the target's next request as encoded. Each later turn sends the conversation so far
    (every message sent, each answer as the assistant's message) and a new user message: the next of
    the recorded conversation that opened it (a ShareGPT line's later human turns, asking for the
    tokens of the answer recorded after each), else the last message of the target's next request,
    with that request's ``max_tokens``. After ``turns`` turns, a recorded conversation's last turn,
    or a turn that failed (no answer to carry), the next conversation starts."""

    def __init__(
        self,
        spec: ConversationSpec,
        next_request: Callable[[], tuple[int, bytes]],
        follow_ups: Callable[[int], FollowUps] = lambda _: (),
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self.spec = spec
        self._next_request = next_request
        self._follow_ups = follow_ups
        self._max_tokens = max_tokens
        self._messages: list[dict[str, str]] = []
        self._opening: dict[str, Any] = {}
        self._recorded: FollowUps = ()
        #: the turn last sent (0: the next turn starts a conversation)
        self.turn = 0

    def next_turn(self) -> tuple[int, bytes]:
        """(the turn's number from 1, its JSON body)."""
        if self.turn == 0:
            index, encoded = self._next_request()
            body = self._opening = json.loads(encoded)
            self._messages = list(body["messages"])
            self._recorded = self._follow_ups(index)
        elif self._recorded:
            text, max_tokens = self._recorded[self.turn - 1]
            body = {**self._opening, "max_tokens": max_tokens if max_tokens is not None else self._max_tokens}
            self._messages.append({"role": "user", "content": text})
        else:
            body = json.loads(self._next_request()[1])
            self._messages.append(body["messages"][-1])
        self.turn += 1
        body["messages"] = self._messages
        return self.turn, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def answered(self, text: str | None) -> float:
        """The turn's answer text (None: the turn failed); the pause before the next turn, s (the
        think time; none when the conversation ended: the next one starts at once)."""
        last = self.turn >= self.spec.turns or (bool(self._recorded) and self.turn > len(self._recorded))
        if text is None or last:
            self.turn = 0
            self._messages = []
            return 0.0
        self._messages.append({"role": "assistant", "content": text})
        return float(self.spec.think_time)


#: an OpenAI error (``{"error": {"message": ...}}``, or ``error`` as text), or another server's
OPENAI_REASON = Reason(("error.message", "error", "detail", "message"), DETAIL_CHARS)


class GenerativeUser(InferenceUser):
    target: ClassVar[GenerativeTarget]
    """Abstract: one generative target, one prompt per request; a kind's class gives its `route`
    and the engine's stream format (`stream_format`)."""

    abstract = True
    request_type = "POST"
    _python_warned: ClassVar[bool] = False

    @classmethod
    def route(cls) -> str:
        raise NotImplementedError

    @classmethod
    def stream_format(cls) -> str:
        """The engine's name of the answer's stream format (the kind's record says it)."""
        return str(SERVER_KINDS[cls.target.kind].stream_format)

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        target = cls.target
        generation = target.generation
        drawn = generation.distinct_requests()
        if drawn is None:
            return request_body(target.kind, target.model, prompt_of(data, generation), generation)
        own = drawn[data.index % len(drawn)]
        prompt = own.prompt if own.prompt is not None else prompt_of(data, generation)
        return request_body(target.kind, target.model, prompt, generation, own.output_tokens, own.messages)

    @classmethod
    def _headers(cls) -> dict[str, str]:
        target = cls.target
        return {
            "Content-Type": "application/json",
            **target.request_headers(cls.scenario_dir),
        }

    @classmethod
    def address(cls) -> str:
        address: str = cls.target.address
        return address if "://" in address else f"{'https' if cls.target.tls is not None else 'http'}://{address}"

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's HTTP target: the pre-encoded bodies, a stream read as its format says."""
        target = cls.target
        generation = target.generation
        reads_answer = generation.stream and target.response_check == "shape"
        check: dict[str, Any] = {
            "status": "2xx" if target.response_check == "none" else "200",
            "detail": OPENAI_REASON.engine_check(),
            "answer": cls.stream_format() if reads_answer else "none",
        }
        if reads_answer and generation.goodput is not None:
            check["goodput"] = generation.goodput.engine_limits()
        if reads_answer and generation.tokenizer is not None:
            check["tokenizer"] = str(cls.scenario_dir / generation.tokenizer)
        path = cls.route()
        return NativeTarget(
            protocol="http",
            address=cls.address(),
            requests=[(path, body, []) for body in pool.encoded_requests],
            check=check,
            headers=list(cls._headers().items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
        )

    def conversation(self) -> Conversation | None:
        generation = self.target.generation
        if generation.conversation is None:
            return None
        drawn = generation.distinct_requests() or ()

        def follow_ups(index: int) -> FollowUps:
            return drawn[index % len(drawn)].follow_ups if drawn else ()

        return Conversation(generation.conversation, self.request_pool().next, follow_ups, generation.max_tokens)

    @classmethod
    def engine_only_reason(cls) -> str | None:
        if cls.target.generation.conversation is None:
            return None
        return (
            "generation.conversation carries each answer's text into the next turn, which the native engine reads from the stream"
        )

    def connect(self) -> None:
        cls = type(self)
        if self.target.generation.stream and not GenerativeUser._python_warned:
            GenerativeUser._python_warned = True
            logger.warning(
                "target %r: on the Python transport a stream is read whole and judged by its status (no time to"
                " first token); the native engine reads it as it arrives (make build)",
                self.target.name,
            )
        self._client = open_client(self.target.model_copy(update={"address": cls.address()}), self.scenario_dir)
        self._path = cls.route()
        self.request_pool()  # the first user of the target in this process encodes every request here
        self._headers_now = cls._headers()

    def send(self) -> int:
        _, body = self.next_request()
        try:
            answer = self._post(body)
        except HTTPConnectionClosed:
            # the server closed the kept connection before answering (llama.cpp closes after each stream
            # while it says Keep-Alive): sent again, once, on a new connection, as the engine does
            answer = self._post(body)
        return len(answer)

    def _post(self, body: bytes) -> bytes:
        target = self.target
        return post_for_answer(
            self._client, self._path, body, self._headers_now, target.response_check, OPENAI_REASON.of, target.max_answer_bytes
        )

    def close(self) -> None:
        close_client(self)


class OpenAIUser(GenerativeUser):
    """Abstract: one OpenAI-compatible target (chat or completions)."""

    abstract = True
    target_kinds = kinds_spoken_by("OpenAIUser")

    @classmethod
    def route(cls) -> str:
        return cls.target.generation.base_path + str(SERVER_KINDS[cls.target.kind].route)


class TritonGenerateUser(GenerativeUser):
    """Abstract: one model behind Triton's generate extension."""

    abstract = True
    target_kinds = kinds_spoken_by("TritonGenerateUser")

    @classmethod
    def route(cls) -> str:
        target = cls.target
        version = f"/versions/{quote(target.version, safe='')}" if target.version else ""
        endpoint = "generate_stream" if target.generation.stream else "generate"
        return f"/v2/models/{quote(target.model, safe='')}{version}/{endpoint}"
