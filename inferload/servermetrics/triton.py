"""Triton: its statistics API and its Prometheus metrics, read and parsed into a ``ServerSnapshot``.

Statistics API (``GET /v2/models/<m>[/versions/<v>]/stats`` over HTTP, or the gRPC call with
``as_json=True``): the preferred source, the one summary.json and the collector both use.
``inference_stats`` counts per request (so ``queue.count``, ``compute_infer.count`` and
``success.count`` are request counts, durations in ns); ``batch_stats[]`` counts executions per
batch size, so the difference of two readings is the exact histogram of the batches formed.
gRPC gives int64 fields as strings and leaves out zero fields; HTTP gives numbers.

    requests/request_us   success.count / success.ns      queued/queue_us   queue.count / queue.ns
    computed/compute_us   compute_infer.count / (compute_input + compute_infer + compute_output).ns
    inferences            inference_count                 executions        execution_count
    failures              fail.count                      batches           batch_stats[].compute_infer.count

Metrics port (``/metrics``, microsecond counters): for the gauges (`triton_gauges`), read beside
the statistics whenever the target names the page (``metrics_url``), and for a collector given no
statistics address. It has no queue or compute counts: ``queued`` is the successful requests
(Triton counts every successful request's queue time, cache hits included) and ``computed`` is
those less ``nv_cache_num_hits_per_model`` (the response cache's hits are not computed); no batch
sizes.

The gauges: ``pending`` is the requests waiting in Triton's scheduler
(``nv_inference_pending_request_count``) plus, for a generate model, those waiting in its backend;
a decoupled LLM model takes every request at once, so its queue is the backend's. The backend
reports its scheduler on Triton's page under its own names, labelled with the model:

- Triton's vLLM backend: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:gpu_cache_usage_perc`` (``kv_cache_used``);
- the TensorRT-LLM backend's batch manager: ``nv_trt_llm_request_metrics`` with ``request_type``
  ``waiting`` and ``scheduled``, ``nv_trt_llm_kv_cache_block_metrics`` with ``kv_cache_block_type``
  ``fraction``; labelled with the ``tensorrt_llm`` model itself, so a target that calls an ensemble
  around it reads none;
- inferload's built-in LLM model (`inferload/local/servers/triton_llm_model.py`, Python backend
  custom metrics): llama.cpp's ``llamacpp:requests_deferred``, ``llamacpp:requests_processing``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import urllib.parse
from typing import Any, Literal, Protocol

from inferload.errors import ScrapeError
from inferload.scenario import limits
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings, requests_tls
from inferload.servermetrics.http_client import Families, HttpClient, parse_families, total
from inferload.servermetrics.snapshot import ModelCounters, ServerSnapshot

_COMPUTE_PARTS = ("compute_input", "compute_infer", "compute_output")


def _int(value: Any) -> int:
    """Triton JSON: numbers over HTTP, strings over gRPC (int64), absent when zero (gRPC)."""
    return int(value) if value not in (None, "") else 0


def _stat(inference_stats: dict[str, Any], section: str, part: str) -> int:
    return _int(inference_stats.get(section, {}).get(part))


def parse_triton_statistics(
    stats: dict[str, Any], model: str, version: str | None = None, taken_at: float | None = None
) -> ServerSnapshot:
    """A reading from a statistics answer; with ``version`` None every version of ``model`` is summed."""
    entries = [
        e
        for e in stats.get("model_stats", [])
        if e.get("name") == model and (version in (None, "") or str(e.get("version")) == str(version))
    ]
    if not entries:
        raise ScrapeError(f"Triton reported no statistics for model {model!r} version {version or 'any'}")
    counters = dict.fromkeys(("requests", "request_us", "queued", "queue_us", "computed", "compute_us"), 0.0)
    counters.update(inferences=0.0, executions=0.0, failures=0.0)
    batches: dict[int, int] = {}
    for entry in entries:
        stats_of = entry.get("inference_stats", {})
        counters["requests"] += _stat(stats_of, "success", "count")
        counters["request_us"] += _stat(stats_of, "success", "ns") / 1e3
        counters["queued"] += _stat(stats_of, "queue", "count")
        counters["queue_us"] += _stat(stats_of, "queue", "ns") / 1e3
        counters["computed"] += _stat(stats_of, "compute_infer", "count")
        counters["compute_us"] += sum(_stat(stats_of, part, "ns") for part in _COMPUTE_PARTS) / 1e3
        counters["inferences"] += _int(entry.get("inference_count"))
        counters["executions"] += _int(entry.get("execution_count"))
        counters["failures"] += _stat(stats_of, "fail", "count")
        for batch in entry.get("batch_stats", []):
            size = _int(batch.get("batch_size"))
            batches[size] = batches.get(size, 0) + _int(batch.get("compute_infer", {}).get("count"))
    return ServerSnapshot("triton", model, time.time() if taken_at is None else taken_at, counters, batches)


#: a generate model's backend gauges on Triton's page, by the figure they give (the first one present):
#: a family's name, and the one other label its sample must have (TensorRT-LLM's request and KV-cache
#: families hold several figures apart by a label)
BACKEND_WAITING = (
    ("llamacpp:requests_deferred", None),
    ("vllm:num_requests_waiting", None),
    ("nv_trt_llm_request_metrics", ("request_type", "waiting")),
)
BACKEND_RUNNING = (
    ("llamacpp:requests_processing", None),
    ("vllm:num_requests_running", None),
    ("nv_trt_llm_request_metrics", ("request_type", "scheduled")),
)
BACKEND_KV_CACHE = (
    ("vllm:kv_cache_usage_perc", None),
    ("vllm:gpu_cache_usage_perc", None),
    ("nv_trt_llm_kv_cache_block_metrics", ("kv_cache_block_type", "fraction")),
)


@dataclasses.dataclass(frozen=True)
class TritonGauges:
    """What a model's requests are doing now, from Triton's page (None: the page does not say)."""

    pending: float | None
    running: float | None
    kv_cache_used: float | None


def triton_gauges(families: Families, model: str) -> TritonGauges:
    """The model's gauges: Triton's pending requests plus those waiting in its backend, the backend's
    running requests and KV-cache share (module docstring)."""

    def gauge(name: str, where: tuple[str, str] | None) -> float | None:
        samples = [
            sample.value
            for sample in families.get(name, ())
            if sample.labels.get("model") == model and (where is None or sample.labels.get(where[0]) == where[1])
        ]
        return sum(samples) if samples else None

    def first(sources: tuple[tuple[str, tuple[str, str] | None], ...]) -> float | None:
        return next((value for name, where in sources if (value := gauge(name, where)) is not None), None)

    in_triton = total(families, "nv_inference_pending_request_count", "model", model)
    in_backend = first(BACKEND_WAITING)
    pending = None if in_triton is None and in_backend is None else (in_triton or 0.0) + (in_backend or 0.0)
    return TritonGauges(pending, first(BACKEND_RUNNING), first(BACKEND_KV_CACHE))


def parse_triton_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """A reading from Triton's metrics page (all versions summed; no batch sizes)."""
    families = parse_families(text)

    def count(name: str) -> float | None:
        return total(families, name, "model", model)

    success = count("nv_inference_request_success")
    if success is None:
        raise ScrapeError(f"Triton's metrics have nothing for model {model!r} (is it loaded?)")
    computed = success - (count("nv_cache_num_hits_per_model") or 0.0)
    counters = {
        "requests": success,
        "request_us": count("nv_inference_request_duration_us") or 0.0,
        "queued": success,
        "queue_us": count("nv_inference_queue_duration_us") or 0.0,
        "computed": computed,
        "compute_us": sum(count(f"nv_inference_{part}_duration_us") or 0.0 for part in _COMPUTE_PARTS),
        "inferences": count("nv_inference_count") or 0.0,
        "executions": count("nv_inference_exec_count") or 0.0,
        "failures": count("nv_inference_request_failure") or 0.0,
    }
    gauges = triton_gauges(families, model)
    return ServerSnapshot(
        "triton",
        model,
        time.time() if taken_at is None else taken_at,
        counters,
        has_batch_stats=False,
        pending=gauges.pending,
        running=gauges.running,
        kv_cache_used=gauges.kv_cache_used,
    )


