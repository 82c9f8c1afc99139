"""The local KServe model server of the built-in LLM: a ``kserve`` OpenAI model over llama.cpp's engine.

Runs in its own venv (``kserve_local.KSERVE_LLM_VENV``: kserve 0.14.1, whose OpenAI routes stand on
their own; from 0.15 on they import their request types from vLLM), with ``xllamacpp`` linked from
inferload's environment; it imports kserve and ``llamacpp_engine`` (the file beside it), never
inferload. KServe serves the model's OpenAI routes under ``/openai``: ``/openai/v1/completions``
and ``/openai/v1/chat/completions``, streamed as server-sent events when asked (each chunk as
llama.cpp made it, read into KServe's own response types; the last one carries ``usage``: KServe's
request type has no ``stream_options``, so usage is always sent), ``/openai/v1/models``, and
KServe's Prometheus ``/metrics``.

    python kserve_llm_model.py --name random-llama --gguf PATH [--parallel 4] --host 127.0.0.1 --http_port N
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

from kserve import ModelServer
from kserve.protocol.rest.openai import ChatCompletionRequest, CompletionRequest, OpenAIModel
from kserve.protocol.rest.openai.errors import OpenAIError, create_error_response
from kserve.protocol.rest.openai.types import ChatCompletion, ChatCompletionChunk, Completion
from kserve_bind import bind_to
from llamacpp_engine import EngineError, EngineSettings, answer, generate, start_engine

#: the end of a stream on the queue between llama.cpp's thread and the event loop
_END = object()


class LlamaCppModel(OpenAIModel):
    """The built-in LLM behind KServe's OpenAI routes: each request runs on llama.cpp's engine in a
    thread of its own (its slots decode requests together), streamed back through the event loop."""

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings.alias)
        self.engine = start_engine(settings)

    async def create_completion(self, request: CompletionRequest) -> Completion | AsyncIterator[Completion]:
        return await self._serve(False, request.params.model_dump(exclude_none=True), Completion)

    async def create_chat_completion(self, request: ChatCompletionRequest) -> ChatCompletion | AsyncIterator[ChatCompletionChunk]:
        body = request.params.model_dump(exclude_none=True, mode="json")
        return await self._serve(True, body, ChatCompletionChunk if request.params.stream else ChatCompletion)

    async def _serve(self, chat: bool, body: dict[str, Any], answer_type: Any) -> Any:
        """The whole answer, or its stream once llama.cpp accepted the request (a request it refuses
        is answered with its status and reason, as llama.cpp's own server answers it)."""
        body["model"] = self.name
        if not body.get("stream"):
            try:
                whole = await asyncio.to_thread(answer, self.engine, chat, body)
            except EngineError as exc:
                raise refused(exc) from None
            for choice in whole.get("choices") or ():
                choice.setdefault("logprobs", None)  # KServe's types require the key; llama.cpp leaves it out
            return answer_type.model_validate(whole)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def on_chunk(piece: dict[str, Any]) -> bool:
            loop.call_soon_threadsafe(queue.put_nowait, piece)
            return False

        def run() -> None:
            try:
                generate(self.engine, chat, body, on_chunk)
            except EngineError as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        worker = loop.run_in_executor(None, run)
        first = await queue.get()
        if isinstance(first, EngineError):
            await worker
            raise refused(first)
        return self._stream(first, queue, worker, answer_type)

    @staticmethod
    async def _stream(first: Any, queue: asyncio.Queue[Any], worker: Any, chunk_type: Any) -> AsyncIterator[Any]:
        """The chunks as KServe's types; a failure after the first one cuts the stream (no ``[DONE]``)."""
        piece = first
        while piece is not _END:
            if isinstance(piece, EngineError):
                raise OpenAIError(str(piece))
            yield chunk_type.model_validate(piece)
            piece = await queue.get()
        await worker


def refused(error: EngineError) -> OpenAIError:
    """llama.cpp's refusal with its status, as KServe's OpenAI error answer."""
    return OpenAIError(create_error_response(str(error), status_code=HTTPStatus(error.status)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the model's name in KServe's routes")
    parser.add_argument("--gguf", required=True, help="the GGUF file llama.cpp serves")
    parser.add_argument("--parallel", type=int, default=4, help="llama.cpp's slots decoding together")
    parser.add_argument("--host", default="127.0.0.1", help="the address the REST server listens on")
    args, _ = parser.parse_known_args()
    bind_to(args.host)
    model = LlamaCppModel(EngineSettings(args.gguf, args.name, args.parallel, host=args.host))
    ModelServer().start([model])


if __name__ == "__main__":
    main()
