"""KServe's users: the v1 protocol over HTTP, the Open Inference Protocol (v2) over HTTP and gRPC.

`KServeHttpUser` is the HTTP base (geventhttpclient, bodies encoded once per process, the target's
response check); `KServeV1HttpUser` posts ``{"instances": [...]}`` to ``/v1/models/<m>:predict``;
`KServeV2HttpUser` posts the v2 JSON tensors to ``/v2/models/<m>/infer``; `KServeV2GrpcUser` calls
``inference.GRPCInferenceService/ModelInfer``. The v1/v2 bodies and answers are read by the pure
functions below (`v1_request_body`, `v2_request_body`, `v2_answer`, ...).

Over gRPC: tritonclient's generated stubs (``tritonclient.grpc.service_pb2``) are the same proto package and
service (``inference.GRPCInferenceService``) as KServe's ``grpc_predict_v2.proto``: Triton's
service is the standard one plus extensions (statistics, repository control, streaming) this user
never calls. ``ModelInferRequest``/``ModelInferResponse`` carry the same field numbers, so the
Triton gRPC user's pre-serialized requests (tensors in ``raw_input_contents``) are sent unchanged.
Some servers answer in typed ``contents`` rather than ``raw_output_contents``: the reported size
is then the outputs' encoded size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import triton_to_np_dtype

from inferload.errors import BadOutputShape
from inferload.scenario.inputs import InputSpec
from inferload.scenario.kinds import kinds_spoken_by
from inferload.users.base import InferenceUser, ModelFit
from inferload.users.engine import NativeTarget
from inferload.users.expected import ExpectedCheck, UnexpectedOutput, expected_check_of, grpc_outputs
from inferload.users.failures import Reason, check_output_shape, describe_answer, read_json
from inferload.users.http_answer import DETAIL_CHARS, close_client, open_client, post_for_answer
from inferload.users.request_pool import RequestData, RequestPool
from inferload.users.tls import native_tls
from inferload.users.triton import TritonGrpcUser

# KServe request and answer bodies, pure (no client, no Locust).
#
# Open Inference Protocol (v2) REST, JSON tensors only (the standard; no binary-data extension):
#     request   {"inputs": [{"name", "shape", "datatype", "data": [flat, row-major]}], "outputs": [{"name"}]}
#     answer    {"model_name", "outputs": [{"name", "shape", "datatype", "data": [...]}]}
# KServe v1 REST (``POST /v1/models/<name>:predict``):
#     request   {"instances": [one entry per item of the batch]}; one input: the item's nested list;
#               several inputs: {input name: nested list} per item
#     answer    {"predictions": [one entry per item]}
# BYTES elements travel as UTF-8 strings (what the protocols' JSON form carries).
_COMPACT = (",", ":")


def _json_values(array: np.ndarray) -> list[Any]:
    """The array's values as JSON-ready nested lists (bytes as UTF-8 strings)."""
    if array.dtype == object or array.dtype.kind == "S":
        return np.vectorize(lambda item: bytes(item).decode("utf-8", "replace"), otypes=[object])(array).tolist()
    return array.tolist()


def v2_request_body(arrays: Sequence[tuple[InputSpec, np.ndarray]], outputs: Sequence[str] = ()) -> bytes:
    """One v2 inference request, tensors as flat JSON lists."""
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": spec.name,
                "shape": [int(d) for d in array.shape],
                "datatype": spec.dtype,
                "data": _json_values(array.reshape(-1)),
            }
            for spec, array in arrays
        ]
    }
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return json.dumps(body, separators=_COMPACT).encode()


def v2_answer(body: bytes) -> dict[str, Any]:
    """The decoded v2 answer; BadOutputShape when it is not an object with a list of outputs."""
    answer = read_json(body)
    if not isinstance(answer, dict) or not isinstance(answer.get("outputs"), list):
        raise BadOutputShape(f"bad output: expected a v2 answer (an object with outputs); got {describe_answer(answer)}")
    return answer


def check_v2_shapes(answer: dict[str, Any], expected: Mapping[str, tuple[int, ...]]) -> None:
    """BadOutputShape unless each expected output the answer states (in the expected order; an output
    named twice read by its last entry; an entry that is no object with a string name is none) has
    a list of integers that fits its shape."""
    for name, dims in expected.items():
        stated = [o.get("shape") for o in answer["outputs"] if isinstance(o, dict) and o.get("name") == name]
        if not stated:
            continue
        shape = stated[-1]
        if isinstance(shape, list) and all(type(d) is int for d in shape):
            check_output_shape(name, tuple(shape), dims)
        else:
            raise BadOutputShape(f"bad output shape: '{name}' expected {list(dims)}; got a shape that is not a list of integers")