def with_gauges(reading: ServerSnapshot, gauges: TritonGauges) -> ServerSnapshot:
    """A statistics reading with the page's gauges."""
    return dataclasses.replace(reading, pending=gauges.pending, running=gauges.running, kv_cache_used=gauges.kv_cache_used)


class StatisticsReader(Protocol):
    """What reads a Triton model's statistics: ``read`` → a reading (ScrapeError on failure)."""

    def read(self, model: str, version: str | None = None, taken_at: float | None = None) -> ServerSnapshot: ...

    def close(self) -> None: ...


class TritonStatisticsReader:
    """Reads the statistics API of one Triton endpoint; its client stays open between reads."""

    def __init__(
        self,
        address: str,
        protocol: Literal["http", "grpc"],
        timeout_s: float,
        http: HttpClient | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        """``tls``: the target's TLS settings (Triton's gRPC TLS, or an HTTPS proxy in front of its HTTP port)."""
        self.address = address
        self.tls = tls
        self.protocol = protocol
        self.timeout_s = timeout_s
        self._http = http
        self._owns_http = http is None
        self._grpc: Any = None

    def read(self, model: str, version: str | None = None, taken_at: float | None = None) -> ServerSnapshot:
        stats = self._read_grpc(model, version) if self.protocol == "grpc" else self._read_http(model, version)
        return parse_triton_statistics(stats, model, version, time.time() if taken_at is None else taken_at)

    def _read_http(self, model: str, version: str | None) -> dict[str, Any]:
        if self._http is None:
            self._http = HttpClient(self.timeout_s, requests_tls(self.tls))
        base = self.address if "://" in self.address else f"{'https' if self.tls else 'http'}://{self.address}"
        path = f"/v2/models/{urllib.parse.quote(model, safe='')}"
        if version:
            path += f"/versions/{urllib.parse.quote(str(version), safe='')}"
        return self._http.json(f"{base}{path}/stats")

    def _read_grpc(self, model: str, version: str | None) -> dict[str, Any]:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        where = f"Triton gRPC statistics for {model!r} at {self.address}"
        try:
            if self._grpc is None:
                self._grpc = grpcclient.InferenceServerClient(self.address, **grpc_client_options(self.tls))
            return dict(self._grpc.get_inference_statistics(model, version or "", as_json=True, client_timeout=self.timeout_s))
        except InferenceServerException as exc:
            raise ScrapeError(f"{where}: {_grpc_problem(exc)}") from None
        except (OSError, ValueError) as exc:
            raise ScrapeError(f"{where}: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None
        if self._http is not None and self._owns_http:
            self._http.close()
            self._http = None


def grpc_client_options(tls: TlsSettings | None) -> dict[str, Any]:
    """tritonclient.grpc's channel arguments (`limits.SERVER_PAGE_GRPC_OPTIONS`) and TLS arguments (it reads
    the PEM files itself)."""
    channel_args: list[tuple[str, Any]] = list(limits.SERVER_PAGE_GRPC_OPTIONS)
    if tls is None:
        return {"channel_args": channel_args}
    options: dict[str, Any] = {"ssl": True, "root_certificates": tls.ca_file, "channel_args": channel_args}
    if tls.cert_file and tls.key_file:
        options.update(certificate_chain=tls.cert_file, private_key=tls.key_file)
    if tls.server_name:
        channel_args.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def _grpc_problem(exc: Any) -> str:
    """gRPC hides the errno; its core writes strerror(ECONNREFUSED), 'Connection refused', only then."""
    message = str(exc.message() or "")
    status = str(exc.status() or "").removeprefix("StatusCode.")
    if "Connection refused" in message:
        return "connection refused"
    if status == "DEADLINE_EXCEEDED":
        return "no answer in time"
    first_line = message.strip().splitlines()[0][:200] if message.strip() else ""
    return f"{status}: {first_line}" if status else first_line


def metrics_page(target: Target) -> str | None:
    """Triton's Prometheus page is the target's ``metrics_url`` (its port is none of the target's)."""
    return target.metrics_url


def open_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> ModelCounters:
    """The model's counters through the statistics API on the target's own address and protocol, with
    the gauges of its metrics page when the target names one (a page that cannot be read leaves the
    gauges out, said once in the log; the counters still count)."""
    reader = TritonStatisticsReader(address, SERVER_KINDS[kind].protocol, timeout_s, tls=tls)
    if metrics_url is None:
        return ModelCounters(lambda taken_at: reader.read(model, version, taken_at), reader.close)
    page = HttpClient(timeout_s)
    said: list[str] = []

    def read(taken_at: float | None) -> ServerSnapshot:
        reading = reader.read(model, version, taken_at)
        try:
            return with_gauges(reading, triton_gauges(parse_families(page.text(metrics_url)), model))
        except ScrapeError as error:
            if not said:
                said.append(str(error))
                logger.warning("Triton's metrics page %s: no gauges (requests waiting, running): %s", metrics_url, error)
            return reading

    def close() -> None:
        reader.close()
        page.close()

    return ModelCounters(read, close)


logger = logging.getLogger(__name__)
