"""The collector's server sources: two readings of a model's counters (servermetrics) → `server`
and `batch_sizes` points. The figures are `servermetrics.figures.server_figures`, the same function
summary.json's `server_side` uses; this module only turns them into points. One thin subclass per
server reads its endpoint:

- Triton: the metrics page (for `pending`) and, when the source has a statistics address, the
  statistics API, whose reading gives every other figure and the exact batch-size histogram
  (`batch_sizes`). Without a statistics address the figures come from the metrics page's counters
  and there are no `batch_sizes` (servermetrics/triton.py says what each counter maps to).
- TorchServe: /metrics (its counters and inferload's handler counters); no `pending` gauge.
- KServe: /metrics (its pre/predict/post-process histograms); no queue, batch or pending figures.
- BentoML: /metrics (request duration, failures, the adaptive batching histogram's sum and count,
  requests in progress); no queue or compute time and no per-size batch counts.

TorchServe, KServe and BentoML list a model only after its first request: until then a scrape gives
no points. After a failed read or a restart (counters that went down) the interval gives no points
and the new reading becomes the baseline, so rates are never smeared over a gap.

A source is a small stateful object: `scrape(now)` reads its endpoint once and returns InfluxDB
points (rates need the previous reading, so the first scrape may return none). Anything that goes
wrong while reading (refused, timeout, bad answer) is raised as `ScrapeError` (inferload.errors);
the collector logs it once, keeps the others going, and tries again next interval.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Protocol

from inferload.errors import ScrapeError
from inferload.observe.sink import FieldValue, Point, seconds_to_ns
from inferload.servermetrics.bentoml import parse_bentoml_metrics
from inferload.servermetrics.figures import ServerFigures, server_figures
from inferload.servermetrics.http_client import HttpClient, PageClient
from inferload.servermetrics.kserve import parse_kserve_metrics
from inferload.servermetrics.openai import parse_openai_metrics
from inferload.servermetrics.snapshot import MetricsPageReader, ServerSnapshot
from inferload.servermetrics.torchserve import parse_torchserve_metrics
from inferload.servermetrics.triton import StatisticsReader, parse_triton_metrics


class Source(Protocol):
    """A metric source: `name` for messages, `scrape(now)` for points (`now`: epoch seconds)."""

    name: str

    def scrape(self, now: float) -> list[Point]: ...


def server_point(target: str, figures: ServerFigures, time_s: float) -> Point:
    """The `server` point of one interval (`pending`, `running`, `kv_cache_used_pct`,
    `prefix_cache_hit_pct` and `preemptions` only where the server reports them)."""
    fields: dict[str, FieldValue] = {
        "inferences_per_s": figures.inferences_per_s,
        "executions_per_s": figures.executions_per_s,
        "avg_batch_size": figures.avg_batch_size,
        "queue_ms": figures.queue_ms,
        "compute_ms": figures.compute_ms,
        "request_ms": figures.request_ms,
        "failures_per_s": figures.failures_per_s,
    }
    for name, value in (
        ("pending", figures.pending),
        ("running", figures.running),
        ("kv_cache_used_pct", figures.kv_cache_used_pct),
        ("prefix_cache_hit_pct", figures.prefix_cache_hit_pct),
        ("preemptions", figures.preemptions),
    ):
        if value is not None:  # only what the server reports
            fields[name] = value
    tags = {"target": target, "server": figures.server, "model": figures.model}
    return Point("server", tags, fields, seconds_to_ns(time_s))


def batch_size_points(target: str, model: str, counts: dict[int, int], time_s: float) -> list[Point]:
    """One `batch_sizes` point per batch size formed in the interval."""
    return [
        Point("batch_sizes", {"target": target, "model": model, "batch_size": str(size)}, {"count": count}, seconds_to_ns(time_s))
        for size, count in sorted(counts.items())
    ]


def figure_points(target: str, figures: ServerFigures, time_s: float) -> list[Point]:
    points = [server_point(target, figures, time_s)]
    if figures.batch_sizes:
        points.extend(batch_size_points(target, figures.model, figures.batch_sizes, time_s))
    return points


class ServerSource(ABC):
    """One model of one target: `read(now)` a reading, and points from it and the previous one."""

    def __init__(self, name: str, target: str, model: str) -> None:
        self.name = name
        self.target = target
        self.model = model
        self._previous: ServerSnapshot | None = None

    @abstractmethod
    def read(self, now: float) -> ServerSnapshot | None:
        """The model's counters now; None when the server does not show the model yet."""

    def scrape(self, now: float) -> list[Point]:
        try:
            current = self.read(now)
        except ScrapeError:
            self._previous = None
            raise
        previous, self._previous = self._previous, current
        if previous is None or current is None:
            return []
        try:
            figures = server_figures(previous, current)
        except ScrapeError:  # the server restarted: this reading is the new baseline
            return []
        if figures.interval_s <= 0:
            return []
        return figure_points(self.target, figures, now)

    def close(self) -> None:  # noqa: B027 (readers without connections keep this default)
        """Close the reader's connections."""


