"""The Open Inference Protocol (KServe v2) over REST: ``POST /v2/models/<m>[/versions/<v>]/infer``.

Standard endpoints and JSON tensors only, so any compliant server answers it (KServe's model
server, MLServer, Triton). Bodies are built once per process (``kserve_bodies.v2_request_body``);
``response_check: shape`` compares each output's stated shape with the model's metadata (read by
the start check), ``expected`` decodes the JSON outputs and compares their values.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from inferload.users.failures import check_output_shape
from inferload.users.kserve_bodies import v2_answer, v2_output_arrays, v2_output_shapes, v2_request_body
from inferload.users.kserve_http import KServeHttpUser
from inferload.users.request_pool import RequestData


def v2_infer_path(model: str, version: str | None) -> str:
    """The standard inference path of a model (and version)."""
    base = f"/v2/models/{quote(model, safe='')}"
    return f"{base}/versions/{quote(version, safe='')}/infer" if version else f"{base}/infer"


class KServeV2HttpUser(KServeHttpUser):
    abstract = True
    target_kinds = ("kserve-v2-http",)

    def path(self) -> str:
        return v2_infer_path(self.target.model, self.target.version)

    @classmethod
    def target_path(cls) -> str:
        return v2_infer_path(cls.target.model, cls.target.version)

    @classmethod
    def native_answer_check(cls) -> dict[str, Any]:
        if cls.target.response_check != "shape":
            return {"answer": "none"}
        return {"answer": "v2_json", "shapes": {name: list(dims) for name, dims in cls.expected_outputs.items()}}

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        return v2_request_body(list(data.arrays), cls.target.outputs)

    def send(self) -> int:
        index, body = self.post_next()
        check = self.target.response_check
        if check in ("shape", "expected"):
            answer = v2_answer(body)
            if check == "shape":
                shapes = v2_output_shapes(answer)
                for name, expected in self.expected_outputs_now().items():
                    if name in shapes:
                        check_output_shape(name, shapes[name], expected)
            elif self._expected is not None:
                self._expected.arrays(v2_output_arrays(answer), self.request_pool().samples(index))
        return len(body)
