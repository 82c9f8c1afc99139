"""llama.cpp's engine in this process (the ``xllamacpp`` wheel) serving one GGUF file: the one set of
llama.cpp settings every local LLM server here runs with (llama.cpp's own OpenAI server, Triton's
Python-backend model, KServe's OpenAI model), and a completion streamed piece by piece.

Standalone on purpose: it imports ``xllamacpp`` and the standard library only, so Triton's backend
stub and KServe's own venv load it as a file beside their model (neither can import inferload).

Every engine listens on HTTP too (xllamacpp always starts llama.cpp's server): on ``port`` on
``host``, loopback and a free port unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import xllamacpp


@dataclass(frozen=True)
class EngineSettings:
    """How llama.cpp serves the model: ``parallel`` slots decode together (continuous batching)
    and share ``context`` tokens; ``threads`` CPU threads per decode."""

    gguf: str
    alias: str
    parallel: int = 4
    threads: int = 1
    context: int = 4096
    host: str = "127.0.0.1"
    port: int = 0


def start_engine(settings: EngineSettings) -> Any:
    """The model loaded and llama.cpp's slots running (an ``xllamacpp.Server``)."""
    params = xllamacpp.CommonParams()
    params.model.path = settings.gguf
    params.model_alias = {settings.alias}
    params.n_parallel = settings.parallel
    params.n_ctx = settings.context
    params.cpuparams.n_threads = settings.threads
    params.cpuparams_batch.n_threads = settings.threads
    params.endpoint_metrics = True
    params.hostnames = [settings.host]
    params.port = settings.port
    return xllamacpp.Server(params)


class EngineError(Exception):
    """llama.cpp refused or failed a request: ``status`` its HTTP-like code, the message its own."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def refusal(error: Any) -> EngineError:
    """llama.cpp's ``error`` object (``{"code", "message", "type"}``) as an EngineError."""
    fields = error if isinstance(error, dict) else {"message": str(error)}
    return EngineError(int(fields.get("code", 500)), str(fields.get("message", "llama.cpp failed")))


def generate(engine: Any, chat: bool, body: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
    """One request to llama.cpp's OpenAI handlers (``chat``: chat completions, else completions),
    streamed: each chunk of its answer, as llama.cpp's server would send it, goes to ``on_chunk``
    (which returns True to stop the generation early). An EngineError when llama.cpp refused the
    request or failed it half-way."""
    failure: list[EngineError] = []

    def chunk(piece: dict[str, Any]) -> bool:
        if "error" in piece:
            failure.append(refusal(piece["error"]))
            return True
        return on_chunk(piece)

    handle = engine.handle_chat_completions if chat else engine.handle_completions
    handle({**body, "stream": True, "stream_options": {"include_usage": True}}, chunk)
    if failure:
        raise failure[0]


def answer(engine: Any, chat: bool, body: dict[str, Any]) -> dict[str, Any]:
    """One request's whole answer (not streamed), as llama.cpp's server would send it; an
    EngineError when llama.cpp refused it."""
    handle = engine.handle_chat_completions if chat else engine.handle_completions
    whole: dict[str, Any] = handle({**body, "stream": False})
    if "error" in whole:
        raise refusal(whole["error"])
    return whole


def stream_completion(engine: Any, prompt: str, max_tokens: int, on_text: Callable[[str], bool]) -> None:
    """Generate up to ``max_tokens`` tokens after ``prompt`` (a plain completion: no chat template),
    calling ``on_text`` with each piece of text as llama.cpp produces it (True from it stops the
    generation early); an EngineError when llama.cpp refused it (before or after some text)."""

    def on_chunk(piece: dict[str, Any]) -> bool:
        text = "".join(str(choice.get("text") or "") for choice in piece.get("choices") or ())
        return bool(text) and on_text(text)

    generate(engine, False, {"prompt": prompt, "max_tokens": max_tokens}, on_chunk)
