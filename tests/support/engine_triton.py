"""What the native engine's integration tests share: a real Triton of their own (the sample
``identity`` model and the ``tail_slow`` test model, whose requests with INPUT0[0] > 0.9 take
200 ms), the pre-encoded requests the users would build for them, Triton's own success count,
and the wait for per-call completions on the engine's eventfd."""

from __future__ import annotations

import select
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from inferload.local.models.specs import model_repository_dir
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import spawn
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, stop_triton, triton_command, triton_env
from tests.support.example_triton import EXAMPLES
from tests.support.waiting import wait_until

MODELS = ("identity", "tail_slow")
READY_DEADLINE_S = 180


@dataclass(frozen=True)
class EngineTriton:
    http: str  # host:port
    grpc: str
    log: Path

    def success_count(self, model: str) -> int:
        """Triton's own count of the model's successful requests (the statistics API)."""
        answer = requests.get(f"http://{self.http}/v2/models/{model}/stats", timeout=5)
        answer.raise_for_status()
        return int(answer.json()["model_stats"][0]["inference_stats"]["success"]["count"])

    def ready(self, model: str) -> bool:
        return requests.get(f"http://{self.http}/v2/models/{model}/ready", timeout=2).status_code == 200


@contextmanager
def engine_triton(work: Path) -> Iterator[EngineTriton]:
    """Triton serving ``identity`` (the sample model, built) and ``tail_slow`` until the block ends."""
    repository = work / "models"
    shutil.copytree(model_repository_dir() / "identity", repository / "identity", ignore=shutil.ignore_patterns("configs"))
    shutil.copytree(EXAMPLES / "tail_slow", repository / "tail_slow", ignore=shutil.ignore_patterns("SOURCE.md", "__pycache__"))
    ports = ServerPorts.free()
    install = find_triton()
    command = triton_command(install, prepare_backend_dir(install, work / "backends"), repository, ports, MODELS)
    log = work / "triton.log"
    record = spawn(command, log, triton_env(install), cwd=work)
    try:
        server = EngineTriton(f"127.0.0.1:{ports.triton_http}", f"127.0.0.1:{ports.triton_grpc}", log)
        for model in MODELS:
            wait_until(
                partial(server.ready, model),
                READY_DEADLINE_S,
                f"Triton serving {model} (log: {log})",
                0.5,
                (requests.RequestException,),
            )
        yield server
    finally:
        stop_triton(record)


def identity_input(value: float = 0.0) -> np.ndarray:
    return np.full((1, 16), value, dtype=np.float32)


def slow_input() -> np.ndarray:
    """A ``tail_slow`` input that takes its slow path (200 ms)."""
    return np.ones((1, 4), dtype=np.float32)


def grpc_request(model: str, name: str, array: np.ndarray, datatype: str = "FP32") -> bytes:
    """A serialized ModelInferRequest as `TritonGrpcUser.encode_request` builds it."""
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = name, datatype
    tensor.shape.extend(array.shape)
    request.raw_input_contents.append(array.tobytes())
    return request.SerializeToString()


def http_request(
    model: str, name: str, output: str, array: np.ndarray, datatype: str = "FP32"
) -> tuple[str, bytes, list[tuple[str, str]]]:
    """(path, body, headers) as `TritonHttpUser` posts it (tritonclient's binary body)."""
    infer_input = httpclient.InferInput(name, list(array.shape), datatype)
    infer_input.set_data_from_numpy(array, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [infer_input], outputs=[httpclient.InferRequestedOutput(output, binary_data=True)]
    )
    return f"/v2/models/{model}/infer", body, [("Inference-Header-Content-Length", str(json_size))]


def wait_for_calls(engine: Any, count: int, timeout_s: float = 30.0) -> list[tuple[Any, ...]]:
    """``count`` per-call completions, read as the hub would: when the eventfd is readable."""
    done: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    while len(done) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"{len(done)} of {count} calls came back in {timeout_s} s"
        readable, _, _ = select.select([engine.notify_fd()], [], [], left)
        if readable:
            done.extend(engine.take_calls())
    return done
