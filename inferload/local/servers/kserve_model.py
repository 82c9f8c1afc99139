"""The local KServe model server's entry: the sample TorchScript models behind a small ``kserve.Model``.

Runs in the KServe virtual environment (``kserve_local``), not in inferload's: it imports only
kserve, numpy and torch (torch reached through a .pth file pointing at inferload's environment),
never inferload. One ``TorchScriptModel`` per sample model answers KServe v1 (``{"instances"}`` →
``{"predictions"}``) and the Open Inference Protocol (v2, REST and gRPC; FP32 input tensor
``INPUT__0`` [-1, *shape] → ``OUTPUT__0``) and states its tensors for the v2 metadata endpoint.

    python kserve_model.py --models '[{"name": ..., "path": ..., "input": [...], "output": [...]}]' \
        --host 127.0.0.1 --http_port N --grpc_port M
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

import numpy as np
import torch
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from kserve_bind import bind_to

INPUT_NAME = "INPUT__0"
OUTPUT_NAME = "OUTPUT__0"


class TorchScriptModel(Model):
    """One TorchScript file served by KServe, on the CPU, one thread per call."""

    def __init__(self, name: str, path: str, input_shape: list[int], output_shape: list[int]) -> None:
        super().__init__(name)
        self.path = path
        self.input_shape = input_shape
        self.output_shape = output_shape
        self.module: Any = None

    def load(self) -> bool:
        self.module = torch.jit.load(self.path, map_location="cpu").eval()
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        return [{"name": INPUT_NAME, "datatype": "FP32", "shape": [-1, *self.input_shape]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [{"name": OUTPUT_NAME, "datatype": "FP32", "shape": [-1, *self.output_shape]}]

    def _run(self, array: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            result = self.module(torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)))
        return np.asarray(result.numpy(), dtype=np.float32)

    async def predict(
        self, payload: dict[str, Any] | InferRequest, headers: dict[str, str] | None = None, response_headers: Any = None
    ) -> dict[str, Any] | InferResponse:
        if isinstance(payload, InferRequest):
            array = payload.inputs[0].as_numpy().reshape(-1, *self.input_shape)
            result = self._run(array)
            output = InferOutput(name=OUTPUT_NAME, shape=list(result.shape), datatype="FP32")
            output.set_data_from_numpy(result, binary_data=False)
            return InferResponse(model_name=self.name, infer_outputs=[output], response_id=payload.id or str(uuid.uuid4()))
        instances = np.asarray(payload["instances"], dtype=np.float32).reshape(-1, *self.input_shape)
        return {"predictions": self._run(instances).tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", required=True, help="JSON list of {name, path, input, output}")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--host", default="127.0.0.1", help="the address the REST and gRPC servers listen on")
    args, _ = parser.parse_known_args()
    bind_to(args.host)
    torch.set_num_threads(args.threads)
    models = []
    for entry in json.loads(args.models):
        model = TorchScriptModel(entry["name"], entry["path"], list(entry["input"]), list(entry["output"]))
        model.load()
        models.append(model)
    ModelServer().start(models)


if __name__ == "__main__":
    main()
