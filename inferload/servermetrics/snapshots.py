"""Snapshots of a server's own counters and their diff -> summary.json's ``server_side``.

Triton: the statistics extension (``get_inference_statistics``; tritonclient.http for
``triton-http`` targets, tritonclient.grpc for ``triton-grpc``). Its ``batch_stats[]`` diff is
the exact histogram of batch sizes the dynamic batcher formed.
TorchServe: its Prometheus /metrics (``metrics_mode=prometheus``): the ``ts_*`` request,
queue and latency counters, plus the counters inferload's handler adds
(``InferloadBatches{BatchSize}``, ``InferloadItems``, ``InferloadRequests``,
``InferloadRequestHandlerMicroseconds``; see model_store/README.md).

Every figure is an average over the requests between the two snapshots; None where the server
cannot tell (no requests in between, or a TorchServe handler without inferload's metrics).
Safe under gevent (the Locust process): one short-lived client per snapshot, short timeouts.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ServerError

TRITON_KINDS = ("triton-grpc", "triton-http")
TORCHSERVE_KINDS = ("torchserve-rest",)
TIMEOUT_S = 5.0
DEFAULT_TS_METRICS_PORT = 8082

# Triton counters kept in a snapshot: name -> (inference_stats key, "count" | "ns")
_TRITON_STATS = {
    "success_count": ("success", "count"),
    "success_ns": ("success", "ns"),
    "fail_count": ("fail", "count"),
    "queue_count": ("queue", "count"),
    "queue_ns": ("queue", "ns"),
    "compute_input_ns": ("compute_input", "ns"),
    "compute_infer_count": ("compute_infer", "count"),
    "compute_infer_ns": ("compute_infer", "ns"),
    "compute_output_ns": ("compute_output", "ns"),
}

# TorchServe Prometheus families (names as prometheus_client reports them, "_total" stripped)
_TS_FAMILIES = {
    "ts_inference_requests": "requests",
    "ts_inference_latency_microseconds": "latency_us",
    "ts_queue_latency_microseconds": "queue_us",
    "InferloadItems": "items",
    "InferloadRequests": "handled_requests",
    "InferloadHandlerMicroseconds": "handler_us",
    "InferloadRequestHandlerMicroseconds": "request_handler_us",
}
_TS_BATCHES = "InferloadBatches"


@dataclass(frozen=True)
class ServerSnapshot:
    """Cumulative counters of one model on one server at one moment."""

    server: str  # "triton" | "torchserve"
    model: str
    taken_at: float
    counters: dict[str, float]
    batches: dict[int, int] = field(default_factory=dict)  # batch size -> executions so far
    has_batch_stats: bool = True  # False: the server does not report batch sizes

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "model": self.model,
            "taken_at": self.taken_at,
            "counters": dict(self.counters),
            "batches": {str(k): v for k, v in self.batches.items()},
            "has_batch_stats": self.has_batch_stats,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSnapshot:
        return cls(
            data["server"],
            data["model"],
            float(data["taken_at"]),
            {k: float(v) for k, v in data["counters"].items()},
            {int(k): int(v) for k, v in data.get("batches", {}).items()},
            bool(data.get("has_batch_stats", True)),
        )


# ---- Triton -----------------------------------------------------------------------------


def _int(value: Any) -> int:
    """Triton JSON: numbers over HTTP, strings over gRPC (int64), absent when zero (gRPC)."""
    return int(value) if value not in (None, "") else 0


def parse_triton_statistics(
    stats: dict[str, Any], model: str, version: str | None = None, taken_at: float | None = None
) -> ServerSnapshot:
    """Snapshot from a statistics answer (HTTP JSON, or gRPC ``as_json=True``).

    With ``version`` None every version of ``model`` is summed.
    """
    entries = [
        e
        for e in stats.get("model_stats", [])
        if e.get("name") == model and (version in (None, "") or str(e.get("version")) == str(version))
    ]
    if not entries:
        raise ServerError(f"Triton reported no statistics for model {model!r} version {version or 'any'}")
    counters = {"inference_count": 0.0, "execution_count": 0.0, **{k: 0.0 for k in _TRITON_STATS}}
    batches: dict[int, int] = {}
    for entry in entries:
        counters["inference_count"] += _int(entry.get("inference_count"))
        counters["execution_count"] += _int(entry.get("execution_count"))
        inference_stats = entry.get("inference_stats", {})
        for name, (section, part) in _TRITON_STATS.items():
            counters[name] += _int(inference_stats.get(section, {}).get(part))
        for batch in entry.get("batch_stats", []):
            size = _int(batch.get("batch_size"))
            batches[size] = batches.get(size, 0) + _int(batch.get("compute_infer", {}).get("count"))
    return ServerSnapshot("triton", model, time.time() if taken_at is None else taken_at, counters, batches)


def _triton_statistics(kind: str, address: str, model: str, version: str | None) -> dict[str, Any]:
    if kind == "triton-http":
        import tritonclient.http as client_module

        client = client_module.InferenceServerClient(address, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S)
        try:
            return client.get_inference_statistics(model, version or "")
        finally:
            client.close()
    import tritonclient.grpc as client_module

    client = client_module.InferenceServerClient(address)
    try:
        return client.get_inference_statistics(model, version or "", as_json=True, client_timeout=TIMEOUT_S)
    finally:
        client.close()


# ---- TorchServe ------------------------------------------------------------------------


def parse_torchserve_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """Snapshot of ``model`` from TorchServe's Prometheus text (all versions summed)."""
    counters: dict[str, float] = {}
    batches: dict[int, int] = {}
    has_batches = False
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ServerError(f"TorchServe /metrics is not Prometheus text: {exc}") from None
    for family in families:
        if family.name == _TS_BATCHES:
            has_batches = True
            for sample in family.samples:
                if sample.labels.get("ModelName") == model and not sample.name.endswith("_created"):
                    size = int(sample.labels["BatchSize"])
                    batches[size] = batches.get(size, 0) + int(sample.value)
            continue
        key = _TS_FAMILIES.get(family.name)
        if key is None:
            continue
        label = "model_name" if family.name.startswith("ts_") else "ModelName"
        for sample in family.samples:
            if sample.labels.get(label) == model and not sample.name.endswith("_created"):
                counters[key] = counters.get(key, 0.0) + float(sample.value)
    if not any(f.name == "ts_inference_requests" for f in families):
        raise ServerError("TorchServe /metrics has no ts_inference_requests_total: is metrics_mode=prometheus set?")
    return ServerSnapshot(
        "torchserve", model, time.time() if taken_at is None else taken_at, counters, batches, has_batch_stats=has_batches
    )


