"""Triton Python-backend model: runs the TorchScript file ``model.pt`` next to this file.

Generic for every inferload sample model: `make build` (python -m inferload.local.models.build) copies this
file to model_repository/<model>/1/model.py, where Triton looks for it. The batch of requests
Triton formed is concatenated, run once, and split back per request.
"""

import json
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        torch.set_num_threads(1)  # one thread per instance: instance_group count sets parallelism
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        path = Path(__file__).resolve().parent / "model.pt"
        self.model = torch.jit.load(str(path), map_location="cpu").eval()

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        with torch.inference_mode():
            out = self.model(torch.from_numpy(np.concatenate(arrays, axis=0))).numpy()
        responses, offset = [], 0
        for array in arrays:
            n = array.shape[0]
            tensor = pb_utils.Tensor(self.output_name, np.ascontiguousarray(out[offset : offset + n]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            offset += n
        return responses
