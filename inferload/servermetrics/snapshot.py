"""One reading of a model's cumulative counters on one server, in server-neutral names.

Each server's parser (``triton.py``, ``torchserve.py``) maps what its endpoint reports onto these
counter names, so ``figures.py`` computes every figure the same way for every server:

    requests      successful requests (TorchServe: every answered request, 4xx included)
    request_us    their summed request duration, microseconds
    queued        requests that waited in the server's queue
    queue_us      their summed queue time, microseconds
    computed      requests the model computed (Triton: response-cache hits excluded)
    compute_us    their summed compute time, microseconds
    inferences    items run through the model (a request of batch 4 counts 4)
    executions    model executions (batches run)
    failures      failed requests (TorchServe: host-wide 4xx + 5xx)
    prompt_tokens         prompt tokens asked of an LLM server (cached ones included)
    cached_prompt_tokens  of those, the tokens its prefix cache held (not computed again)
    preemptions   requests an LLM server preempted (put back to wait: its KV cache was full)

A counter the server cannot report is absent (not zero): figures built on it are None.
``batches`` is executions per batch size so far (when ``has_batch_stats``); ``pending``,
``running`` and ``kv_cache_used`` are gauges, as read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferload.servermetrics.http_client import PageClient

COUNTERS = (
    "requests",
    "request_us",
    "queued",
    "queue_us",
    "computed",
    "compute_us",
    "inferences",
    "executions",
    "failures",
    "prompt_tokens",
    "cached_prompt_tokens",
    "preemptions",
)


@dataclass(frozen=True)
class ServerSnapshot:
    """Cumulative counters of one model on one server at one moment (``taken_at``, epoch seconds)."""

    server: str  # "triton" | "torchserve"
    model: str
    taken_at: float
    counters: dict[str, float]  # keys of COUNTERS
    batches: dict[int, int] = field(default_factory=dict)  # batch size -> executions so far
    has_batch_stats: bool = True  # False: the server does not report batch sizes
    pending: float | None = None  # requests waiting now (a gauge; Triton's and the LLM servers' metrics)
    running: float | None = None  # requests being generated now (a gauge; the LLM servers' metrics)
    kv_cache_used: float | None = None  # the share of the KV cache in use now, 0 to 1 (a gauge; LLM servers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "model": self.model,
            "taken_at": self.taken_at,
            "counters": dict(self.counters),
            "batches": {str(k): v for k, v in self.batches.items()},
            "has_batch_stats": self.has_batch_stats,
            "pending": self.pending,
            "running": self.running,
            "kv_cache_used": self.kv_cache_used,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSnapshot:
        def gauge(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(
            data["server"],
            data["model"],
            float(data["taken_at"]),
            {k: float(v) for k, v in data["counters"].items()},
            {int(k): int(v) for k, v in data.get("batches", {}).items()},
            bool(data.get("has_batch_stats", True)),
            gauge("pending"),
            gauge("running"),
            gauge("kv_cache_used"),
        )


@dataclass(frozen=True)
class ModelCounters:
    """One model's counters on one server's open reader: `read(taken_at)` a snapshot, `close()` the reader.

    Each server's ``open_counters(kind, address, model, version, metrics_url, timeout_s, tls)``
    (named by its `inferload.scenario.kinds.ServerRecord`) opens one.
    """

    read: Callable[[float | None], ServerSnapshot]
    close: Callable[[], None]


#: a server's page parser: (the page's text, the model, when it was read (None: now)) -> its reading
PageParser = Callable[[str, str, "float | None"], ServerSnapshot]


class MetricsPageReader:
    """Reads one server's metrics page with that server's parser (TorchServe's, KServe's, BentoML's,
    llama.cpp's); its HTTP session stays open between reads."""

    def __init__(self, metrics_url: str, parse: PageParser, timeout_s: float, http: PageClient | None = None) -> None:
        from inferload.servermetrics.http_client import HttpClient

        self.metrics_url = metrics_url
        self._parse = parse
        self._owns_http = http is None
        self._http: PageClient = http or HttpClient(timeout_s)

    def read(self, model: str, taken_at: float | None = None) -> ServerSnapshot:
        return self._parse(self._http.text(self.metrics_url), model, taken_at)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def counters(self, model: str) -> ModelCounters:
        """One model's counters on this page (`ModelCounters`: closing them closes the reader)."""
        return ModelCounters(lambda taken_at: self.read(model, taken_at), self.close)
