"""The real KServe model server of the sample models, on loopback, in KServe's own virtual environment.

``kserve`` (the Python model server from PyPI: KServe v1 and the Open Inference Protocol over REST
and gRPC, Prometheus /metrics on the REST port) pins numpy 2, fastapi, kubernetes and more, so it
runs in a venv of its own (``server_venv``: ``$INFERLOAD_VENVS/kserve-<hash>``, torch linked
from the main environment, never installed twice). ``start_kserve`` serves ``kserve_model.py``
(one ``TorchScriptModel`` per sample model: the same TorchScript files Triton and TorchServe
serve) with REST on ``ports.kserve_http`` and gRPC on ``ports.kserve_grpc``; its output goes to
``state_dir/kserve/kserve.log``. ``stop_kserve`` stops its whole process group.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from inferload.errors import ServerError
from inferload.local.models.llm import LLM_NAME, ensure_llm_model
from inferload.local.models.specs import get_spec, torchscript_path
from inferload.local.servers.manager import LocalServer, NotReady, probe_post, sample_answers, triton_infer
from inferload.local.servers.ports import LOOPBACK, ServerPorts
from inferload.local.servers.procs import ProcessRecord, spawn, stop_group
from inferload.local.servers.server_venv import VenvSpec, ensure_venv

#: kserve 0.21.0 and everything it resolved to on Python 3.11 (pip freeze), plus torch's pure-Python
#: dependencies; installed with --no-deps, so the venv is the same on every machine
REQUIREMENTS: tuple[str, ...] = (
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiohttp-retry==2.9.1",
    "aiosignal==1.4.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "cloudevents==1.13.0",
    "cryptography==50.0.2",
    "deprecation==2.1.0",
    "durationpy==0.11",
    "fastapi==0.165.0",
    "filelock==4.3.1",
    "frozenlist==1.8.0",
    "fsspec==2026.9.0",
    "grpc-interceptor==0.15.4",
    "grpcio==1.85.3",
    "grpcio-tools==1.81.1",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httptools==0.9.0",
    "httpx==0.28.1",
    "idna==3.20",
    "Jinja2==3.1.6",
    "kserve==0.21.0",
    "kubernetes==37.0.1",
    "MarkupSafe==3.0.4",
    "mpmath==1.3.0",
    "multidict==7.2.1",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "oauthlib==4.0.1",
    "opentelemetry-api==1.45.2",
    "orjson==3.13.0",
    "packaging==26.4",
    "pandas==2.3.3",
    "pillow==13.0.0",
    "prometheus_client==0.26.0",
    "propcache==0.5.4",
    "protobuf==6.33.6",
    "psutil==5.9.8",
    "pyasn1==0.6.5",
    "pycparser==3.12",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "PyJWT==2.15.1",
    "python-dateutil==2.9.0.post0",
    "python-dotenv==1.2.4",
    "python-multipart==0.0.34",
    "pytz==2026.6",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "requests-oauthlib==2.0.0",
    "six==1.17.0",
    "starlette==1.10.0",
    "sympy==1.14.0",
    "tabulate==0.10.0",
    "timing-asgi==0.3.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "urllib3==2.8.0",
    "uvicorn==0.54.0",
    "uvloop==0.23.0",
    "watchfiles==1.3.0",
    "websocket-client==1.9.2",
    "websockets==17.4",
    "yarl==1.25.1",
)
KSERVE_VENV = VenvSpec("kserve", REQUIREMENTS)
MODEL_SCRIPT = Path(__file__).resolve().parent / "kserve_model.py"

#: kserve 0.14.1 and what it resolved to on Python 3.11 (pip freeze): the built-in LLM's KServe. Its
#: OpenAI routes stand on their own; from 0.15 on KServe imports their request types from vLLM (not
#: installable here). llama.cpp's engine (xllamacpp) is linked from the main environment.
LLM_REQUIREMENTS: tuple[str, ...] = (
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiohttp-retry==2.9.1",
    "aiosignal==1.4.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "cloudevents==1.13.0",
    "deprecation==2.1.0",
    "durationpy==0.11",
    "fastapi==0.165.0",
    "frozenlist==1.8.0",
    "grpcio==1.85.3",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httptools==0.9.0",
    "httpx==0.27.2",
    "idna==3.21",
    "kserve==0.14.1",
    "kubernetes==37.0.1",
    "multidict==7.2.1",
    "numpy==1.26.4",
    "oauthlib==4.0.1",
    "opentelemetry-api==1.45.3",
    "orjson==3.13.0",
    "packaging==26.4",
    "pandas==2.3.3",
    "prometheus_client==0.20.0",
    "propcache==0.5.4",
    "protobuf==4.25.9",
    "psutil==5.9.8",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "python-dateutil==2.9.0.post0",
    "python-dotenv==1.2.4",
    "pytz==2026.6",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "requests-oauthlib==2.0.0",
    "six==1.17.0",
    "sniffio==1.3.1",
    "starlette==1.10.0",
    "tabulate==0.9.0",
    "timing-asgi==0.3.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "urllib3==2.8.0",
    "uvicorn==0.30.6",
    "uvloop==0.23.0",
    "watchfiles==1.3.0",
    "websocket-client==1.9.2",
    "websockets==17.4",
    "yarl==1.25.1",
)
KSERVE_LLM_VENV = VenvSpec("kserve-llm", LLM_REQUIREMENTS, links=("xllamacpp",))
LLM_SCRIPT = Path(__file__).resolve().parent / "kserve_llm_model.py"
#: llama.cpp's slots in KServe's LLM model (as llama.cpp's own local server has: `llamacpp_local.PARALLEL`)
LLM_PARALLEL = 4


def models_argument(models: tuple[str, ...]) -> str:
    """The model script's ``--models`` JSON: name, TorchScript path, input and output shapes (no batch)."""
    entries = []
    for model in models:
        spec = get_spec(model)
        path = torchscript_path(model)
        if not path.exists():
            raise ServerError(f"{path} is missing: build the sample models first (python -m inferload.local.models.build)")
        entries.append({"name": model, "path": str(path), "input": list(spec.input_shape), "output": list(spec.output_shape)})
    return json.dumps(entries)