def torchserve_metrics_url(address: str, metrics_url: str | None) -> str:
    """``metrics_url`` or, by default, port 8082 on the inference address's host."""
    if metrics_url:
        return metrics_url
    parsed = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    return f"http://{parsed.hostname}:{DEFAULT_TS_METRICS_PORT}/metrics"


def _scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise ServerError(f"GET {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServerError(f"GET {url}: {getattr(exc, 'reason', exc)}") from None


# ---- public API -------------------------------------------------------------------------


def snapshot(kind: str, address: str, model: str, version: str | None = None, metrics_url: str | None = None) -> ServerSnapshot:
    """The server's counters for ``model`` now; ServerError with a clear message on failure.

    kind: a target kind ('triton-grpc', 'triton-http', 'torchserve-rest'); address: Triton's
    ``host:port`` for that protocol, or TorchServe's inference address (its /metrics is
    ``metrics_url``, by default port 8082 on that host). ``version`` selects a Triton model
    version (None: all versions summed); TorchServe counters are summed over versions.
    """
    if kind in TRITON_KINDS:
        from gevent import Timeout as GeventTimeout
        from tritonclient.utils import InferenceServerException

        try:
            stats = _triton_statistics(kind, address, model, version)
        except InferenceServerException as exc:
            raise ServerError(f"Triton statistics for {model!r} at {address} ({kind}): {exc.message()}") from None
        except (OSError, GeventTimeout, ValueError) as exc:
            raise ServerError(f"Triton statistics for {model!r} at {address} ({kind}): {exc!r}") from None
        return parse_triton_statistics(stats, model, version)
    if kind in TORCHSERVE_KINDS:
        url = torchserve_metrics_url(address, metrics_url)
        return parse_torchserve_metrics(_scrape(url), model)
    raise ServerError(f"unknown target kind {kind!r}; expected one of {TRITON_KINDS + TORCHSERVE_KINDS}")


def _ratio(num: float, den: float, scale: float = 1.0) -> float | None:
    return None if den <= 0 else round(num / den * scale, 6)


def _deltas(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, float]:
    if (before.server, before.model) != (after.server, after.model):
        raise ServerError(f"snapshots of different targets: {before.server}/{before.model} vs {after.server}/{after.model}")
    deltas = {k: after.counters.get(k, 0.0) - before.counters.get(k, 0.0) for k in set(before.counters) | set(after.counters)}
    went_back = sorted(k for k, v in deltas.items() if v < 0)
    if went_back:
        raise ServerError(
            f"{after.server} counters went backwards ({', '.join(went_back)}) for {after.model!r}: "
            "the server restarted between the snapshots"
        )
    return deltas


def _histogram(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, int]:
    sizes = sorted(set(before.batches) | set(after.batches))
    diff = {size: after.batches.get(size, 0) - before.batches.get(size, 0) for size in sizes}
    return {str(size): count for size, count in diff.items() if count > 0}


def server_side(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, Any]:
    """What the server saw between two snapshots (summary.json ``server_side``)."""
    d = _deltas(before, after)
    if after.server == "triton":
        compute_ns = d["compute_input_ns"] + d["compute_infer_ns"] + d["compute_output_ns"]
        histogram = _histogram(before, after)
        return {
            "queue_ms_avg": _ratio(d["queue_ns"], d["queue_count"], 1e-6),
            "compute_ms_avg": _ratio(compute_ns, d["compute_infer_count"], 1e-6),
            "request_ms_avg": _ratio(d["success_ns"], d["success_count"], 1e-6),
            "avg_batch_size": _ratio(d["inference_count"], d["execution_count"]),
            "batch_size_histogram": histogram,
        }
    has_batches = before.has_batch_stats or after.has_batch_stats
    executions = sum(_histogram(before, after).values())
    return {
        "queue_ms_avg": _ratio(d.get("queue_us", 0.0), d.get("requests", 0.0), 1e-3),
        "compute_ms_avg": _ratio(d.get("request_handler_us", 0.0), d.get("handled_requests", 0.0), 1e-3) if has_batches else None,
        "request_ms_avg": _ratio(d.get("latency_us", 0.0), d.get("requests", 0.0), 1e-3),
        "avg_batch_size": _ratio(d.get("items", 0.0), executions) if has_batches else None,
        "batch_size_histogram": _histogram(before, after) if has_batches else None,
    }
