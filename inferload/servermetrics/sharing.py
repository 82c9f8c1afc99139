"""Which targets of a run read the same server counters: one model on one server, seen by several targets.

A server counts per model (and version), never per client or per connection, so two targets on
one model (a triton-grpc and a triton-http target on ``cnn``, two TorchServe targets on one model)
cannot be told apart by the server: each would get the model-wide figures as its own. Such targets
form one *reading group*: the server is read once per group, and every member gets the same
figures, marked as shared (``server_side.shared_with``, ``scope: "model"``).

When two targets are taken as one server's model:
    Triton       the same host (``localhost`` is 127.0.0.1) and model (Triton serves HTTP and gRPC from
                 one process, on different ports of one host), unless both set a ``metrics_url`` and
                 the two differ (two Triton servers on one host); and the same version, or either
                 without one: an unversioned target's statistics sum every version of the model (its
                 requests go to the version Triton picks), so they include a ``version: 1`` target's.
                 A group whose targets pin different versions, or not all one, reads every version
                 (``reading_version``)
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
    return ("triton", _host(target.address), target.model)


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
