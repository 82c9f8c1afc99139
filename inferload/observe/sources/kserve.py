"""KServe for the collector: a thin adapter over servermetrics' KServe reader.

Each scrape reads KServe's /metrics once (its pre/predict/post-process histograms, see
servermetrics/kserve.py); the figures come from the same arithmetic as summary.json's
`server_side`. KServe shows a model's histograms only after its first request: until then a
scrape gives no points. It has no queue, batch or pending figures, so those fields are empty.
"""

from __future__ import annotations

from inferload.observe.sources.server import ServerSource
from inferload.servermetrics.http_client import PageClient
from inferload.servermetrics.kserve import KServeMetricsReader
from inferload.servermetrics.reading import ServerSnapshot


class KServeSource(ServerSource):
    """One KServe model of one target: `server` figures per scrape."""

    def __init__(self, target: str, model: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(f"kserve:{target}", target, model)
        self.metrics_url = metrics_url
        self._reader = KServeMetricsReader(metrics_url, timeout_s, http)

    def read(self, now: float) -> ServerSnapshot | None:
        reading = self._reader.read(self.model, now)
        return reading if reading.counters else None

    def close(self) -> None:
        self._reader.close()
