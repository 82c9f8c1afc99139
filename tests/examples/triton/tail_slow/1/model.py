"""inferload's own test model: echo INPUT0; sleep `base_ms` per execution, and `slow_ms` more when
any request's INPUT0[0] is above 0.9 (a slow path for some inputs)."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.slow_s = float(parameters.get("slow_ms", {}).get("string_value", "0")) / 1000.0
        self.base_s = float(parameters.get("base_ms", {}).get("string_value", "0")) / 1000.0

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        pause = self.base_s
        if self.slow_s and any(float(np.asarray(a).reshape(-1)[0]) > 0.9 for a in arrays):
            pause += self.slow_s
        if pause:
            time.sleep(pause)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.asarray(a, dtype=np.float32))]) for a in arrays]
