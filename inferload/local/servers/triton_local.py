"""The real Triton server from the nvidia-pytriton wheel, on loopback, CPU only.

The wheel ships ``tritonserver`` (2.51), the Python backend and a backend stub per Python
version. The stub must sit next to ``libtriton_python.so``, so a backend directory of symlinks
is prepared under the state dir (site-packages is never modified). The stub embeds the
system's libpython and finds the virtual environment's packages (torch) through ``PATH``
(the venv's ``bin`` first) and ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from inferload.errors import ServerError
from inferload.local.models.llm import LLM_NAME, ensure_llm_model
from inferload.local.models.specs import model_repository_dir
from inferload.local.servers.manager import LocalServer, NotReady, probe_post, sample_answers, triton_infer
from inferload.local.servers.ports import LOOPBACK, ServerPorts
from inferload.local.servers.procs import ProcessRecord, spawn, stop_group

#: how long Triton may take to stop after SIGTERM. Each Python-backend model's stub must end within it,
#: or Triton exits at once and its Python backend leaves its `/tmp/python_env_*` folder behind (the
#: sample cnn takes 3-5 s to unload on 2 cores: 2 s left one at every stop). Triton first waits, on
#: the same clock, for its HTTP clients' open connections to close (a collector polling its
#: statistics): such a stop takes the whole timeout and is forced (docs/servers.md)
EXIT_TIMEOUT_S = 10
#: how long Triton waits for a Python-backend stub to connect (its default is 30 s): each stub imports
#: torch, and on a busy 2-core machine two Tritons loading at once took 31-33 s per stub; past the
#: timeout Triton dies at start-up (`boost::interprocess::lock_exception`). Triton's own CI uses 120 s
STUB_TIMEOUT_S = 120
#: SIGTERM, then SIGKILL what is left after this long: past Triton's own exit timeout
STOP_TIMEOUT_S = EXIT_TIMEOUT_S + 10


@dataclass(frozen=True)
class TritonInstall:
    """Where the wheel's parts are."""

    server_bin: Path
    python_backend: Path  # holds libtriton_python.so and triton_python_backend_utils.py
    stub: Path
    libs_dir: Path  # the wheel's bundled shared libraries


def find_triton(python_version: str | None = None) -> TritonInstall:
    """Locate tritonserver and the Python backend stub for this interpreter's version."""
    version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        import pytriton
    except ImportError:
        raise ServerError(
            "Triton is not installed: the local Triton comes from the nvidia-pytriton wheel (pip install -e '.[servers]')"
        ) from None
    base = Path(pytriton.__file__).resolve().parent / "tritonserver"
    install = TritonInstall(
        server_bin=base / "bin" / "tritonserver",
        python_backend=base / "backends" / "python",
        stub=base / "python_backend_stubs" / version / "triton_python_backend_stub",
        libs_dir=base.parent.parent / "nvidia_pytriton.libs",
    )
    for path in (install.server_bin, install.python_backend / "libtriton_python.so", install.stub):
        if not path.exists():
            raise ServerError(f"the nvidia-pytriton wheel is incomplete: {path} is missing")
    return install


def prepare_backend_dir(install: TritonInstall, dest: Path) -> Path:
    """``dest/python/`` = the wheel's Python backend plus the stub, as symlinks; returns dest."""
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    links = {entry.name: entry for entry in install.python_backend.iterdir() if entry.is_file()}
    links[install.stub.name] = install.stub
    for name, target in links.items():
        link = python_dir / name
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            link.unlink()
        link.symlink_to(target)
    return dest


def triton_command(
    install: TritonInstall,
    backends: Path,
    repository: Path,
    ports: ServerPorts,
    models: tuple[str, ...],
    host: str = LOOPBACK,
    trace_file: Path | None = None,
) -> list[str]:
    """tritonserver's command line serving ``models`` of ``repository`` (explicit model control, so
    tune can load and unload). Models whose config.pbtxt is incomplete cannot be served by it: the
    config is read as written (Triton's auto-complete is off)."""
    command = [
        str(install.server_bin),
        f"--model-repository={repository}",
        f"--backend-directory={backends}",
        f"--http-address={host}",
        f"--http-port={ports.triton_http}",
        f"--grpc-address={host}",
        f"--grpc-port={ports.triton_grpc}",
        f"--metrics-address={host}",
        f"--metrics-port={ports.triton_metrics}",
        "--allow-metrics=true",
        "--allow-cpu-metrics=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
        f"--backend-config=python,stub-timeout-seconds={STUB_TIMEOUT_S}",
        "--model-control-mode=explicit",
        # every model served here has a complete config.pbtxt: without this flag the Python backend
        # starts one more stub process per model load only to ask the model for its config (with
        # torch imported, about 1.2 CPU-s and 3 s before the model is ready, each load)
        "--disable-auto-complete-config",
    ]
    command += [f"--load-model={m}" for m in models]
    command += trace_arguments(trace_file) if trace_file is not None else []
    return command


