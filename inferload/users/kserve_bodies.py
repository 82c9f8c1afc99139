"""KServe request and answer bodies, pure (no client, no Locust).

Open Inference Protocol (v2) REST, JSON tensors only (the standard; no binary-data extension):
    request   {"inputs": [{"name", "shape", "datatype", "data": [flat, row-major]}], "outputs": [{"name"}]}
    answer    {"model_name", "outputs": [{"name", "shape", "datatype", "data": [...]}]}
KServe v1 REST (``POST /v1/models/<name>:predict``):
    request   {"instances": [one entry per item of the batch]}; one input: the item's nested list;
              several inputs: {input name: nested list} per item
    answer    {"predictions": [one entry per item]}
BYTES elements travel as UTF-8 strings (what the protocols' JSON form carries).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from inferload.errors import BadOutputShape
from inferload.scenario.targets import InputSpec
from inferload.users.expected import UnexpectedOutput
from inferload.users.failures import describe_answer

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
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("outputs"), list):
        shown = "a body that is not JSON" if answer is None else describe_answer(answer)
        raise BadOutputShape(f"bad output: expected a v2 answer (an object with outputs); got {shown}")
    return answer


def v2_output_shapes(answer: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Output name -> shape, as the answer states them."""
    return {str(o.get("name")): tuple(int(d) for d in o.get("shape", ())) for o in answer["outputs"] if isinstance(o, dict)}


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
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    predictions = answer.get("predictions") if isinstance(answer, dict) else None
    if isinstance(predictions, list) and (batch_size is None or len(predictions) == batch_size):
        return predictions
    wanted = "a list" if batch_size is None else f"a list of {batch_size} item{'s' if batch_size != 1 else ''}"
    if isinstance(predictions, list):
        got = f"predictions is {describe_answer(predictions)}"
    else:
        got = "a body that is not JSON" if answer is None and body else describe_answer(answer)
    raise BadOutputShape(f'bad output: expected {{"predictions": {wanted}}}; got {got}')
