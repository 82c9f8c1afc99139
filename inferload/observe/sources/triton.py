"""Triton: Prometheus metrics → per-interval rates, statistics API → exact batch-size histogram.

Pure functions do the arithmetic (`triton_counters`, `triton_rates`, `batch_executions`,
`counts_diff`); `TritonSource` only reads the endpoints and keeps the previous reading.

From the metrics port (cumulative counters, summed over the model's versions):
  inferences_per_s  d(nv_inference_count)/dt          (items, a request of batch 4 counts 4)
  executions_per_s  d(nv_inference_exec_count)/dt     (model executions, i.e. batches run)
  avg_batch_size    d(inference_count)/d(exec_count)
  request_ms, queue_ms, compute_ms (input+infer+output): d(duration_us)/d(successful requests)
  pending           nv_inference_pending_request_count (a gauge, as read)
  failures_per_s    d(nv_inference_request_failure, every reason)/dt
From the statistics API: `batch_stats[]` counts the executions of each batch size; the difference
between two polls is exactly how many batches of each size were formed in between.
A counter that went down means the server restarted: that interval gives no rates, and the new
reading becomes the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import requests

from inferload.observe.sink.line_protocol import Point, seconds_to_ns
from inferload.observe.sources.base import SourceError
from inferload.observe.sources.prometheus import Sample, fetch_text, parse_samples

_COUNTERS = {
    "success": "nv_inference_request_success_total",
    "failure": "nv_inference_request_failure_total",
    "inferences": "nv_inference_count_total",
    "executions": "nv_inference_exec_count_total",
    "request_us": "nv_inference_request_duration_us_total",
    "queue_us": "nv_inference_queue_duration_us_total",
    "compute_input_us": "nv_inference_compute_input_duration_us_total",
    "compute_infer_us": "nv_inference_compute_infer_duration_us_total",
    "compute_output_us": "nv_inference_compute_output_duration_us_total",
}
PENDING = "nv_inference_pending_request_count"


@dataclass(frozen=True)
class TritonCounters:
    """One reading of a model's cumulative counters (all versions together)."""

    time_s: float
    values: Mapping[str, float]  # keys of _COUNTERS
    pending: float | None


def triton_counters(samples: list[Sample], model: str, time_s: float) -> TritonCounters | None:
    """The model's counters in a metrics reading; None when the model is not in it."""
    values: dict[str, float] = {key: 0.0 for key in _COUNTERS}
    names = {name: key for key, name in _COUNTERS.items()}
    found = False
    pending: float | None = None
    for sample in samples:
        if sample.labels.get("model") != model:
            continue
        key = names.get(sample.name)
        if key is not None:
            values[key] += sample.value
            found = True
        elif sample.name == PENDING:
            pending = (pending or 0.0) + sample.value
    return TritonCounters(time_s, values, pending) if found else None


