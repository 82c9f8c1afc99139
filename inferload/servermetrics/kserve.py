"""KServe's model server: its Prometheus /metrics (on the REST port) parsed into a ``ServerSnapshot``.

KServe's Python model server times the three stages of its handler per model (label
``model_name``), as histograms in seconds (checked on kserve 0.21.0, tests/captures/kserve_metrics.txt):
    request_preprocess_seconds, request_predict_seconds, request_postprocess_seconds
Mapped onto the server-neutral counters:
    computed     request_predict_seconds_count;  compute_us  its _sum x 1e6
    requests     request_predict_seconds_count;  request_us  the three stages' _sums x 1e6 (the
                 handler's time; the HTTP/gRPC layer in front of it is not timed by KServe)
KServe has no queue, batch-size or failure counters (its model server does not batch): those
figures are absent, ``NOT_REPORTED`` says why (summary.json's ``server_side.unknown``). A model
that has not answered yet has no samples: the reading's counters are then empty.

The page is ``/metrics`` on the target's own address for the REST kinds; a kserve-v2-grpc
target needs ``metrics_url`` (the REST port's /metrics): ``kserve_metrics_url`` returns None and
``no_metrics_url_reason`` says so. A v2 server that is not KServe's (Triton, MLServer) has other
metrics or none there: the reading fails with a ``ScrapeError`` naming what was missing.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.snapshot import MetricsPageReader, ModelCounters, ServerSnapshot

STAGES = ("request_preprocess_seconds", "request_predict_seconds", "request_postprocess_seconds")
_PREDICT = "request_predict_seconds"

#: summary.json figures KServe's metrics cannot give, and why
NOT_REPORTED = {
    "queue_ms_avg": "KServe's model server has no request queue metric (it does not queue or batch requests itself)",
    "avg_batch_size": "KServe's model server does not batch requests: it exports no batch sizes",
    "batch_size_histogram": "KServe's model server does not batch requests: it exports no batch sizes",
}


def _stage_totals(text: str, model: str) -> dict[str, tuple[float, float]]:
    """Stage histogram -> (count, sum seconds) of ``model``; ScrapeError when the text does not parse."""
    totals: dict[str, tuple[float, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name not in STAGES:
                continue
            count = total = 0.0
            seen = False
            for sample in family.samples:
                if sample.labels.get("model_name") != model:
                    continue
                if sample.name == f"{family.name}_count":
                    count, seen = count + float(sample.value), True
                elif sample.name == f"{family.name}_sum":
                    total += float(sample.value)
            if seen:
                totals[family.name] = (count, total)
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None
    return totals


def parse_kserve_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """The reading of ``model``; empty counters while the model has not answered a request."""
    if f"# TYPE {_PREDICT} " not in text and f"{_PREDICT}_count" not in text:
        raise ScrapeError(
            "the page has no request_predict_seconds: not KServe's model server metrics "
            "(a v2 server such as Triton or MLServer has metrics of its own)"
        )
    stages = _stage_totals(text, model)
    counters: dict[str, float] = {}
    if _PREDICT in stages:
        count, seconds = stages[_PREDICT]
        handler_s = sum(total for _, total in stages.values())
        counters = {"requests": count, "request_us": handler_s * 1e6, "computed": count, "compute_us": seconds * 1e6}
    return ServerSnapshot("kserve", model, time.time() if taken_at is None else taken_at, counters, {}, has_batch_stats=False)


def kserve_metrics_url(kind: str, address: str, metrics_url: str | None) -> str | None:
    """``metrics_url``; else ``<address>/metrics`` for the REST kinds; None for gRPC (see ``no_metrics_url_reason``)."""
    if metrics_url:
        return metrics_url
    if SERVER_KINDS[kind].protocol == "grpc":
        return None
    return address.rstrip("/") + "/metrics"


def no_metrics_url_reason(address: str) -> str:
    return (
        f"a kserve-v2-grpc target ({address}) has no metrics page of its own: set metrics_url to the "
        "server's REST address + /metrics (KServe serves its metrics on the REST port)"
    )


def metrics_page(target: Target) -> str | None:
    return kserve_metrics_url(target.kind, target.address, target.metrics_url)


def open_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> ModelCounters:
    """The model's counters on KServe's /metrics, on its REST port."""
    url = kserve_metrics_url(kind, address, metrics_url)
    if url is None:
        raise ScrapeError(no_metrics_url_reason(address))
    return MetricsPageReader(url, parse_kserve_metrics, timeout_s).counters(model)
