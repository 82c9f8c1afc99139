"""The BentoML service of the local sample models: one API per model, adaptive batching on.

Run by ``bentoml_local.py`` with ``bentoml serve bentoml_service:InferloadModels`` in BentoML's own
virtual environment (torch comes from the load generator's environment through a ``.pth`` file),
so this file imports nothing of inferload. ``POST /<model>`` with a JSON body
``{"INPUT__0": [[...], ...]}`` (the same tensor name as on Triton and TorchServe; the batch dimension
first) answers the model's output as a JSON list, one entry per item.

Environment: ``INFERLOAD_BENTOML_MODELS`` (JSON: model name -> TorchScript file),
``INFERLOAD_BENTOML_DEVICE`` (default ``cpu``; ``cuda`` in the compose stack),
``INFERLOAD_BENTOML_MAX_BATCH`` (default 32) and ``INFERLOAD_BENTOML_MAX_LATENCY_MS`` (default 10000: BentoML answers 503 to a request it expects to miss it).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import bentoml
import numpy as np
from bentoml.validators import DType

MAX_BATCH = int(os.environ.get("INFERLOAD_BENTOML_MAX_BATCH", "32"))
MAX_LATENCY_MS = int(os.environ.get("INFERLOAD_BENTOML_MAX_LATENCY_MS", "10000"))

Float32Array = Annotated[np.ndarray, DType("float32")]


@bentoml.service(name="inferload_models", workers=1, traffic={"timeout": 60})
class InferloadModels:
    """The TorchScript sample models, loaded once per worker."""

    def __init__(self) -> None:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        paths: dict[str, str] = json.loads(os.environ.get("INFERLOAD_BENTOML_MODELS", "{}"))
        self._device = os.environ.get("INFERLOAD_BENTOML_DEVICE", "cpu")
        self._models: dict[str, Any] = {
            name: torch.jit.load(path, map_location=self._device).eval() for name, path in paths.items()
        }

    def _run(self, name: str, batch: np.ndarray) -> np.ndarray:
        import torch

        model = self._models.get(name)
        if model is None:
            raise bentoml.exceptions.NotFound(f"model {name!r} is not loaded (loaded: {sorted(self._models)})")
        with torch.inference_mode():
            tensor = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).to(self._device)
            result: np.ndarray = model(tensor).cpu().numpy()
        return result

    @bentoml.api(batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def tiny(self, INPUT__0: Float32Array) -> np.ndarray:
        return self._run("tiny", INPUT__0)

    @bentoml.api(batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def cnn(self, INPUT__0: Float32Array) -> np.ndarray:
        return self._run("cnn", INPUT__0)

    @bentoml.api(batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def identity(self, INPUT__0: Float32Array) -> np.ndarray:
        return self._run("identity", INPUT__0)
