"""Readings of a target's server for summary.json and windows.csv: ``ServerReader``, ``snapshot``
and ``server_side``.

A target's server is read where the target's own kind says: Triton through its statistics API on
the target's address and protocol (``triton.py``), TorchServe through its /metrics page
(``torchserve.py``; ``metrics_url``, or port 8082 on the target's host when the target is at
TorchServe's default port 8080; otherwise there is nothing to read: a ScrapeError says why). ``server_side``
is ``figures.server_figures(...).server_side()``: the same arithmetic the collector uses.
"""

from __future__ import annotations

from typing import Any

from inferload.errors import ScrapeError
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.bentoml import BentoMLMetricsReader, bentoml_metrics_url
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.kserve import KServeMetricsReader, kserve_metrics_url
from inferload.servermetrics.kserve import no_metrics_url_reason as kserve_no_metrics_url
from inferload.servermetrics.reading import ServerSnapshot
from inferload.servermetrics.torchserve import (
    TorchServeMetricsReader,
    no_metrics_url_reason,
    parse_torchserve_metrics,
    torchserve_metrics_url,
)
from inferload.servermetrics.triton import TritonStatisticsReader, parse_triton_statistics

__all__ = [
    "ServerReader",
    "ServerSnapshot",
    "parse_torchserve_metrics",
    "parse_triton_statistics",
    "server_side",
    "snapshot",
    "torchserve_metrics_url",
]

TRITON_KINDS = ("triton-grpc", "triton-http")
TORCHSERVE_KINDS = ("torchserve-rest",)
BENTOML_KINDS = ("bentoml-http",)
KSERVE_KINDS = ("kserve-v2-http", "kserve-v2-grpc", "kserve-v1-http")
TIMEOUT_S = 5.0


class ServerReader:
    """Reads one target's server counters; keeps its client open between reads (``close()`` it).

    kind: a target kind ('triton-grpc', 'triton-http', 'torchserve-rest'); address: Triton's
    ``host:port`` for that protocol, or TorchServe's inference address. ``version`` selects a
    Triton model version (None: all versions summed); TorchServe counters are summed over versions.
    """

    def __init__(
        self,
        kind: str,
        address: str,
        model: str,
        version: str | None = None,
        metrics_url: str | None = None,
        timeout_s: float = TIMEOUT_S,
        tls: TlsSettings | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self._triton: TritonStatisticsReader | None = None
        self._torchserve: TorchServeMetricsReader | None = None
        self._bentoml: BentoMLMetricsReader | None = None
        self._kserve: KServeMetricsReader | None = None
        if kind in TRITON_KINDS:
            self._triton = TritonStatisticsReader(address, "grpc" if kind == "triton-grpc" else "http", timeout_s, tls=tls)
        elif kind in TORCHSERVE_KINDS:
            url = torchserve_metrics_url(address, metrics_url)
            if url is None:
                raise ScrapeError(no_metrics_url_reason(address))
            self._torchserve = TorchServeMetricsReader(url, timeout_s)
        elif kind in BENTOML_KINDS:  # the target's model is the API's name
            self._bentoml = BentoMLMetricsReader(bentoml_metrics_url(address, metrics_url), timeout_s)
        elif kind in KSERVE_KINDS:  # KServe's /metrics on its REST port
            kserve_url = kserve_metrics_url(kind, address, metrics_url)
            if kserve_url is None:
                raise ScrapeError(kserve_no_metrics_url(address))
            self._kserve = KServeMetricsReader(kserve_url, timeout_s)
        else:
            raise ScrapeError(f"unknown target kind {kind!r}; expected one of {TRITON_KINDS + TORCHSERVE_KINDS}")

    def read(self, taken_at: float | None = None) -> ServerSnapshot:
        """The counters now; ScrapeError with a clear message on failure."""
        if self._triton is not None:
            return self._triton.read(self.model, self.version, taken_at)
        if self._bentoml is not None:
            return self._bentoml.read(self.model, taken_at)
        if self._kserve is not None:
            return self._kserve.read(self.model, taken_at)
        assert self._torchserve is not None
        return self._torchserve.read(self.model, taken_at)

    def close(self) -> None:
        for reader in (self._triton, self._torchserve, self._bentoml, self._kserve):
            if reader is not None:
                reader.close()


def snapshot(
    kind: str,
    address: str,
    model: str,
    version: str | None = None,
    metrics_url: str | None = None,
    tls: TlsSettings | None = None,
) -> ServerSnapshot:
    """One reading with a reader of its own (see ``ServerReader``); ScrapeError on failure."""
    reader = ServerReader(kind, address, model, version, metrics_url, tls=tls)
    try:
        return reader.read()
    finally:
        reader.close()


def server_side(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, Any]:
    """What the server saw between two readings (summary.json ``server_side``); ScrapeError when
    it restarted in between."""
    return server_figures(before, after).server_side()
