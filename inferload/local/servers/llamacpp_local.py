"""llama.cpp's server (the ``xllamacpp`` wheel) serving the built-in LLM, as a local server of
`inferload servers` (named ``llamacpp``): ``python -m inferload.local.servers.llamacpp_serve`` on
``ports.llamacpp_http``, detached in its own session, its output in ``state_dir/llamacpp/llamacpp.log``.
It serves the built-in LLM whatever sample models are asked for (writing it first when it is not
there); it is ready once a chat completion answers with generated text.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from inferload.local.models.llm import LLM_NAME
from inferload.local.servers.manager import LocalServer, NotReady
from inferload.local.servers.ports import LOOPBACK, ServerPorts
from inferload.local.servers.procs import ProcessRecord, spawn, stop_group

#: slots decoding together (continuous batching), as scenarios/llm-chat.yaml's users expect
PARALLEL = 4


def start_llamacpp(state_dir: Path, ports: ServerPorts, _models: tuple[str, ...], host: str = LOOPBACK) -> ProcessRecord:
    """Start the server detached on ``host``."""
    command = [sys.executable, "-m", "inferload.local.servers.llamacpp_serve", "--host", host]
    command += ["--port", str(ports.llamacpp_http), "--parallel", str(PARALLEL)]
    work = state_dir / "llamacpp"
    work.mkdir(parents=True, exist_ok=True)
    return spawn(command, work / "llamacpp.log", dict(os.environ), cwd=work)


def chat_answers(port: int, model: str, host: str = LOOPBACK, timeout_s: float = 5.0) -> None:
    """One chat completion of two tokens, answered with a choice (else NotReady)."""
    url = f"http://{host}:{port}/v1/chat/completions"
    body = {"model": model, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 2, "stream": False}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise NotReady(f"HTTP {exc.code} from {url}: {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NotReady(f"{url}: {exc}") from None
    if not isinstance(answer, dict) or not answer.get("choices"):
        raise NotReady(f"unexpected answer from {url}: {str(answer)[:300]}")


#: how `inferload servers` starts, probes and stops it (the ``openai`` server's record names this)
LOCAL = LocalServer(
    "llamacpp",
    start_llamacpp,
    lambda record, _state_dir: stop_group(record, term_timeout_s=15.0),
    chat_answers,
    lambda ports: ports.llamacpp_http,
    lambda ports, host: {
        "http": f"http://{host}:{ports.llamacpp_http}",
        "metrics_url": f"http://{host}:{ports.llamacpp_http}/metrics",
    },
    own_models=(LLM_NAME,),
)
