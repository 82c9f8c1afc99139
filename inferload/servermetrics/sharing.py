"""Which targets of a run read the same server counters: one model on one server, seen by several targets.

A server counts per model (and version), never per client or per connection, so two targets on
one model (a triton-grpc and a triton-http target on ``cnn``, two TorchServe targets on one model)
cannot be told apart by the server: each would get the model-wide figures as its own. Such targets
form one *reading group*: the server is read once per group, and every member gets the same
figures, marked as shared (``server_side.shared_with``, ``scope: "model"``).

When two targets are taken as one server's model:
    Triton       the same host (``localhost`` is 127.0.0.1), model and version (Triton serves HTTP and
                 gRPC from one process, on different ports of one host), unless both set a
                 ``metrics_url`` and the two differ (two Triton servers on one host)
    TorchServe   the same metrics page (``metrics_url``, or the default ``torchserve_metrics_url``
                 derives) and the same model (its counters sum every version)
    KServe       the same metrics page (``kserve_metrics_url``) and the same model
A TorchServe target with no metrics page to read is a group of its own (it has no figures).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from inferload.scenario.targets import Target
from inferload.servermetrics.bentoml import bentoml_metrics_url
from inferload.servermetrics.kserve import kserve_metrics_url
from inferload.servermetrics.torchserve import torchserve_metrics_url

_LOOPBACK_NAMES = {"localhost": "127.0.0.1"}


def _host(address: str) -> str:
    """The host of a target address (``host:port`` or ``scheme://host:port``), lowercased."""
    netloc = urllib.parse.urlsplit(address if "://" in address else f"//{address}").netloc
    host = netloc.rsplit(":", 1)[0].lower()
    return _LOOPBACK_NAMES.get(host, host)


def reading_key(target: Target) -> tuple[str, ...] | None:
    """What identifies the counters a target reads; None when it reads none."""
    if target.server == "torchserve":
        url = torchserve_metrics_url(target.address, target.metrics_url)
        return None if url is None else ("torchserve", url, target.model)
    if target.server == "bentoml":
        return ("bentoml", bentoml_metrics_url(target.address, target.metrics_url), target.model)
    if target.server == "kserve":  # KServe counts per model on its metrics page (no versions)
        url = kserve_metrics_url(target.kind, target.address, target.metrics_url)
        return None if url is None else ("kserve", url, target.model)
    return ("triton", _host(target.address), target.model, target.version or "")


def _compatible(target: Target, group: list[Target]) -> bool:
    """Triton: metrics URLs set on both sides and different mean two servers on one host."""
    if target.server != "triton" or target.metrics_url is None:
        return True
    return all(member.metrics_url in (None, target.metrics_url) for member in group)


def reading_groups(targets: Sequence[Target]) -> list[tuple[Target, ...]]:
    """The targets in groups that read the same counters, in scenario order (each group's first
    target is the one read; a target alone is a group of one)."""
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
    return [tuple(members) for _, members in groups]


def shared_with(targets: Sequence[Target]) -> dict[str, tuple[str, ...]]:
    """Target name -> the other targets whose server figures are the same reading (empty: none)."""
    found: dict[str, tuple[str, ...]] = {}
    for group in reading_groups(targets):
        for target in group:
            found[target.name] = tuple(other.name for other in group if other.name != target.name)
    return found
