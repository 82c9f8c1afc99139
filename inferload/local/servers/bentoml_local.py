"""The real BentoML service of the sample models, on loopback, in BentoML's own virtual environment.

BentoML's dependencies (its own pinned starlette, uvicorn, opentelemetry, numpy 2) stay out of
the load generator's environment: the venv is ``server_venv``'s, named by a hash of the pinned
requirements below (``$INFERLOAD_VENVS/bentoml-<hash>``, default ``./.inferload/venvs``), made on
first use; torch, torchgen and functorch of the main environment are linked in, not installed
again. Measured on this project's machines: 1 to 3 min to install (the cores shared or not) and
294 MB for the venv (see docs/servers.md).

``start_bentoml`` serves ``bentoml_service.py`` (one API per sample model, adaptive batching on)
with ``bentoml serve``; its output goes to ``state_dir/bentoml/bentoml.log``; ``stop_bentoml``
stops its whole process group and the workers BentoML runs in groups of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

from inferload.errors import ServerError
from inferload.local.models.specs import torchscript_path
from inferload.local.servers.manager import LocalServer, bentoml_infer, sample_answers
from inferload.local.servers.ports import LOOPBACK, ServerPorts
from inferload.local.servers.procs import ProcessRecord, is_alive, spawn, stop_group
from inferload.local.servers.server_venv import VenvSpec, ensure_venv

#: bentoml 1.4.40 and everything it resolved to on Python 3.11 (pip freeze of its venv), plus torch's
#: pure-Python dependencies; installed with --no-deps, so the venv is the same on every machine
REQUIREMENTS: tuple[str, ...] = (
    "a2wsgi==1.10.10",
    "aiohappyeyeballs==2.7.1",
    "aiohttp-asgi-connector==1.2.0",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "aiosqlite==0.22.1",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "asgiref==3.13.0",
    "attrs==26.1.0",
    "bentoml==1.4.40",
    "cattrs==23.1.2",
    "certifi==2026.10.19.post1",
    "click-option-group==0.5.10",
    "click==8.5.1",
    "cloudpickle==3.1.3",
    "filelock==4.3.1",
    "frozenlist==1.8.0",
    "fsspec==2026.9.0",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httpx-ws==0.9.0",
    "httpx==0.28.1",
    "idna==3.20",
    "Jinja2==3.1.6",
    "kantoku==0.18.3",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "mdurl==0.1.2",
    "mpmath==1.3.0",
    "multidict==7.2.1",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "nvidia-ml-py==13.615.71",
    "opentelemetry-api==1.45.1",
    "opentelemetry-instrumentation-aiohttp-client==0.66b1",
    "opentelemetry-instrumentation-asgi==0.66b1",
    "opentelemetry-instrumentation==0.66b1",
    "opentelemetry-sdk==1.45.1",
    "opentelemetry-semantic-conventions==0.66b1",
    "opentelemetry-util-http==0.66b1",
    "packaging==26.4",
    "pathspec==1.1.1",
    "pip-requirements-parser==32.0.1",
    "prometheus_client==0.26.0",
    "propcache==0.5.4",
    "psutil==7.2.2",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "pyparsing==3.3.3",
    "python-dateutil==4.0.0",
    "python-json-logger==4.2.0",
    "python-multipart==0.0.34",
    "PyYAML==6.0.4",
    "pyzmq==27.3.0",
    "rich-toolkit==0.20.6",
    "rich==15.0.0",
    "schema==0.7.8",
    "simple-di==0.1.5",
    "starlette==1.10.0",
    "sympy==1.14.0",
    "tomli_w==1.2.0",
    "tornado==6.6.1",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "uvicorn==0.54.0",
    "watchfiles==1.3.0",
    "wrapt==2.5.2",
    "wsproto==1.3.2",
    "yarl==1.25.1",
)
BENTOML_VENV = VenvSpec("bentoml", REQUIREMENTS)
SERVICE_MODULE = "bentoml_service"
SERVICE = f"{SERVICE_MODULE}:InferloadModels"
#: the API's adaptive batching: the largest batch, and the latency BentoML answers 503 past
MAX_BATCH = 32
MAX_LATENCY_MS = 10000


def bentoml_env(state_dir: Path, models: tuple[str, ...], base: dict[str, str] | None = None) -> dict[str, str]:
    """The service's environment: the models' TorchScript files, BentoML's home in the state dir, no telemetry."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)
    env["INFERLOAD_BENTOML_MODELS"] = json.dumps({model: str(torchscript_path(model)) for model in models})
    env["INFERLOAD_BENTOML_MAX_BATCH"] = str(MAX_BATCH)
    env["INFERLOAD_BENTOML_MAX_LATENCY_MS"] = str(MAX_LATENCY_MS)
    env["BENTOML_HOME"] = str(state_dir / "bentoml" / "home")
    env["BENTOML_DO_NOT_TRACK"] = "True"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def bentoml_command(venv: Path, port: int, host: str = LOOPBACK) -> list[str]:
    service_dir = Path(__file__).resolve().parent
    return [
        str(venv / "bin" / "bentoml"),
        "serve",
        SERVICE,
        "--working-dir",
        str(service_dir),
        "--host",
        host,
        "--port",
        str(port),
    ]


def start_bentoml(state_dir: Path, ports: ServerPorts, models: tuple[str, ...], host: str = LOOPBACK) -> ProcessRecord:
    """Start ``bentoml serve`` detached (its venv made first when missing)."""
    for model in models:
        if not torchscript_path(model).exists():
            raise ServerError(
                f"{torchscript_path(model)} is missing: build the sample models first (python -m inferload.local.models.build)"
            )
    venv = ensure_venv(BENTOML_VENV)
    work = state_dir / "bentoml"
    work.mkdir(parents=True, exist_ok=True)
    return spawn(bentoml_command(venv, ports.bentoml_http, host), work / "bentoml.log", bentoml_env(state_dir, models), cwd=work)


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid`` (BentoML's workers run in process groups of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_bentoml(record: ProcessRecord, timeout_s: float = 15.0) -> list[int]:
    """SIGTERM the service's group (BentoML's arbiter stops its workers), SIGKILL leftovers, its
    workers included; returns killed pids."""
    workers = descendants(record.pid) if is_alive(record.pid, record.start_ticks) else []
    killed = stop_group(record, term_timeout_s=timeout_s)
    for pid in workers:
        if is_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


#: how `inferload servers` starts, probes and stops it (its `inferload.scenario.kinds.ServerRecord` names this)
LOCAL = LocalServer(
    "bentoml",
    start_bentoml,
    lambda record, _state_dir: stop_bentoml(record),
    sample_answers(bentoml_infer),
    lambda ports: ports.bentoml_http,
    lambda ports, host: {
        "http": f"http://{host}:{ports.bentoml_http}",
        "metrics_url": f"http://{host}:{ports.bentoml_http}/metrics",
    },
)
