"""Readings of a target's server for summary.json and windows.csv: ``ServerReader``, ``snapshot``
and ``server_side``.

A target's server is read where the target's own kind says: Triton through its statistics API on
the target's address and protocol (``triton.py``), TorchServe through its /metrics page
(``torchserve.py``; ``metrics_url``, or port 8082 on the target's host when the target is at
TorchServe's default port 8080; otherwise there is nothing to read: a ScrapeError says why). ``server_side``
is ``figures.server_figures(...).server_side()``: the same arithmetic the collector uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferload.errors import ScrapeError
from inferload.scenario.kinds import SERVER_KINDS, TARGET_KINDS, Server
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

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class _ModelCounters:
    """One model's counters on one server's reader."""

    read: Callable[[float | None], ServerSnapshot]
    close: Callable[[], None]


def _triton_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> _ModelCounters:
    reader = TritonStatisticsReader(address, SERVER_KINDS[kind].protocol, timeout_s, tls=tls)
    return _ModelCounters(lambda taken_at: reader.read(model, version, taken_at), reader.close)


def _torchserve_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> _ModelCounters:
    url = torchserve_metrics_url(address, metrics_url)
    if url is None:
        raise ScrapeError(no_metrics_url_reason(address))
    reader = TorchServeMetricsReader(url, timeout_s)
    return _ModelCounters(lambda taken_at: reader.read(model, taken_at), reader.close)


def _bentoml_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> _ModelCounters:
    reader = BentoMLMetricsReader(bentoml_metrics_url(address, metrics_url), timeout_s)  # the model is the API's name
    return _ModelCounters(lambda taken_at: reader.read(model, taken_at), reader.close)


def _kserve_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> _ModelCounters:
    url = kserve_metrics_url(kind, address, metrics_url)  # KServe's /metrics on its REST port
    if url is None:
        raise ScrapeError(kserve_no_metrics_url(address))
    reader = KServeMetricsReader(url, timeout_s)
    return _ModelCounters(lambda taken_at: reader.read(model, taken_at), reader.close)


#: how each server's counters are read (TorchServe's are summed over versions)
COUNTER_READERS: dict[Server, Callable[..., _ModelCounters]] = {
    "triton": _triton_counters,
    "torchserve": _torchserve_counters,
    "bentoml": _bentoml_counters,
    "kserve": _kserve_counters,
}


class ServerReader:
    """Reads one target's server counters; keeps its client open between reads (``close()`` it).

    kind: a target kind; address: the target's address for that kind. ``version`` selects a Triton
    model version (None: all versions summed); the other servers' counters are summed over versions.
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
        record = SERVER_KINDS.get(kind)
        if record is None:
            raise ScrapeError(f"unknown target kind {kind!r}; expected one of {', '.join(TARGET_KINDS)}")
        self._counters = COUNTER_READERS[record.server](kind, address, model, version, metrics_url, timeout_s, tls)

    def read(self, taken_at: float | None = None) -> ServerSnapshot:
        """The counters now; ScrapeError with a clear message on failure."""
        return self._counters.read(taken_at)

    def close(self) -> None:
        self._counters.close()


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