def trace_arguments(trace_file: Path) -> list[str]:
    """Triton's trace file, fixed at start (2.51: the settings API cannot change it), tracing off
    until a run with ``trace`` turns it on for its model (`inferload.run.trace_run`)."""
    return [f"--trace-config=triton,file={trace_file}", "--trace-config=level=OFF"]


def triton_env(install: TritonInstall, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment in which the stub imports the venv's packages and the wheel's libs load."""
    env = dict(os.environ if base is None else base)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [str(install.libs_dir), env.get("LD_LIBRARY_PATH", "")] if p)
    purelib = sysconfig.get_paths()["purelib"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in [purelib, env.get("PYTHONPATH", "")] if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def start_triton(
    state_dir: Path, ports: ServerPorts, models: tuple[str, ...], repository: Path | None = None, host: str = LOOPBACK
) -> ProcessRecord:
    """Start tritonserver detached; its output goes to ``state_dir/triton/triton.log``."""
    install = find_triton()
    work = state_dir / "triton"
    backends = prepare_backend_dir(install, work / "backends")
    repository = repository or model_repository_dir()
    if LLM_NAME in models:
        repository = llm_repository(work / "repository", repository, models)
    for model in (m for m in models if m != LLM_NAME):
        if not (repository / model / "1" / "model.pt").exists():
            raise ServerError(
                f"{repository / model / '1' / 'model.pt'} is missing: build the sample models "
                f"first (python -m inferload.local.models.build)"
            )
    command = triton_command(install, backends, repository, ports, models, host, trace_file=work / "trace.json")
    return spawn(command, work / "triton.log", triton_env(install), cwd=work)


#: the built-in LLM's model in Triton: its model.py and the engine module it loads beside it
LLM_MODEL_SOURCES = (
    Path(__file__).resolve().parent / "triton_llm_model.py",
    Path(__file__).resolve().parent / "llamacpp_engine.py",
)
#: llama.cpp's slots in Triton's LLM model (as llama.cpp's own local server has: `llamacpp_local.PARALLEL`)
LLM_PARALLEL = 4


def llm_config(gguf: Path, parallel: int = LLM_PARALLEL) -> str:
    """The built-in LLM's ``config.pbtxt``: a decoupled Python-backend model with Triton's generate
    extension's tensors (``text_input`` in, ``text_output`` out), one instance (llama.cpp's slots
    decode its requests together)."""
    return f"""name: "{LLM_NAME}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
parameters {{ key: "gguf" value {{ string_value: {json.dumps(str(gguf))} }} }}
parameters {{ key: "parallel" value {{ string_value: "{parallel}" }} }}
"""


def llm_repository(folder: Path, samples: Path, models: tuple[str, ...]) -> Path:
    """A model repository in ``folder`` serving the built-in LLM (written there, the GGUF written
    first when it is not there) and the sample models asked for (links to ``samples``' folders)."""
    folder.mkdir(parents=True, exist_ok=True)
    for model in (m for m in models if m != LLM_NAME):
        link = folder / model
        if not link.is_symlink():
            link.symlink_to((samples / model).resolve(), target_is_directory=True)
    version = folder / LLM_NAME / "1"
    version.mkdir(parents=True, exist_ok=True)
    sources = dict(zip(("model.py", "llamacpp_engine.py"), LLM_MODEL_SOURCES, strict=True))
    for name, source in sources.items():
        (version / name).write_text(source.read_text())
    (folder / LLM_NAME / "config.pbtxt").write_text(llm_config(ensure_llm_model()))
    return folder


def triton_answers(port: int, model: str, host: str = LOOPBACK, timeout_s: float = 5.0) -> None:
    """One real answer of ``model``: a sample model's inference, or the LLM's streamed generation of
    two tokens through the generate extension (``generate_stream``), else NotReady."""
    if model != LLM_NAME:
        sample_answers(triton_infer)(port, model, host=host, timeout_s=timeout_s)
        return
    url = f"http://{host}:{port}/v2/models/{model}/generate_stream"
    body = json.dumps({"text_input": "ready?", "parameters": {"max_tokens": 2, "stream": True}}).encode()
    answer = probe_post(url, body, "application/json", timeout_s)
    if b'"text_output"' not in answer:
        raise NotReady(f"{url} streamed no text_output: {answer[:300]!r}")


def stop_triton(record: ProcessRecord, timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM tritonserver (it unloads its models and stops their stubs), SIGKILL leftovers; returns
    killed pids."""
    return stop_group(record, term_timeout_s=timeout_s, leader_stops_the_rest=True)


#: how `inferload servers` starts, probes and stops it (its `inferload.scenario.kinds.ServerRecord` names this)
LOCAL = LocalServer(
    "triton",
    start_triton,
    lambda record, _state_dir: stop_triton(record),
    triton_answers,
    lambda ports: ports.triton_http,
    lambda ports, host: {
        "http": f"{host}:{ports.triton_http}",
        "grpc": f"{host}:{ports.triton_grpc}",
        "metrics_url": f"http://{host}:{ports.triton_metrics}/metrics",
    },
)
