"""BentoML: its Prometheus /metrics (on the service's own port) parsed into a ``ServerSnapshot``.

A BentoML service's own counters for one API (``POST /<api>``; the target's ``model`` is the API
name), checked on BentoML 1.4.40 (tests/captures/bentoml_metrics.txt):
    requests     bentoml_service_request_duration_seconds_count{endpoint="/<api>"}, 2xx codes
    request_us   their _sum (seconds) x 1e6
    failures     bentoml_service_request_total{endpoint="/<api>"} with a code of 400 or more
    inferences   bentoml_service_adaptive_batch_size_sum{method_name="<api>"} (items batched)
    executions   bentoml_service_adaptive_batch_size_count{method_name="<api>"} (batches run)
    pending      bentoml_service_request_in_progress{endpoint="/<api>"} (a gauge)
Every worker's samples are summed. The adaptive-batching histogram exists only for a batchable
API, once it ran a batch; without it there is no batch size (absent, not 0). BentoML has no queue
or compute time counters: ``NOT_REPORTED`` says why, for summary.json's ``server_side.unknown``.
The page is ``/metrics`` on the target's own address unless ``metrics_url`` says otherwise.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.snapshot import MetricsPageReader, ModelCounters, ServerSnapshot

_DURATION = "bentoml_service_request_duration_seconds"
_TOTAL = "bentoml_service_request_total"
_IN_PROGRESS = "bentoml_service_request_in_progress"
_BATCH = "bentoml_service_adaptive_batch_size"

#: summary.json figures BentoML's metrics cannot give, and why
NOT_REPORTED = {
    "queue_ms_avg": "BentoML's metrics have no queue time (its adaptive batching dispatcher does not export one)",
    "compute_ms_avg": "BentoML's metrics have no compute time apart from the whole request's duration",
    "avg_batch_size": "the API is not batchable (no bentoml_service_adaptive_batch_size for it)",
    "batch_size_histogram": (
        "BentoML's adaptive_batch_size histogram has power-of-two buckets (1, 2, 4, 8, ...), not one count per batch size"
    ),
}


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        return [
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None


def _code(labels: dict[str, str]) -> int:
    try:
        return int(labels.get("http_response_code", "0"))
    except ValueError:
        return 0


def parse_bentoml_metrics(text: str, api: str, taken_at: float | None = None) -> ServerSnapshot:
    """The reading of API ``api`` (``POST /<api>``); its counters are empty until BentoML has
    counted a request to it."""
    samples = _samples(text)
    if not any(name.startswith("bentoml_service_") for name, _, _ in samples):
        raise ScrapeError("not BentoML's /metrics: it has no bentoml_service_* metric")
    endpoint = f"/{api}"

    def summed(name: str, label: str, value: str, ok: bool | None = None) -> float | None:
        matching = [
            v
            for n, labels, v in samples
            if n == name and labels.get(label) == value and (ok is None or (200 <= _code(labels) < 300) == ok)
        ]
        return sum(matching) if matching else None

    counters: dict[str, float] = {}
    requests = summed(f"{_DURATION}_count", "endpoint", endpoint, ok=True)
    if requests is not None:
        counters["requests"] = requests
        counters["request_us"] = (summed(f"{_DURATION}_sum", "endpoint", endpoint, ok=True) or 0.0) * 1e6
        failed = [v for n, labels, v in samples if n == _TOTAL and labels.get("endpoint") == endpoint and _code(labels) >= 400]
        counters["failures"] = sum(failed)
        items = summed(f"{_BATCH}_sum", "method_name", api)
        batches = summed(f"{_BATCH}_count", "method_name", api)
        if items is not None and batches is not None:
            counters["inferences"] = items
            counters["executions"] = batches
    return ServerSnapshot(
        "bentoml",
        api,
        time.time() if taken_at is None else taken_at,
        counters,
        {},
        has_batch_stats=False,
        pending=summed(_IN_PROGRESS, "endpoint", endpoint),
    )


def bentoml_metrics_url(address: str, metrics_url: str | None) -> str:
    """``metrics_url``, else ``/metrics`` on the service's own address (BentoML serves both on one port)."""
    return metrics_url or f"{address.rstrip('/')}/metrics"


def metrics_page(target: Target) -> str | None:
    return bentoml_metrics_url(target.address, target.metrics_url)


def open_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> ModelCounters:
    """The API's counters on the service's /metrics (the model is the API's name)."""
    return MetricsPageReader(bentoml_metrics_url(address, metrics_url), parse_bentoml_metrics, timeout_s).counters(model)
