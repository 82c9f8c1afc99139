"""TorchServe: its Prometheus /metrics (``metrics_mode=prometheus``) parsed into a ``ServerSnapshot``.

TorchServe's own counters, per model (label ``model_name``, every version summed):
    requests     ts_inference_requests_total (every answered request, 4xx included)
    request_us   ts_inference_latency_microseconds
    queued       = requests;  queue_us  ts_queue_latency_microseconds
    failures     Requests4XX + Requests5XX (per host: TorchServe has no per-model failure counter)
inferload's handler (model_store/handler.py; label ``ModelName``) adds, once it ran a batch:
    inferences   InferloadItems (without the handler: = requests)
    computed     InferloadRequests;  compute_us  InferloadRequestHandlerMicroseconds
    batches      InferloadBatches{BatchSize} (+1 per execution);  executions  their sum
Without the handler's metrics there is no batch size, executions or compute time (absent, not 0).
TorchServe has no pending-requests gauge. ``HandlerTime`` and the like are gauges and not read.
"""

from __future__ import annotations

import time
import urllib.parse

from inferload.errors import ScrapeError
from inferload.servermetrics.http_client import HttpClient, PageClient
from inferload.servermetrics.prometheus import parse_families, total
from inferload.servermetrics.reading import ServerSnapshot

DEFAULT_METRICS_PORT = 8082
_REQUESTS = "ts_inference_requests"


def parse_torchserve_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """The reading of ``model``; its counters are empty while TorchServe has not shown the model
    (it lists a model after its first request)."""
    families = parse_families(text)
    if _REQUESTS not in families:
        raise ScrapeError("TorchServe /metrics has no ts_inference_requests_total: is metrics_mode=prometheus set?")

    def served(name: str) -> float | None:
        return total(families, name, "model_name", model)

    def handled(name: str) -> float | None:
        return total(families, name, "ModelName", model)

    counters: dict[str, float] = {}
    requests = served(_REQUESTS)
    if requests is not None:
        counters.update(
            requests=requests,
            request_us=served("ts_inference_latency_microseconds") or 0.0,
            queued=requests,
            queue_us=served("ts_queue_latency_microseconds") or 0.0,
            inferences=requests,
            failures=sum(s.value for name in ("Requests4XX", "Requests5XX") for s in families.get(name, ())),
        )
    batches: dict[int, int] = {}
    for sample in families.get("InferloadBatches", ()):
        if sample.labels.get("ModelName") == model:
            size = int(float(sample.labels["BatchSize"]))
            batches[size] = batches.get(size, 0) + int(sample.value)
    items = handled("InferloadItems")
    has_handler = items is not None or bool(batches)
    if has_handler and counters:
        counters.update(
            inferences=items or 0.0,
            executions=float(sum(batches.values())),
            computed=handled("InferloadRequests") or 0.0,
            compute_us=handled("InferloadRequestHandlerMicroseconds") or 0.0,
        )
    return ServerSnapshot(
        "torchserve", model, time.time() if taken_at is None else taken_at, counters, batches, has_batch_stats=has_handler
    )


def torchserve_metrics_url(address: str, metrics_url: str | None) -> str:
    """``metrics_url`` or, by default, port 8082 on the inference address's host."""
    if metrics_url:
        return metrics_url
    parsed = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    return f"http://{parsed.hostname}:{DEFAULT_METRICS_PORT}/metrics"


class TorchServeMetricsReader:
    """Reads one TorchServe /metrics page; its HTTP session stays open between reads."""

    def __init__(self, metrics_url: str, timeout_s: float, http: PageClient | None = None) -> None:
        self.metrics_url = metrics_url
        self._owns_http = http is None
        self._http: PageClient = http or HttpClient(timeout_s)

    def read(self, model: str, taken_at: float | None = None) -> ServerSnapshot:
        return parse_torchserve_metrics(self._http.text(self.metrics_url), model, taken_at)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()
