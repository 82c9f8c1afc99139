"""TorchServe handler for inferload's sample models (one TorchScript file per .mar).

Per request it accepts
  * raw little-endian float32 bytes (``Content-Type: application/octet-stream``); the request
    carries ``len(body) / item_bytes`` items, so one request may hold a batch of several;
  * a ``.npy`` file (``application/x-npy``, or any body starting with the ``\\x93NUMPY`` magic);
  * JSON: a nested list, or ``{"data": <nested list>}`` (one item or a batch of items).
All requests TorchServe batched together are concatenated and run through the model once; each
request gets back JSON: the list of its items' outputs.

Metrics (counters, model level, exported on /metrics with ``model_metrics_auto_detect=true``):
  InferloadBatches{BatchSize="<items>"}  +1 per model execution, by the number of items run
  InferloadItems                         +items per execution
  InferloadRequests                      +requests per execution
  InferloadHandlerMicroseconds           +handler wall time per execution
  InferloadRequestHandlerMicroseconds    +handler wall time x requests (per-request compute)
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

NPY_MAGIC = b"\x93NUMPY"
SPEC_FILE = "model_spec.json"


def _content_type(context: Any, idx: int) -> str:
    """The request's content type as TorchServe passes it (per body parameter or header)."""
    body_headers = context.get_request_header(idx, "body") or context.get_request_header(idx, "data")
    if isinstance(body_headers, dict) and body_headers.get("content-type"):
        return str(body_headers["content-type"]).lower()
    for key in ("Content-Type", "content-type"):
        value = context.get_request_header(idx, key)
        if isinstance(value, str) and value:
            return value.lower()
    return ""


def _body(row: dict[str, Any]) -> Any:
    for key in ("body", "data"):
        if key in row and row[key] is not None:
            return row[key]
    if len(row) == 1:
        return next(iter(row.values()))
    raise ValueError("request has no body")


def decode_items(body: Any, content_type: str, item_shape: tuple[int, ...]) -> np.ndarray:
    """One request's body -> float32 array of shape [n, *item_shape] (n >= 1)."""
    item_size = int(np.prod(item_shape))
    if isinstance(body, (bytes, bytearray)):
        raw = bytes(body)
        if raw.startswith(NPY_MAGIC) or "npy" in content_type:
            array = np.load(io.BytesIO(raw), allow_pickle=False)
        elif "json" in content_type or raw[:1] in (b"[", b"{"):
            return decode_items(json.loads(raw.decode("utf-8")), "json", item_shape)
        else:
            if len(raw) == 0 or len(raw) % (4 * item_size) != 0:
                raise ValueError(
                    f"octet-stream body of {len(raw)} bytes is not a whole number of "
                    f"float32 items of shape {list(item_shape)} ({4 * item_size} bytes each)"
                )
            array = np.frombuffer(raw, dtype="<f4")
    elif isinstance(body, str):
        return decode_items(json.loads(body), "json", item_shape)
    else:
        if isinstance(body, dict):
            if "data" not in body:
                raise ValueError('JSON object body needs a "data" key')
            body = body["data"]
        array = np.asarray(body, dtype=np.float32)
    array = np.asarray(array, dtype=np.float32)
    if array.shape == item_shape:
        return array.reshape(1, *item_shape)
    if array.shape[1:] == item_shape and array.shape[0] > 0:
        return array
    flat = array.ndim == 1 or (array.ndim == 2 and array.shape[1] == item_size)
    if flat and array.size > 0 and array.size % item_size == 0:
        return array.reshape(-1, *item_shape)
    raise ValueError(f"input of shape {list(array.shape)} is not one item or a batch of items of shape {list(item_shape)}")


class InferloadHandler:
    """Batched TorchScript inference with the batch-size metrics described above."""

    def __init__(self) -> None:
        self.model: torch.jit.ScriptModule | None = None
        self.model_name = ""
        self.item_shape: tuple[int, ...] = ()
        self.log = logging.getLogger("inferload.handler")

    def initialize(self, context: Any) -> None:
        torch.set_num_threads(int(os.environ.get("INFERLOAD_TORCH_THREADS", "1")))
        model_dir = Path(context.system_properties["model_dir"])
        spec = json.loads((model_dir / SPEC_FILE).read_text())
        serialized = context.manifest["model"].get("serializedFile", "model.pt")
        self.model = torch.jit.load(str(model_dir / serialized), map_location="cpu").eval()
        self.model_name = context.manifest["model"]["modelName"]
        self.item_shape = tuple(int(d) for d in spec["input_shape"])

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        start = time.perf_counter()
        responses: list[str] = [""] * len(data)
        arrays: list[np.ndarray] = []
        good: list[int] = []
        for idx, row in enumerate(data):
            try:
                arrays.append(decode_items(_body(row), _content_type(context, idx), self.item_shape))
                good.append(idx)
            except (ValueError, TypeError, UnicodeDecodeError) as exc:
                context.set_response_status(400, f"bad input: {exc}", idx)
                responses[idx] = json.dumps({"error": f"bad input: {exc}"})
        items = 0
        if arrays:
            batch = np.concatenate(arrays, axis=0)
            items = int(batch.shape[0])
            with torch.inference_mode():
                out = self.model(torch.from_numpy(batch)).numpy()
            offset = 0
            for idx, array in zip(good, arrays, strict=False):
                n = array.shape[0]
                responses[idx] = json.dumps(out[offset : offset + n].tolist(), separators=(",", ":"))
                context.set_response_content_type(idx, "application/json")
                offset += n
        elapsed_us = (time.perf_counter() - start) * 1e6
        self._record(context, items, len(good), elapsed_us)
        return responses

    def _record(self, context: Any, items: int, requests: int, elapsed_us: float) -> None:
        if items == 0:
            return
        from ts.metrics.dimension import Dimension

        def dims(*extra: Dimension) -> list[Dimension]:
            return [Dimension("ModelName", self.model_name), Dimension("Level", "Model"), *extra]

        metrics = context.metrics
        metrics.add_counter("InferloadBatches", 1, None, dims(Dimension("BatchSize", str(items))))
        metrics.add_counter("InferloadItems", items, None, dims())
        metrics.add_counter("InferloadRequests", requests, None, dims())
        metrics.add_counter("InferloadHandlerMicroseconds", round(elapsed_us), None, dims())
        metrics.add_counter("InferloadRequestHandlerMicroseconds", round(elapsed_us * requests), None, dims())
