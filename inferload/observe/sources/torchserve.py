"""TorchServe: its Prometheus metrics and our handler's counters → per-interval `server` figures.

TorchServe's own counters (per model, label `model_name`): `ts_inference_requests_total`,
`ts_inference_latency_microseconds`, `ts_queue_latency_microseconds`. inferload's handler
(model_store/handler.py) adds, per model (label `ModelName`): `InferloadBatches{BatchSize}` (+1 per
execution, by items run), `InferloadItems`, `InferloadRequests`,
`InferloadRequestHandlerMicroseconds` (handler time x requests). So per interval:
  inferences_per_s  d(InferloadItems)/dt (d(requests)/dt without the handler's counters)
  executions_per_s  d(sum of InferloadBatches)/dt
  avg_batch_size    d(InferloadItems)/d(executions)
  request_ms        d(ts_inference_latency_us)/d(requests)
  queue_ms          d(ts_queue_latency_us)/d(requests)
  compute_ms        d(InferloadRequestHandlerMicroseconds)/d(InferloadRequests)
  failures_per_s    d(Requests4XX + Requests5XX)/dt: TorchServe counts failures per host only
TorchServe has no pending-requests metric, so `pending` is not written. The batch-size
histogram is the per-interval difference of `InferloadBatches` by `BatchSize`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import requests

from inferload.observe.sink.line_protocol import Point, seconds_to_ns
from inferload.observe.sources.base import SourceError
from inferload.observe.sources.prometheus import Sample, fetch_text, parse_samples
from inferload.observe.sources.triton import batch_size_points, counts_diff

_TS_COUNTERS = {
    "requests": "ts_inference_requests_total",
    "request_us": "ts_inference_latency_microseconds_total",
    "queue_us": "ts_queue_latency_microseconds_total",
}
_HANDLER_COUNTERS = {
    "items": "InferloadItems_total",
    "handler_requests": "InferloadRequests_total",
    "request_handler_us": "InferloadRequestHandlerMicroseconds_total",
}
_BATCHES = "InferloadBatches_total"
_HOST_FAILURES = ("Requests4XX_total", "Requests5XX_total")


@dataclass(frozen=True)
class TorchServeCounters:
    time_s: float
    values: Mapping[str, float]  # keys of _TS_COUNTERS and _HANDLER_COUNTERS, "failures"
    batches: Mapping[int, int]  # executions per batch size (items)
    has_handler_metrics: bool


def torchserve_counters(samples: list[Sample], model: str, time_s: float) -> TorchServeCounters | None:
    """The model's counters in a /metrics reading; None when TorchServe reports nothing for it."""
    values: dict[str, float] = {key: 0.0 for key in (*_TS_COUNTERS, *_HANDLER_COUNTERS, "failures")}
    ts_names = {name: key for key, name in _TS_COUNTERS.items()}
    handler_names = {name: key for key, name in _HANDLER_COUNTERS.items()}
    batches: dict[int, int] = {}
    found = handler = False
    for sample in samples:
        if sample.name in ts_names and sample.labels.get("model_name") == model:
            values[ts_names[sample.name]] += sample.value
            found = True
        elif sample.name in handler_names and sample.labels.get("ModelName") == model:
            values[handler_names[sample.name]] += sample.value
            handler = True
        elif sample.name == _BATCHES and sample.labels.get("ModelName") == model:
            size = int(float(sample.labels["BatchSize"]))
            batches[size] = batches.get(size, 0) + int(sample.value)
            handler = True
        elif sample.name in _HOST_FAILURES:
            values["failures"] += sample.value
    if not found and not handler:
        return None
    return TorchServeCounters(time_s, values, batches, handler)


def _per(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    return numerator / denominator * scale if denominator > 0 else None


def torchserve_rates(previous: TorchServeCounters, current: TorchServeCounters) -> dict[str, float | None] | None:
    """The `server` fields for the interval between two readings; None after a restart."""
    dt = current.time_s - previous.time_s
    delta = {key: current.values[key] - previous.values[key] for key in current.values}
    executions = sum(current.batches.values()) - sum(previous.batches.values())
    if dt <= 0 or executions < 0 or any(value < 0 for value in delta.values()):
        return None
    handler = current.has_handler_metrics
    inferences = delta["items"] if handler else delta["requests"]
    return {
        "inferences_per_s": inferences / dt,
        "executions_per_s": executions / dt if handler else None,
        "avg_batch_size": _per(delta["items"], executions) if handler else None,
        "queue_ms": _per(delta["queue_us"], delta["requests"], 1e-3),
        "compute_ms": _per(delta["request_handler_us"], delta["handler_requests"], 1e-3),
        "request_ms": _per(delta["request_us"], delta["requests"], 1e-3),
        "failures_per_s": delta["failures"] / dt,
    }


class TorchServeSource:
    """One TorchServe model of one target: `server` figures and `batch_sizes` per scrape."""

    def __init__(
        self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, session: requests.Session | None = None
    ) -> None:
        self.name = f"torchserve:{target}"
        self.target = target
        self.model = model
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self._session = session or requests.Session()
        self._previous: TorchServeCounters | None = None

    def scrape(self, now: float) -> list[Point]:
        try:
            samples = parse_samples(fetch_text(self._session, self.metrics_url, self.timeout_s))
        except SourceError:
            self._previous = None
            raise
        current = torchserve_counters(samples, self.model, now)
        if current is None:
            self._previous = None  # nothing served yet (TorchServe shows a model after its first request)
            return []
        points: list[Point] = []
        previous, self._previous = self._previous, current
        if previous is None:
            return points
        rates = torchserve_rates(previous, current)
        if rates is None:
            return points
        tags = {"target": self.target, "server": "torchserve", "model": self.model}
        points.append(Point("server", tags, rates, seconds_to_ns(now)))
        diff = counts_diff(previous.batches, current.batches)
        if diff:
            points.extend(batch_size_points(self.target, self.model, diff, now))
        return points