class TritonSource(ServerSource):
    """One Triton model of one target: `server` figures and `batch_sizes` per scrape."""

    def __init__(
        self,
        target: str,
        model: str,
        metrics_url: str,
        statistics: StatisticsReader | None = None,
        timeout_s: float = 2.0,
        http: PageClient | None = None,
    ) -> None:
        super().__init__(f"triton:{target}", target, model)
        self.metrics_url = metrics_url
        self.statistics = statistics
        self._http: PageClient = http or HttpClient(timeout_s)

    def read(self, now: float) -> ServerSnapshot:
        metrics = parse_triton_metrics(self._http.text(self.metrics_url), self.model, now)
        if self.statistics is None:
            return metrics
        reading = self.statistics.read(self.model, None, now)
        return dataclasses.replace(reading, pending=metrics.pending, running=metrics.running, kv_cache_used=metrics.kv_cache_used)

    def close(self) -> None:
        if self.statistics is not None:
            self.statistics.close()
        self._http.close()


class _MetricsPageSource(ServerSource):
    """A server read from its /metrics page alone; no points until the page lists the model."""

    def __init__(
        self,
        name: str,
        target: str,
        model: str,
        metrics_url: str,
        reader: MetricsPageReader,
    ) -> None:
        super().__init__(name, target, model)
        self.metrics_url = metrics_url
        self._reader = reader

    def read(self, now: float) -> ServerSnapshot | None:
        reading = self._reader.read(self.model, now)
        return reading if reading.counters else None

    def close(self) -> None:
        self._reader.close()


class TorchServeSource(_MetricsPageSource):
    """One TorchServe model of one target: `server` figures and `batch_sizes` per scrape."""

    def __init__(self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(
            f"torchserve:{target}",
            target,
            model,
            metrics_url,
            MetricsPageReader(metrics_url, parse_torchserve_metrics, timeout_s, http),
        )


class KServeSource(_MetricsPageSource):
    """One KServe model of one target: `server` figures per scrape."""

    def __init__(self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(
            f"kserve:{target}", target, model, metrics_url, MetricsPageReader(metrics_url, parse_kserve_metrics, timeout_s, http)
        )


class BentoMLSource(_MetricsPageSource):
    """One BentoML API of one target (the target's model is the API's name): `server` figures per scrape."""

    def __init__(self, target: str, api: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(
            f"bentoml:{target}", target, api, metrics_url, MetricsPageReader(metrics_url, parse_bentoml_metrics, timeout_s, http)
        )


class OpenAISource(_MetricsPageSource):
    """An OpenAI-compatible server of one target, read from llama.cpp's page (it serves one model):
    `server` figures per scrape (the sequences decoded together per call, the requests waiting for a slot)."""

    def __init__(self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(
            f"openai:{target}",
            target,
            model,
            metrics_url,
            MetricsPageReader(metrics_url, parse_openai_metrics, timeout_s, http),
        )
