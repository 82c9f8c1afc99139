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
TorchServe adds a request's queue and inference latency only when it succeeds, so over an interval
in which every request failed both averages would read 0.0 ms: ``figures`` makes them None, with
``NO_SUCCESS_TIMED`` as the reason (with some failures they are diluted by the failed share).
Without the handler's metrics there is no batch size, executions or compute time (absent, not 0):
``NOT_REPORTED`` says why, for summary.json's ``server_side.unknown``. TorchServe has no
pending-requests gauge. ``PredictionTime`` and ``HandlerTime`` (model) and ``QueueTime``,
``WorkerThreadTime`` (host) are gauges of the last batch or request and not read: no mean over an
interval can be taken from them. Checked on TorchServe 0.12.0 with its default metrics.yaml and a
handler of no metrics of its own (tests/captures/torchserve_metrics_third_party.txt).

Where the page is (``torchserve_metrics_url``): ``metrics_url``, or port 8082 on the target's host
only when the target is at TorchServe's default inference port 8080 (the pair TorchServe itself
defaults to). Any other address without ``metrics_url`` has no server-side figures, for the reason
``no_metrics_url_reason`` gives: another port 8082 may well be another server.
"""

from __future__ import annotations

import time
import urllib.parse

from inferload.errors import ScrapeError
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.http_client import parse_families, total
from inferload.servermetrics.snapshot import MetricsPageReader, ModelCounters, ServerSnapshot

DEFAULT_METRICS_PORT = 8082
DEFAULT_INFERENCE_PORT = 8080
_REQUESTS = "ts_inference_requests"

_NO_BATCH_SIZES = (
    "TorchServe does not export the sizes of the batches it forms; a handler can count them itself "
    "with context.metrics (as inferload's sample handler does)"
)
#: why TorchServe's queue and request times are None over an interval in which no request succeeded:
#: its request counter counts every answered request, its latency counters only the successful ones
NO_SUCCESS_TIMED = (
    "no request succeeded in the interval: TorchServe times successful requests only "
    "(ts_inference_requests_total counts the failed ones too, its latency counters do not)"
)
#: summary.json figures TorchServe's own metrics cannot give, and why (without a handler's own counters)
NOT_REPORTED = {
    "compute_ms_avg": (
        "TorchServe reports handler time only as gauges of the last batch (PredictionTime, HandlerTime), "
        "not as totals: no mean over the run can be taken from them"
    ),
    "avg_batch_size": _NO_BATCH_SIZES,
    "batch_size_histogram": _NO_BATCH_SIZES,
}


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


def torchserve_metrics_url(address: str, metrics_url: str | None) -> str | None:
    """``metrics_url``; without it, port 8082 on the target's host when the target is at TorchServe's
    default inference port 8080; otherwise None (see ``no_metrics_url_reason``)."""
    if metrics_url:
        return metrics_url
    parsed = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    if parsed.port != DEFAULT_INFERENCE_PORT:
        return None
    return f"{parsed.scheme}://{parsed.netloc.rsplit(':', 1)[0]}:{DEFAULT_METRICS_PORT}/metrics"


def no_metrics_url_reason(address: str) -> str:
    """Why a TorchServe target at ``address`` without ``metrics_url`` has no server-side figures."""
    return (
        f"no metrics_url, and {address} is not at TorchServe's default inference port {DEFAULT_INFERENCE_PORT}, "
        f"so port {DEFAULT_METRICS_PORT} there may be another server: set the target's metrics_url to its "
        "TorchServe's metrics address (metrics_address in config.properties) for server-side figures"
    )


def metrics_page(target: Target) -> str | None:
    return torchserve_metrics_url(target.address, target.metrics_url)


def open_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> ModelCounters:
    """The model's counters on its metrics page, summed over its versions."""
    url = torchserve_metrics_url(address, metrics_url)
    if url is None:
        raise ScrapeError(no_metrics_url_reason(address))
    return MetricsPageReader(url, parse_torchserve_metrics, timeout_s).counters(model)
