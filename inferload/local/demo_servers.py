"""The servers `inferload demo --servers` can compare, one entry each: how the demo reaches it.

Each entry names the local server (``LocalServers``), the target kind the demo sends with, a label
for the console, and the target keys (address, metrics page, body form) for a given model and
ports. Adding a server to the comparison is one entry here (and its ``*_local.py`` in
``local/servers``); the demo itself loops over whatever ``--servers`` lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferload.local.models.specs import ModelSpec
from inferload.local.servers.ports import ServerPorts

DEFAULT_DEMO_SERVERS: tuple[str, ...] = ("triton", "torchserve")


@dataclass(frozen=True)
class DemoServer:
    name: str  # LocalServers' name: "triton", "torchserve", "kserve", ...
    kind: str  # the target kind the demo sends with
    label: str  # how the console names it
    keys: Callable[[ModelSpec, ServerPorts], dict[str, Any]]  # address and protocol keys of its target


def _triton(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {"address": f"127.0.0.1:{ports.triton_grpc}", "outputs": [spec.output_name]}


def _torchserve(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {
        "address": f"http://127.0.0.1:{ports.ts_inference}",
        "content_type": "octet-stream",
        "metrics_url": f"http://127.0.0.1:{ports.ts_metrics}/metrics",
    }


def _kserve(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {
        "address": f"127.0.0.1:{ports.kserve_grpc}",
        "outputs": [spec.output_name],
        "metrics_url": f"http://127.0.0.1:{ports.kserve_http}/metrics",
    }


def _bentoml(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    # POST /<model> with {"INPUT__0": [...]}; /metrics on the same port (the target's default)
    return {"address": f"http://127.0.0.1:{ports.bentoml_http}", "content_type": "json"}


DEMO_SERVERS: dict[str, DemoServer] = {
    server.name: server
    for server in (
        DemoServer("triton", "triton-grpc", "Triton (gRPC)", _triton),
        DemoServer("torchserve", "torchserve-rest", "TorchServe (REST)", _torchserve),
        DemoServer("kserve", "kserve-v2-grpc", "KServe (v2 gRPC)", _kserve),
        DemoServer("bentoml", "bentoml-http", "BentoML (HTTP)", _bentoml),
    )
}


def demo_server(name: str) -> DemoServer:
    """The entry of ``name``; a ValueError naming the servers the demo knows."""
    try:
        return DEMO_SERVERS[name]
    except KeyError:
        raise ValueError(f"the demo cannot compare {name!r}; it knows: {', '.join(DEMO_SERVERS)}") from None


def server_of_kind(kind: str) -> DemoServer:
    """The entry whose demo target has ``kind``."""
    return next(server for server in DEMO_SERVERS.values() if server.kind == kind)
