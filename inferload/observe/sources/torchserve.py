"""TorchServe for the collector: a thin adapter over servermetrics' TorchServe reader.

Each scrape reads /metrics once (TorchServe's counters and inferload's handler counters, see
servermetrics/torchserve.py); the figures and the batch-size histogram come from the same
arithmetic as summary.json's `server_side`. TorchServe lists a model only after its first
request: until then a scrape gives no points. It has no pending gauge, so no `pending` field.
"""

from __future__ import annotations

from inferload.observe.sources.server import ServerSource
from inferload.servermetrics.http_client import PageClient
from inferload.servermetrics.reading import ServerSnapshot
from inferload.servermetrics.torchserve import TorchServeMetricsReader


class TorchServeSource(ServerSource):
    """One TorchServe model of one target: `server` figures and `batch_sizes` per scrape."""

    def __init__(self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(f"torchserve:{target}", target, model)
        self.metrics_url = metrics_url
        self._reader = TorchServeMetricsReader(metrics_url, timeout_s, http)

    def read(self, now: float) -> ServerSnapshot | None:
        reading = self._reader.read(self.model, now)
        return reading if reading.counters else None

    def close(self) -> None:
        self._reader.close()
