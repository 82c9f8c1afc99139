"""Readings of a target's server for summary.json and windows.csv: ``ServerReader``, ``snapshot``
and ``server_side``.

A target's server is read where the target's own kind says: Triton through its statistics API on
the target's address and protocol (``triton.py``), TorchServe through its /metrics page
(``torchserve.py``; ``metrics_url``, or port 8082 on the target's host when the target is at
TorchServe's default port 8080; otherwise there is nothing to read: a ScrapeError says why). ``server_side``
is ``figures.server_figures(...).server_side()``: the same arithmetic the collector uses.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

from inferload.errors import ScrapeError
from inferload.scenario.kinds import SERVER_KINDS, TARGET_KINDS, has_role, implementation
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.snapshot import ModelCounters, ServerSnapshot
from inferload.servermetrics.torchserve import (
    parse_torchserve_metrics,
    torchserve_metrics_url,
)
from inferload.servermetrics.triton import parse_triton_statistics

# Which targets of a run read the same server counters: one model on one server, seen by several targets.
#
# A server counts per model (and version), never per client or per connection, so two targets on
# one model (a triton-grpc and a triton-http target on ``cnn``, two TorchServe targets on one model)
# cannot be told apart by the server: each would get the model-wide figures as its own. Such targets
# form one *reading group*: the server is read once per group, and every member gets the same
# figures, marked as shared (``server_side.shared_with``, ``scope: "model"``).
#
# When two targets are taken as one server's model:
#     Triton       the same host (``localhost`` is 127.0.0.1) and model (Triton serves HTTP and gRPC from
#                  one process, on different ports of one host), unless both set a ``metrics_url`` and
#                  the two differ (two Triton servers on one host); and the same version, or either
#                  without one: an unversioned target's statistics sum every version of the model (its
#                  requests go to the version Triton picks), so they include a ``version: 1`` target's.
#                  A group whose targets pin different versions, or not all one, reads every version
#                  (``reading_version``)
#     TorchServe   the same metrics page (``metrics_url``, or the default ``torchserve_metrics_url``
#                  derives) and the same model (its counters sum every version)
#     KServe       the same metrics page (``kserve_metrics_url``) and the same model
# A TorchServe target with no metrics page to read is a group of its own (it has no figures).
_LOOPBACK_NAMES = {"localhost": "127.0.0.1"}


#: why a target of a server whose record names no counters has no server-side figures
NO_COUNTERS = "inferload reads no server-side figures for {kind} targets: the client's figures only"


def _host(address: str) -> str:
    """The host of a target address (``host:port`` or ``scheme://host:port``), lowercased."""
    netloc = urllib.parse.urlsplit(address if "://" in address else f"//{address}").netloc
    host = netloc.rsplit(":", 1)[0].lower()
    return _LOOPBACK_NAMES.get(host, host)


def metrics_page(target: Target) -> str | None:
    """The target's server's metrics page (its record's `metrics_page`)."""
    page: str | None = implementation(target.server, "metrics_page")(target)
    return page


def reading_key(target: Target) -> tuple[str, ...] | None:
    """What identifies the counters a target reads; None when it reads none."""
    if target.server == "triton":  # its statistics API, one server per host
        return ("triton", _host(target.address), target.model)
    url = metrics_page(target)  # the others count per model on their metrics page (KServe: no versions)
    return None if url is None else (target.server, url, target.model)


def _compatible(target: Target, group: list[Target]) -> bool:
    """Triton: metrics URLs set on both sides and different mean two servers on one host."""
    if target.server != "triton" or target.metrics_url is None:
        return True
    return all(member.metrics_url in (None, target.metrics_url) for member in group)


def _by_version(group: list[Target]) -> list[list[Target]]:
    """One Triton model's targets: apart by version when every one pins a version, else all together."""
    if any(member.version is None for member in group):
        return [group]
    versions: dict[str, list[Target]] = {}
    for member in group:
        versions.setdefault(str(member.version), []).append(member)
    return list(versions.values())


def reading_groups(targets: Sequence[Target]) -> list[tuple[Target, ...]]:
    """The targets in groups that read the same counters, in the order of each group's first target
    in the scenario (that target is the one read; a target alone is a group of one)."""
    groups: list[tuple[tuple[str, ...] | None, list[Target]]] = []
    for target in targets:
        key = reading_key(target)
        home = next(
            (members for k, members in groups if key is not None and k == key and _compatible(target, members)),
            None,
        )
        if home is None:
            groups.append((key, [target]))
        else:
            home.append(target)
    found = [part for _, members in groups for part in (_by_version(members) if members[0].server == "triton" else [members])]
    order = {target.name: index for index, target in enumerate(targets)}
    return sorted((tuple(members) for members in found), key=lambda members: order[members[0].name])


def reading_version(group: Sequence[Target]) -> str | None:
    """The model version a group's reading covers: its targets' one version, else None (every version)."""
    versions = {target.version for target in group}
    return versions.pop() if len(versions) == 1 else None


def shared_with(targets: Sequence[Target]) -> dict[str, tuple[str, ...]]:
    """Target name -> the other targets whose server figures are the same reading (empty: none)."""
    found: dict[str, tuple[str, ...]] = {}
    for group in reading_groups(targets):
        for target in group:
            found[target.name] = tuple(other.name for other in group if other.name != target.name)
    return found


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
        if not has_role(record.server, "counters"):
            raise ScrapeError(NO_COUNTERS.format(kind=kind))
        open_counters = implementation(record.server, "counters")
        self._counters: ModelCounters = open_counters(kind, address, model, version, metrics_url, timeout_s, tls)

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