def kserve_command(venv: Path, ports: ServerPorts, models: tuple[str, ...], host: str = LOOPBACK) -> list[str]:
    """The model server's command in ``venv``: the sample models (REST and gRPC), or the built-in LLM
    behind KServe's OpenAI routes (REST)."""
    if LLM_NAME in models:
        script = [str(LLM_SCRIPT), "--name", LLM_NAME, "--gguf", str(ensure_llm_model()), "--parallel", str(LLM_PARALLEL)]
    else:
        script = [str(MODEL_SCRIPT), "--models", models_argument(models)]
    return [
        str(venv / "bin" / "python"),
        *script,
        "--host",
        host,
        "--http_port",
        str(ports.kserve_http),
        "--grpc_port",
        str(ports.kserve_grpc),
        "--workers",
        "1",
        "--enable_latency_logging",
        "false",
    ]


def kserve_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)  # only the venv's packages (and the linked torch)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def start_kserve(state_dir: Path, ports: ServerPorts, models: tuple[str, ...], host: str = LOOPBACK) -> ProcessRecord:
    """Start the KServe model server detached on ``host`` (its venv made first when missing): the
    sample models, or the built-in LLM alone (a KServe of its own version: `KSERVE_LLM_VENV`)."""
    if LLM_NAME in models and len(models) > 1:
        raise ServerError(f"KServe serves the built-in LLM {LLM_NAME!r} alone (its own KServe version); asked for {list(models)}")
    command = kserve_command(ensure_venv(KSERVE_LLM_VENV if LLM_NAME in models else KSERVE_VENV), ports, models, host)
    work = state_dir / "kserve"
    work.mkdir(parents=True, exist_ok=True)
    return spawn(command, work / "kserve.log", kserve_env(), cwd=work)


def stop_kserve(record: ProcessRecord, timeout_s: float = 15.0) -> list[int]:
    """SIGTERM the server's group (uvicorn and the gRPC server stop), SIGKILL leftovers; returns killed pids."""
    return stop_group(record, term_timeout_s=timeout_s)


def kserve_answers(port: int, model: str, host: str = LOOPBACK, timeout_s: float = 5.0) -> None:
    """One real answer of ``model``: a sample model's Open Inference Protocol JSON infer (as Triton
    answers it), or the LLM's completion of two tokens on KServe's OpenAI route, else NotReady."""
    if model != LLM_NAME:
        sample_answers(triton_infer)(port, model, host=host, timeout_s=timeout_s)
        return
    url = f"http://{host}:{port}/openai/v1/completions"
    body = json.dumps({"model": model, "prompt": "ready?", "max_tokens": 2}).encode()
    answer = probe_post(url, body, "application/json", timeout_s)
    if b'"choices"' not in answer:
        raise NotReady(f"{url} answered no choices: {answer[:300]!r}")


#: how `inferload servers` starts, probes and stops it (its `inferload.scenario.kinds.ServerRecord` names this)
LOCAL = LocalServer(
    "kserve",
    start_kserve,
    lambda record, _state_dir: stop_kserve(record),
    kserve_answers,
    lambda ports: ports.kserve_http,
    lambda ports, host: {
        "http": f"http://{host}:{ports.kserve_http}",
        "grpc": f"{host}:{ports.kserve_grpc}",
        "metrics_url": f"http://{host}:{ports.kserve_http}/metrics",
    },
)
