"""The loopback ports of the local servers, and checks that they are free."""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass, fields

from inferload.errors import PortInUseError

LOOPBACK = "127.0.0.1"
_SERVICES = {
    "triton_http": "Triton HTTP",
    "triton_grpc": "Triton gRPC",
    "triton_metrics": "Triton metrics",
    "ts_inference": "TorchServe inference",
    "ts_management": "TorchServe management",
    "ts_metrics": "TorchServe metrics",
    "ts_grpc_inference": "TorchServe gRPC inference",
    "ts_grpc_management": "TorchServe gRPC management",
    "bentoml_http": "BentoML HTTP (APIs, /metrics, /readyz)",
    "kserve_http": "KServe REST (v1, v2, /metrics)",
    "kserve_grpc": "KServe gRPC (v2)",
    "llamacpp_http": "llama.cpp HTTP (OpenAI routes, /metrics)",
}


@dataclass(frozen=True)
class ServerPorts:
    triton_http: int = 8000
    triton_grpc: int = 8001
    triton_metrics: int = 8002
    ts_inference: int = 8080
    ts_management: int = 8081
    ts_metrics: int = 8082
    # TorchServe always opens its gRPC APIs too (loopback); two servers must not share them
    ts_grpc_inference: int = 7070
    ts_grpc_management: int = 7071
    bentoml_http: int = 3000
    kserve_http: int = 8090
    kserve_grpc: int = 8091
    llamacpp_http: int = 8085

    @classmethod
    def free(cls) -> ServerPorts:
        """Distinct ports that are free on 127.0.0.1 right now (`free_port`; for tests and the demo)."""
        from inferload.launch.distributed import free_port

        ports: list[int] = []
        for _ in fields(cls):
            ports.append(free_port(LOOPBACK, taken=ports))
        return cls(*ports)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> ServerPorts:
        return cls(**{f.name: int(data[f.name]) for f in fields(cls) if f.name in data})

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def for_server(self, server: str) -> dict[str, int]:
        """The ports one local server (a launcher's name: 'triton', 'llamacpp', ...) binds."""
        prefix = {"triton": "triton_", "torchserve": "ts_", "bentoml": "bentoml_", "kserve": "kserve_", "llamacpp": "llamacpp_"}[
            server
        ]
        return {k: v for k, v in self.to_dict().items() if k.startswith(prefix)}


def service_name(field_name: str) -> str:
    return _SERVICES.get(field_name, field_name)


def is_port_open(port: int, host: str = LOOPBACK, timeout_s: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when port can be bound on host (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_free(ports: dict[str, int] | ServerPorts, host: str = LOOPBACK) -> None:
    """Raise PortInUseError naming the first taken port and the service that wanted it."""
    mapping = ports.to_dict() if isinstance(ports, ServerPorts) else dict(ports)
    seen: dict[int, str] = {}
    for field_name, port in mapping.items():
        if port in seen:
            raise PortInUseError(
                f"port {port} is configured twice: for {service_name(seen[port])} and {service_name(field_name)}"
            )
        seen[port] = field_name
        if not port_is_free(port, host):
            raise PortInUseError(
                f"port {port} on {host} is already in use; {service_name(field_name)} "
                f"({field_name}) needs it. Stop what holds it or choose another port."
            )
