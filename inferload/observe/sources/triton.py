"""Triton for the collector: a thin adapter over servermetrics' Triton readers.

Each scrape reads the metrics page (for `pending`) and, when the source has a statistics address,
the statistics API, whose reading gives every other figure: the same reading and arithmetic as
summary.json's `server_side`, and the exact batch-size histogram (`batch_sizes`). Without a
statistics address the figures come from the metrics page's counters and there are no
`batch_sizes` (see servermetrics/triton.py for what each counter maps to).
"""

from __future__ import annotations

import dataclasses

from inferload.observe.sources.server import ServerSource
from inferload.servermetrics.http_client import HttpClient, PageClient
from inferload.servermetrics.reading import ServerSnapshot
from inferload.servermetrics.triton import StatisticsReader, parse_triton_metrics


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
        return dataclasses.replace(reading, pending=metrics.pending)

    def close(self) -> None:
        if self.statistics is not None:
            self.statistics.close()
        self._http.close()