def _per(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    return numerator / denominator * scale if denominator > 0 else None


def triton_rates(previous: TritonCounters, current: TritonCounters) -> dict[str, float | None] | None:
    """The `server` fields for the interval between two readings; None after a restart."""
    dt = current.time_s - previous.time_s
    delta = {key: current.values[key] - previous.values[key] for key in _COUNTERS}
    if dt <= 0 or any(value < 0 for value in delta.values()):
        return None
    compute_us = delta["compute_input_us"] + delta["compute_infer_us"] + delta["compute_output_us"]
    return {
        "inferences_per_s": delta["inferences"] / dt,
        "executions_per_s": delta["executions"] / dt,
        "avg_batch_size": _per(delta["inferences"], delta["executions"]),
        "queue_ms": _per(delta["queue_us"], delta["success"], 1e-3),
        "compute_ms": _per(compute_us, delta["success"], 1e-3),
        "request_ms": _per(delta["request_us"], delta["success"], 1e-3),
        "pending": current.pending,
        "failures_per_s": delta["failure"] / dt,
    }


def batch_executions(statistics: Mapping[str, Any], model: str) -> dict[int, int]:
    """Executions per batch size from a statistics API answer (HTTP JSON or gRPC as_json; counts
    may be numbers or strings), summed over the model's versions."""
    counts: dict[int, int] = {}
    for model_stats in statistics.get("model_stats", []):
        if model_stats.get("name") != model:
            continue
        for entry in model_stats.get("batch_stats", []):
            size = int(entry["batch_size"])
            executed = int(entry.get("compute_infer", {}).get("count", 0) or 0)
            counts[size] = counts.get(size, 0) + executed
    return counts


def counts_diff(previous: Mapping[int, int], current: Mapping[int, int]) -> dict[int, int] | None:
    """What was added per key between two cumulative readings (only keys that grew);
    None when any count went down (a restart)."""
    diff: dict[int, int] = {}
    for key, value in current.items():
        change = value - previous.get(key, 0)
        if change < 0:
            return None
        if change:
            diff[key] = change
    if any(key not in current and value > 0 for key, value in previous.items()):
        return None
    return diff


def batch_size_points(target: str, model: str, diff: Mapping[int, int], time_s: float) -> list[Point]:
    return [
        Point("batch_sizes", {"target": target, "model": model, "batch_size": str(size)}, {"count": count}, seconds_to_ns(time_s))
        for size, count in sorted(diff.items())
    ]


class TritonStatistics:
    """Reads `GET /v2/models/<model>/stats` over HTTP, or the gRPC statistics call."""

    def __init__(self, address: str, protocol: Literal["http", "grpc"], timeout_s: float, session: requests.Session) -> None:
        self.address = address
        self.protocol = protocol
        self.timeout_s = timeout_s
        self._session = session

    def read(self, model: str) -> dict[str, Any]:
        if self.protocol == "grpc":
            return self._read_grpc(model)
        base = self.address if "://" in self.address else f"http://{self.address}"
        url = f"{base}/v2/models/{model}/stats"
        try:
            response = self._session.get(url, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise SourceError(f"cannot read {url}: {exc}") from None
        if response.status_code != 200:
            raise SourceError(f"{url} answered HTTP {response.status_code}")
        try:
            return dict(response.json())
        except ValueError as exc:
            raise SourceError(f"{url}: not JSON: {exc}") from None

    def _read_grpc(self, model: str) -> dict[str, Any]:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(self.address)
        try:
            return dict(client.get_inference_statistics(model, as_json=True, client_timeout=self.timeout_s))
        except InferenceServerException as exc:
            raise SourceError(f"gRPC statistics from {self.address}: {exc}") from None
        finally:
            client.close()


class TritonSource:
    """One Triton model of one target: `server` rates and `batch_sizes` per scrape."""

    def __init__(
        self,
        target: str,
        model: str,
        metrics_url: str,
        statistics: TritonStatistics | None = None,
        timeout_s: float = 2.0,
        session: requests.Session | None = None,
    ) -> None:
        self.name = f"triton:{target}"
        self.target = target
        self.model = model
        self.metrics_url = metrics_url
        self.statistics = statistics
        self.timeout_s = timeout_s
        self._session = session or requests.Session()
        self._previous: TritonCounters | None = None
        self._previous_batches: dict[int, int] | None = None

    def scrape(self, now: float) -> list[Point]:
        try:
            return self._scrape(now)
        except SourceError:
            self._previous = None  # after an outage, rates start again from a fresh baseline
            self._previous_batches = None
            raise

    def _scrape(self, now: float) -> list[Point]:
        samples = parse_samples(fetch_text(self._session, self.metrics_url, self.timeout_s))
        current = triton_counters(samples, self.model, now)
        if current is None:
            raise SourceError(f"{self.metrics_url} has no metrics for model {self.model!r} (is it loaded?)")
        points: list[Point] = []
        if self._previous is not None:
            rates = triton_rates(self._previous, current)
            if rates is not None:
                tags = {"target": self.target, "server": "triton", "model": self.model}
                points.append(Point("server", tags, rates, seconds_to_ns(now)))
        self._previous = current
        if self.statistics is not None:
            batches = batch_executions(self.statistics.read(self.model), self.model)
            if self._previous_batches is not None:
                diff = counts_diff(self._previous_batches, batches)
                if diff:
                    points.extend(batch_size_points(self.target, self.model, diff, now))
            self._previous_batches = batches
        return points
