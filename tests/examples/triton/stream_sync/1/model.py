"""inferload's own test model: a decoupled model that sends IN responses (OUT = IN) and the final
flag for each request from `execute` itself, before it returns."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for _ in range(int(value[0])):
                out = pb_utils.Tensor("OUT", np.array([value[0]], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
