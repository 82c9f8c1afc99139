"""llama.cpp's server (from the ``xllamacpp`` wheel) serving one GGUF model, as a process of its own.

    python -m inferload.local.servers.llamacpp_serve [MODEL.gguf] [--port 8085] [--host 127.0.0.1]
        [--alias random-llama] [--parallel 4] [--threads 1] [--context 4096]

llama.cpp's C++ HTTP server runs in this process's threads (``xllamacpp.Server``): the OpenAI routes
(``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``, streamed as server-sent events),
``/health``, ``/metrics``. ``--parallel`` slots decode together (continuous batching) and share
``--context`` tokens. It binds to loopback unless told otherwise, prints one line once it listens,
and serves until it is sent SIGTERM or SIGINT. Without a model path it serves the built-in LLM
(`inferload.local.models.llm`), written first when it is not there.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

#: the line printed once the server listens (what a launcher waits for)
READY = "llama.cpp listening on"
#: where it listens unless told otherwise (scenarios/llm-chat.yaml sends there)
DEFAULT_PORT = 8085


def main(argv: list[str] | None = None) -> int:
    from inferload.local.models.llm import LLM_NAME, ensure_llm_model

    parser = argparse.ArgumentParser(prog="python -m inferload.local.servers.llamacpp_serve", description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=None, help="a GGUF file (default: the built-in LLM)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT} (scenarios/llm-chat.yaml's)")
    parser.add_argument("--alias", default=None, help=f"the model's id in /v1/models (default: {LLM_NAME} for the built-in LLM)")
    parser.add_argument("--parallel", type=int, default=4, help="slots decoding together (continuous batching)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per decode")
    parser.add_argument("--context", type=int, default=4096, help="tokens of context, shared by the slots")
    args = parser.parse_args(argv)
    model = args.model if args.model is not None else ensure_llm_model()
    if not model.is_file():
        parser.error(f"no such model file: {model}")
    alias = args.alias or (LLM_NAME if args.model is None else model.stem)

    from inferload.local.servers.llamacpp_engine import EngineSettings, start_engine

    settings = EngineSettings(str(model), alias, args.parallel, args.threads, args.context, args.host, args.port)
    stopping = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)  # llama.cpp's threads inherit the mask: this thread takes them
    server = start_engine(settings)
    print(f"{READY} {server.listening_address} (model {alias!r}, {args.parallel} slots)", flush=True)
    signal.sigwait(stopping)
    sys.stdout.flush()
    os._exit(0)  # llama.cpp's threads are not joined: the process ends with them


if __name__ == "__main__":
    sys.exit(main())
