"""BentoML for the collector: a thin adapter over servermetrics' BentoML reader.

Each scrape reads the service's /metrics once (request duration, failures, the adaptive batching
histogram's sum and count, requests in progress; see servermetrics/bentoml.py); the figures come
from the same arithmetic as summary.json's `server_side`. BentoML counts an API's requests only
after the first one: until then a scrape gives no points. It has no queue or compute time and no
per-size batch counts, so those fields are empty.
"""

from __future__ import annotations

from inferload.observe.sources.server import ServerSource
from inferload.servermetrics.bentoml import BentoMLMetricsReader
from inferload.servermetrics.http_client import PageClient
from inferload.servermetrics.reading import ServerSnapshot


class BentoMLSource(ServerSource):
    """One BentoML API of one target: `server` figures per scrape."""

    def __init__(self, target: str, api: str, metrics_url: str, timeout_s: float = 2.0, http: PageClient | None = None) -> None:
        super().__init__(f"bentoml:{target}", target, api)
        self.metrics_url = metrics_url
        self._reader = BentoMLMetricsReader(metrics_url, timeout_s, http)

    def read(self, now: float) -> ServerSnapshot | None:
        reading = self._reader.read(self.model, now)
        return reading if reading.counters else None

    def close(self) -> None:
        self._reader.close()
