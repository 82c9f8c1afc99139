"""The target kinds, one record each: the server that answers it, its wire protocol, and the public
user class that speaks it. Every list of kinds elsewhere (the Triton kinds, the kinds with a URL
scheme, ...) is derived from this table, never spelled out again.

The user class is named, not imported (this is the scenario layer, below the users):
``tests/unit/test_kinds.py`` holds the names to ``inferload.users.classes.USER_CLASS_BY_KIND``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

TargetKind = Literal[
    "triton-grpc", "triton-http", "torchserve-rest", "kserve-v2-http", "kserve-v2-grpc", "kserve-v1-http", "bentoml-http"
]
Server = Literal["triton", "torchserve", "kserve", "bentoml"]
Protocol = Literal["grpc", "http"]


@dataclass(frozen=True)
class ServerKind:
    kind: TargetKind
    server: Server
    protocol: Protocol
    #: the most general public user class that speaks the kind (``inferload.<name>``)
    user_class: str
    #: the kind takes a Triton/TorchServe sequence model (`sequence:`)
    sequences: bool = False


SERVER_KINDS: dict[str, ServerKind] = {
    record.kind: record
    for record in (
        ServerKind("triton-grpc", "triton", "grpc", "TritonGrpcUser", sequences=True),
        ServerKind("triton-http", "triton", "http", "TritonHttpUser", sequences=True),
        ServerKind("torchserve-rest", "torchserve", "http", "TorchServeRestUser", sequences=True),
        ServerKind("kserve-v2-http", "kserve", "http", "KServeV2HttpUser"),
        ServerKind("kserve-v2-grpc", "kserve", "grpc", "KServeV2GrpcUser"),
        ServerKind("kserve-v1-http", "kserve", "http", "KServeV1HttpUser"),
        ServerKind("bentoml-http", "bentoml", "http", "BentoMLHttpUser"),
    )
}
TARGET_KINDS: tuple[str, ...] = get_args(TargetKind)


def kinds_of(server: Server) -> tuple[str, ...]:
    """The kinds one server answers, in the table's order."""
    return tuple(kind for kind, record in SERVER_KINDS.items() if record.server == server)


TRITON_KINDS = kinds_of("triton")
TORCHSERVE_KINDS = kinds_of("torchserve")
KSERVE_KINDS = kinds_of("kserve")
BENTOML_KINDS = kinds_of("bentoml")
#: kinds whose address takes a scheme (``http://`` / ``https://``)
SCHEME_KINDS = tuple(kind for kind, record in SERVER_KINDS.items() if record.protocol == "http")
#: the kinds that take the `sequence:` key
SEQUENCE_KINDS = tuple(kind for kind, record in SERVER_KINDS.items() if record.sequences)
