"""One real inference per model and server: the readiness check of the local servers.

Plain ``urllib`` on purpose: no client library state, works in any process. ``/ping`` and
``/v2/health/ready`` are not enough (TorchServe says Healthy before its workers can answer).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np

from inferload.local.models.specs import ModelSpec


class NotReady(Exception):
    """The server did not (yet) answer this probe with a correct output."""


def _post(url: str, body: bytes, content_type: str, timeout_s: float) -> bytes:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise NotReady(f"HTTP {exc.code} from {url}: {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NotReady(f"{url}: {exc}") from None


def probe_input(spec: ModelSpec, batch: int = 1) -> np.ndarray:
    """A small deterministic input batch for ``spec`` (values in [0, 1))."""
    size = batch * int(np.prod(spec.input_shape))
    values = (np.arange(size, dtype=np.float32) % 97) / 97.0
    return values.reshape(batch, *spec.input_shape)


def triton_infer(
    http_port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0
) -> np.ndarray:
    """Run ``data`` ([n, *input_shape] FP32) through Triton's HTTP/JSON API; returns outputs."""
    payload = {
        "inputs": [{"name": spec.input_name, "datatype": "FP32", "shape": list(data.shape), "data": data.reshape(-1).tolist()}],
        "outputs": [{"name": spec.output_name}],
    }
    url = f"http://{host}:{http_port}/v2/models/{spec.name}/infer"
    answer = json.loads(_post(url, json.dumps(payload).encode(), "application/json", timeout_s))
    try:
        output = next(o for o in answer["outputs"] if o["name"] == spec.output_name)
        result = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    except (KeyError, StopIteration, ValueError) as exc:
        raise NotReady(f"unexpected answer from {url}: {str(answer)[:300]}") from exc
    _check_shape(result, data.shape[0], spec, url)
    return result


def torchserve_infer(
    inference_port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0
) -> np.ndarray:
    """Run ``data`` through TorchServe as raw float32 bytes (octet-stream); returns outputs."""
    url = f"http://{host}:{inference_port}/predictions/{spec.name}"
    raw = np.ascontiguousarray(data, dtype="<f4").tobytes()
    return _json_list_answer(url, raw, "application/octet-stream", timeout_s, data.shape[0], spec)


def bentoml_infer(port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0) -> np.ndarray:
    """Run ``data`` through the BentoML service's API for the model (JSON, the input by name); returns outputs."""
    url = f"http://{host}:{port}/{spec.name}"
    body = json.dumps({spec.input_name: data.tolist()}).encode()
    return _json_list_answer(url, body, "application/json", timeout_s, data.shape[0], spec)


def _json_list_answer(url: str, body: bytes, content_type: str, timeout_s: float, batch: int, spec: ModelSpec) -> np.ndarray:
    """The outputs a server answers ``body`` with as one JSON (nested) list (TorchServe, BentoML)."""
    answer = _post(url, body, content_type, timeout_s)
    try:
        result = np.asarray(json.loads(answer), dtype=np.float32)
    except ValueError as exc:
        raise NotReady(f"unexpected answer from {url}: {answer[:300]!r}") from exc
    _check_shape(result, batch, spec, url)
    return result


def _check_shape(result: np.ndarray, batch: int, spec: ModelSpec, url: str) -> None:
    expected = (batch, *spec.output_shape)
    if result.shape != expected:
        raise NotReady(f"{url} answered shape {list(result.shape)}, expected {list(expected)}")


def probe(server: str, port: int, spec: ModelSpec, timeout_s: float = 5.0, host: str = "127.0.0.1") -> np.ndarray:
    """One real inference on ``server`` ('triton': HTTP port, 'torchserve': inference port)."""
    data = probe_input(spec)
    if server in ("triton", "kserve"):  # both answer the Open Inference Protocol's JSON infer
        return triton_infer(port, spec, data, host=host, timeout_s=timeout_s)
    if server == "torchserve":
        return torchserve_infer(port, spec, data, host=host, timeout_s=timeout_s)
    if server == "bentoml":
        return bentoml_infer(port, spec, data, host=host, timeout_s=timeout_s)
    raise ValueError(f"unknown server {server!r}; expected 'triton', 'torchserve', 'kserve' or 'bentoml'")