def v2_output_arrays(answer: dict[str, Any]) -> dict[str, np.ndarray]:
    """The answer's outputs as numpy arrays of their datatype and shape (for ``response_check: expected``)."""
    decoded: dict[str, np.ndarray] = {}
    for output in answer["outputs"]:
        name, datatype = str(output.get("name")), str(output.get("datatype", ""))
        shape = tuple(int(d) for d in output.get("shape", ()))
        data = output.get("data", [])
        try:
            if datatype == "BYTES":
                array = np.array([str(v).encode() if not isinstance(v, bytes) else v for v in data], dtype=object)
            else:
                dtype = triton_to_np_dtype(datatype)
                if dtype is None:
                    raise UnexpectedOutput(f"unexpected output {name!r}: cannot compare datatype {datatype}")
                array = np.asarray(data, dtype=dtype)
            decoded[name] = array.reshape(shape)
        except (TypeError, ValueError) as exc:
            raise UnexpectedOutput(
                f"unexpected output {name!r}: its data does not fit {datatype} {list(shape)} ({exc})"
            ) from None
    return decoded


def v1_request_body(arrays: Sequence[tuple[InputSpec, np.ndarray]]) -> bytes:
    """One v1 predict request: an instance per item of the batch (axis 0)."""
    if len(arrays) == 1:
        instances: list[Any] = _json_values(arrays[0][1])
    else:
        per_input = [(spec.name, _json_values(array)) for spec, array in arrays]
        instances = [{name: values[item] for name, values in per_input} for item in range(len(per_input[0][1]))]
    return json.dumps({"instances": instances}, separators=_COMPACT).encode()


def v1_predictions(body: bytes, batch_size: int | None) -> list[Any]:
    """The answer's ``predictions``; BadOutputShape unless an object with a list of ``batch_size`` items
    (``batch_size`` None: any length)."""
    answer = read_json(body)
    predictions = answer.get("predictions") if isinstance(answer, dict) else None
    if isinstance(predictions, list) and (batch_size is None or len(predictions) == batch_size):
        return predictions
    wanted = "a list" if batch_size is None else f"a list of {batch_size} item{'s' if batch_size != 1 else ''}"
    got = f"predictions is {describe_answer(predictions)}" if isinstance(predictions, list) else describe_answer(answer)
    raise BadOutputShape(f'bad output: expected {{"predictions": {wanted}}}; got {got}')


# What the two KServe REST users share: one geventhttpclient client per user, a JSON POST of a
# pre-encoded body, the HTTP status turned into a failure class, and the JSON answer.
#
# The bodies are JSON (above), encoded once per process and target up front; a call
# picks the next one (``next_request()``), posts it and reads the whole answer, whose length is the
# reported response size. KServe, MLServer and Triton put the reason of a refusal in ``error``
# (v2) or ``detail`` (FastAPI); its first line goes in the failure message.
class KServeHttpUser(InferenceUser):
    """Abstract: a KServe REST protocol; subclasses give ``path()`` and check the answer in ``send()``."""

    abstract = True
    request_type = "REST"

    def path(self) -> str:
        raise NotImplementedError

    @classmethod
    def target_path(cls) -> str:
        """The inference path of the class's target (``path()`` for the class)."""
        raise NotImplementedError

    @classmethod
    def native_answer_check(cls, fit: ModelFit) -> dict[str, Any]:
        """How the engine judges an answer's body (``response_check: shape``; else nothing)."""
        return {"answer": "none"}

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget:
        """The engine's HTTP target: the pre-encoded JSON bodies, KServe's status and answer checks."""
        target = cls.target
        path = cls.target_path()
        headers = {
            "Content-Type": "application/json",
            **target.request_headers(cls.scenario_dir),
        }
        check = {
            "status": "2xx" if target.response_check == "none" else "200",
            "detail": KSERVE_REASON.engine_check(),
            **cls.native_answer_check(fit),
        }
        address = target.address if "://" in target.address else f"http://{target.address}"
        return NativeTarget(
            protocol="http",
            address=address,
            requests=[(path, body, []) for body in pool.encoded_requests],
            check=check,
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
        )

    def connect(self) -> None:
        target = self.target
        self._client = open_client(target, self.scenario_dir)
        self._expected = expected_check_of(self)  # response_check: expected (file read once per process)
        self._path = self.path()
        self.request_pool()  # the first user of the target in this process encodes every request here
        self._headers = {
            "Content-Type": "application/json",
            **target.request_headers(self.scenario_dir),
        }

    def post_next(self) -> tuple[int, bytes]:
        """(request index, answer body) of the next pre-encoded request; HttpStatusError unless accepted."""
        index, body = self.next_request()
        answer = post_for_answer(
            self._client,
            self._path,
            body,
            self._headers,
            self.target.response_check,
            KSERVE_REASON.of,
            self.target.max_answer_bytes,
        )
        return index, answer

    def close(self) -> None:
        close_client(self)


