"""KServe's v1 protocol over REST: ``POST /v1/models/<name>:predict`` with ``{"instances": [...]}``.

One instance per item of the batch (``kserve_bodies.v1_request_body``), bodies built once per
process. ``response_check: shape`` wants ``{"predictions": [batch_size items]}``; ``expected``
compares the predictions with the expected answers as TorchServe's JSON answers are compared
(one sample: its prediction; several: the list).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from inferload.users.kserve_bodies import v1_predictions, v1_request_body
from inferload.users.kserve_http import KServeHttpUser
from inferload.users.request_pool import RequestData


def v1_predict_path(model: str) -> str:
    return f"/v1/models/{quote(model, safe='')}:predict"


class KServeV1HttpUser(KServeHttpUser):
    abstract = True
    target_kinds = ("kserve-v1-http",)

    def path(self) -> str:
        return v1_predict_path(self.target.model)

    @classmethod
    def target_path(cls) -> str:
        return v1_predict_path(cls.target.model)

    @classmethod
    def native_answer_check(cls) -> dict[str, Any]:
        if cls.target.response_check != "shape":
            return {"answer": "none"}
        return {"answer": "v1_predictions", "length": cls.target.batch_size}

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        return v1_request_body(list(data.arrays))

    def send(self) -> int:
        index, body = self.post_next()
        check = self.target.response_check
        if check == "shape":
            v1_predictions(body, self.request_batch())
        elif check == "expected" and self._expected is not None:
            predictions = v1_predictions(body, None)
            answer = predictions[0] if len(predictions) == 1 else predictions
            self._expected.body(json.dumps(answer).encode(), self.request_pool().samples(index))
        return len(body)
