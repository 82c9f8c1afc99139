"""The real TorchServe on loopback, with a generated config.properties.

Everything it writes stays under ``state_dir/torchserve``: TMPDIR and ``java.io.tmpdir`` (its
pid file, unix sockets and unpacked models; one server per TMPDIR), its logs and its stdout.
Stopped with ``torchserve --stop`` under the same TMPDIR, then whatever is left of its process
group is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from inferload.errors import JavaMissingError, ServerError
from inferload.local.models.specs import model_store_dir
from inferload.local.servers.manager import LocalServer, sample_answers, torchserve_infer
from inferload.local.servers.ports import LOOPBACK, ServerPorts
from inferload.local.servers.procs import ProcessRecord, spawn, stop_group

MIN_JAVA = 11


@dataclass(frozen=True)
class TorchServeModelConfig:
    """How TorchServe batches and runs each model."""

    batch_size: int = 8
    max_batch_delay_ms: int = 5
    workers: int = 1
    response_timeout_s: int = 60


def java_major_version(env: dict[str, str] | None = None) -> int:
    """Major version of the ``java`` on PATH; JavaMissingError when absent or unreadable."""
    env = dict(os.environ if env is None else env)
    java = shutil.which("java", path=env.get("PATH", ""))
    if java is None:
        raise JavaMissingError(
            f"TorchServe needs Java {MIN_JAVA} or newer and no `java` was found on PATH; "
            f"install a JDK (e.g. apt-get install openjdk-17-jre-headless)"
        )
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaMissingError(f"`{java} -version` failed: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if proc.returncode != 0 or not match:
        raise JavaMissingError(f"could not read the Java version from `{java} -version`: {proc.stderr.strip()[:200]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_..." is Java 8
        major = int(match.group(2))
    return major


def check_java(env: dict[str, str] | None = None) -> int:
    major = java_major_version(env)
    if major < MIN_JAVA:
        raise JavaMissingError(f"TorchServe needs Java {MIN_JAVA} or newer; the `java` on PATH is Java {major}")
    return major


def config_properties(
    ports: ServerPorts,
    models: tuple[str, ...],
    store: Path,
    tmpdir: Path,
    model_config: TorchServeModelConfig,
    host: str = LOOPBACK,
    token_auth: bool = False,
    tls: tuple[Path, Path] | None = None,
    model_api: bool = True,
) -> str:
    """The text of config.properties for these ports and models. ``token_auth`` leaves TorchServe's
    token authorization on (it then writes ``key_file.json`` in its working folder); ``model_api``
    False leaves model registration off through the management API (TorchServe 0.12's default); ``tls``
    (certificate, private key: PEM files) serves the inference API over HTTPS ("Enable SSL" in
    TorchServe's configuration docs); management and metrics stay plain HTTP on loopback."""
    models_json = {
        m: {
            "1.0": {
                "marName": f"{m}.mar",
                "batchSize": model_config.batch_size,
                "maxBatchDelay": model_config.max_batch_delay_ms,
                "minWorkers": model_config.workers,
                "maxWorkers": model_config.workers,
                "responseTimeout": model_config.response_timeout_s,
            }
        }
        for m in models
    }
    lines = [
        f"inference_address={'https' if tls else 'http'}://{host}:{ports.ts_inference}",
        f"management_address=http://{LOOPBACK}:{ports.ts_management}",  # management stays local
        f"metrics_address=http://{host}:{ports.ts_metrics}",
        f"grpc_inference_address={LOOPBACK}",
        f"grpc_inference_port={ports.ts_grpc_inference}",
        f"grpc_management_address={LOOPBACK}",
        f"grpc_management_port={ports.ts_grpc_management}",
        f"disable_token_authorization={'false' if token_auth else 'true'}",
        "install_py_dep_per_model=false",
        # register/unregister through the management API (on loopback): `inferload tune` re-registers
        # a model with other batch settings; TorchServe 0.12 refuses it otherwise (405)
        f"enable_model_api={'true' if model_api else 'false'}",
        "metrics_mode=prometheus",
        "model_metrics_auto_detect=true",
        f"model_store={store}",
        "load_models=" + ",".join(f"{m}.mar" for m in models),
        "models=" + json.dumps(models_json, separators=(",", ":")),
        f"default_workers_per_model={model_config.workers}",
        # C1 only: the frontend is short-lived here and never the limit (docs/servers.md, measured)
        f"vmargs=-Djava.io.tmpdir={tmpdir} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx512m",
    ]
    if tls is not None:
        lines += [f"certificate_file={tls[0]}", f"private_key_file={tls[1]}"]
    return "\n".join(lines) + "\n"


#: TorchServe puts its worker sockets in TMPDIR (``.ts.sock.<port>``); a unix socket path holds at
#: most 107 bytes, so a TMPDIR longer than this is reached through a short link in the system temp folder
MAX_SOCKET_DIR_CHARS = 80


def short_tmpdir(tmpdir: Path) -> Path:
    """``tmpdir`` itself, or (when its path is too long for unix sockets) a short, stable link to it."""
    if len(str(tmpdir)) <= MAX_SOCKET_DIR_CHARS:
        return tmpdir
    digest = hashlib.sha1(str(tmpdir).encode()).hexdigest()[:12]
    link = Path(tempfile.gettempdir()) / f"inferload-ts-{digest}"
    if link.is_symlink() and Path(os.readlink(link)) != tmpdir:
        link.unlink()
    if not link.is_symlink():
        link.symlink_to(tmpdir, target_is_directory=True)
    return link


def torchserve_env(tmpdir: Path, logs: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["TMPDIR"] = str(short_tmpdir(tmpdir))
    env["LOG_LOCATION"] = str(logs)
    env["METRICS_LOCATION"] = str(logs)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _torchserve_bin() -> str:
    candidate = Path(sys.executable).parent / "torchserve"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("torchserve")
    if found is None:
        raise ServerError("TorchServe is not installed (pip install -e '.[servers]')")
    return found


def start_torchserve(
    state_dir: Path,
    ports: ServerPorts,
    models: tuple[str, ...],
    model_config: TorchServeModelConfig = TorchServeModelConfig(),
    store: Path | None = None,
    host: str = LOOPBACK,
    token_auth: bool = False,
    tls: tuple[Path, Path] | None = None,
    model_api: bool = True,
) -> ProcessRecord:
    """Start TorchServe in the foreground of a detached session; returns its record. With
    ``token_auth`` its keys are in ``state_dir/torchserve/key_file.json``; ``model_api`` False: as
    TorchServe 0.12 starts by default, its management API refuses to register or unregister models."""
    work = state_dir / "torchserve"
    tmpdir, logs = work / "tmp", work / "logs"
    tmpdir.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    env = torchserve_env(tmpdir, logs)
    check_java(env)
    store = store or model_store_dir()
    for model in models:
        if not (store / f"{model}.mar").exists():
            raise ServerError(
                f"{store / (model + '.mar')} is missing: build the sample models first (python -m inferload.local.models.build)"
            )
    config = work / "config.properties"
    config.write_text(
        config_properties(ports, models, store, short_tmpdir(tmpdir), model_config, host, token_auth, tls, model_api)
    )
    command = [_torchserve_bin(), "--start", "--foreground", "--ncs", "--ts-config", str(config), "--model-store", str(store)]
    return spawn(command, work / "torchserve.log", env, cwd=work)


def stop_torchserve(record: ProcessRecord, state_dir: Path, timeout_s: float = 20.0) -> list[int]:
    """``torchserve --stop`` under the server's TMPDIR, then make sure its group is gone."""
    work = state_dir / "torchserve"
    env = torchserve_env(work / "tmp", work / "logs")
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ServerError):
        subprocess.run(
            [_torchserve_bin(), "--stop"],
            env=env,
            cwd=str(work),
            timeout=timeout_s,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return stop_group(record, term_timeout_s=timeout_s)


#: how `inferload servers` starts, probes and stops it (its `inferload.scenario.kinds.ServerRecord` names this)
LOCAL = LocalServer(
    "torchserve",
    start_torchserve,
    stop_torchserve,
    sample_answers(torchserve_infer),
    lambda ports: ports.ts_inference,
    lambda ports, host: {
        "inference": f"http://{host}:{ports.ts_inference}",
        "management": f"http://{LOOPBACK}:{ports.ts_management}",  # TorchServe's management API stays on loopback
        "metrics_url": f"http://{host}:{ports.ts_metrics}/metrics",
    },
)