#: KServe, MLServer and Triton put the reason of a refusal in ``error`` (v2) or ``detail`` (FastAPI)
KSERVE_REASON = Reason(("error", "detail", "message"), DETAIL_CHARS)


# KServe's v1 protocol over REST: ``POST /v1/models/<name>:predict`` with ``{"instances": [...]}``.
#
# One instance per item of the batch (``v1_request_body``), bodies built once per
# process. ``response_check: shape`` wants ``{"predictions": [batch_size items]}``; ``expected``
# compares the predictions with the expected answers as TorchServe's JSON answers are compared
# (one sample: its prediction; several: the list).
def v1_predict_path(model: str) -> str:
    return f"/v1/models/{quote(model, safe='')}:predict"


class KServeV1HttpUser(KServeHttpUser):
    abstract = True
    target_kinds = kinds_spoken_by("KServeV1HttpUser")

    def path(self) -> str:
        return v1_predict_path(self.target.model)

    @classmethod
    def target_path(cls) -> str:
        return v1_predict_path(cls.target.model)

    @classmethod
    def native_answer_check(cls, fit: ModelFit) -> dict[str, Any]:
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
            self.check_expected(self._expected, body, self.request_pool().samples(index))
        return len(body)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        predictions = v1_predictions(answer, None)
        check.body(json.dumps(predictions[0] if len(predictions) == 1 else predictions).encode(), samples)


# The Open Inference Protocol (KServe v2) over REST: ``POST /v2/models/<m>[/versions/<v>]/infer``.
#
# Standard endpoints and JSON tensors only, so any compliant server answers it (KServe's model
# server, MLServer, Triton). Bodies are built once per process (``v2_request_body``);
# ``response_check: shape`` compares each output's stated shape with the model's metadata (read by
# the start check), ``expected`` decodes the JSON outputs and compares their values.
def v2_infer_path(model: str, version: str | None) -> str:
    """The standard inference path of a model (and version)."""
    base = f"/v2/models/{quote(model, safe='')}"
    return f"{base}/versions/{quote(version, safe='')}/infer" if version else f"{base}/infer"


class KServeV2HttpUser(KServeHttpUser):
    abstract = True
    target_kinds = kinds_spoken_by("KServeV2HttpUser")

    def path(self) -> str:
        return v2_infer_path(self.target.model, self.target.version)

    @classmethod
    def target_path(cls) -> str:
        return v2_infer_path(cls.target.model, cls.target.version)

    @classmethod
    def native_answer_check(cls, fit: ModelFit) -> dict[str, Any]:
        if cls.target.response_check != "shape":
            return {"answer": "none"}
        return {"answer": "v2_json", "shapes": {name: list(dims) for name, dims in fit.expected_outputs.items()}}

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        return v2_request_body(list(data.arrays), cls.target.outputs)

    def send(self) -> int:
        index, body = self.post_next()
        check = self.target.response_check
        if check in ("shape", "expected"):
            answer = v2_answer(body)
            if check == "shape":
                check_v2_shapes(answer, self.expected_outputs_now())
            elif self._expected is not None:
                self._expected.arrays(v2_output_arrays(answer), self.request_pool().samples(index))
        return len(body)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.arrays(v2_output_arrays(v2_answer(answer)), samples)


# The Open Inference Protocol (v2) over gRPC (the module's docstring says how).
def response_size(response: service_pb2.ModelInferResponse) -> int:
    """Bytes of the answer's tensors: raw contents, or the typed contents' encoded size."""
    raw = sum(len(chunk) for chunk in response.raw_output_contents)
    return raw if raw else sum(output.contents.ByteSize() for output in response.outputs)


def output_arrays(response: service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    """The answer's outputs decoded: raw contents as Triton sends them, typed contents as KServe does."""
    if response.raw_output_contents:
        return grpc_outputs(response)
    result = InferResult(response)
    decoded = {output.name: result.as_numpy(output.name) for output in response.outputs}
    return {name: array for name, array in decoded.items() if array is not None}


class KServeV2GrpcUser(TritonGrpcUser):
    abstract = True
    target_kinds = kinds_spoken_by("KServeV2GrpcUser")

    def send(self) -> int:
        index, request_bytes = self.next_request()
        try:
            response = self._model_infer(request_bytes, timeout=self.target.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise get_error_grpc(exc) from None
        self.check_answer_shapes(response)
        if self._expected is not None:
            self._expected.arrays(output_arrays(response), self.request_pool().samples(index))
        return response_size(response)

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        check.arrays(output_arrays(service_pb2.ModelInferResponse.FromString(answer)), samples)
