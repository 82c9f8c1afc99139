"""The servers and their target kinds, one record each: a kind's server, wire protocol and user
classes; a server's start check, metrics page, counters, collector source and local launcher.
Every list of kinds elsewhere (the Triton kinds, the kinds with a URL scheme, ...) is derived from
these tables, never spelled out again, and no other module keeps a table by server or kind.

This is the scenario layer, below everything a record names: a user class is named (a public name
of ``inferload.users``), a server's roles as ``module:attribute`` in the layer that implements them,
imported when used (`implementation`). ``tests/unit/test_kinds.py`` holds every name to what it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal, get_args

#: the kinds of each target class (``scenario.targets``): the keys a target takes are its class's
TritonTensorKind = Literal["triton-grpc", "triton-http"]
TorchServeKind = Literal["torchserve-rest"]
KServeKind = Literal["kserve-v2-http", "kserve-v2-grpc", "kserve-v1-http"]
BentoMLKind = Literal["bentoml-http"]
GenerativeKind = Literal["openai-chat", "openai-completions", "triton-generate"]
TargetKind = Literal[TritonTensorKind, TorchServeKind, KServeKind, BentoMLKind, GenerativeKind]
#: ``openai``: any OpenAI-compatible server (llama.cpp, vLLM, SGLang, TGI, Triton's and KServe's OpenAI frontends)
Server = Literal["triton", "torchserve", "kserve", "bentoml", "openai"]
Protocol = Literal["grpc", "http"]


#: the header of a TorchServe sequence's id
TS_SEQUENCE_ID_HEADER = "ts_request_sequence_id"


@dataclass(frozen=True)
class ServerKind:
    """One target kind: its server, its wire, its user class, and how its requests and answers are read
    (the keys a kind's targets take are its class's in ``scenario.targets``)."""

    kind: TargetKind
    server: Server
    protocol: Protocol
    #: the most general public user class that speaks the kind (``inferload.<name>``)
    user_class: str
    #: what the kind is called in a sentence ("a TorchServe REST answer ...")
    label: str
    #: the user class a scenario's target of the kind is made from, when not `user_class`
    scenario_user_class: str | None = None
    #: the kind generates text: a prompt per request (`generation:`), its answer a stream of tokens
    generative: bool = False
    #: an HTTP kind whose address is ``host:port``: an ``http(s)://`` scheme is accepted and dropped
    #: (tritonclient's form; TLS is the target's ``tls``). False: a URL, its scheme kept
    scheme_dropped: bool = False
    #: the answer is KServe v2 / Triton tensors, by output name (False: JSON or bytes, or generated text)
    v2_tensors: bool = False
    #: the model has versions (``version:``)
    versions: bool = True
    #: what a response check is by default: the answer's status only, or its outputs' shapes too
    default_check: Literal["status", "shape"] = "shape"
    #: a chat: its requests are lists of messages (a prompt is the one user message)
    chat: bool = False
    #: a sequence's id travels in this header of each request (None: in the protocol's own parameters)
    sequence_id_header: str | None = None
    #: an OpenAI-compatible route under the target's base path
    route: str | None = None
    #: the engine's name of the kind's stream format (generative kinds)
    stream_format: str | None = None

    @property
    def scenario_class_name(self) -> str:
        return self.scenario_user_class or self.user_class


SERVER_KINDS: dict[str, ServerKind] = {
    record.kind: record
    for record in (
        # unary ModelInfer, or the gRPC stream once the start check finds a decoupled model
        ServerKind(
            "triton-grpc",
            "triton",
            "grpc",
            "TritonGrpcUser",
            "Triton gRPC",
            scenario_user_class="TritonStreamUser",
            v2_tensors=True,
        ),
        ServerKind(
            "triton-http",
            "triton",
            "http",
            "TritonHttpUser",
            "Triton HTTP",
            scheme_dropped=True,
            v2_tensors=True,
        ),
        ServerKind(
            "torchserve-rest",
            "torchserve",
            "http",
            "TorchServeRestUser",
            "TorchServe REST",
            default_check="status",
            sequence_id_header=TS_SEQUENCE_ID_HEADER,
        ),
        ServerKind("kserve-v2-http", "kserve", "http", "KServeV2HttpUser", "KServe v2 HTTP", v2_tensors=True),
        ServerKind("kserve-v2-grpc", "kserve", "grpc", "KServeV2GrpcUser", "KServe v2 gRPC", v2_tensors=True),
        ServerKind("kserve-v1-http", "kserve", "http", "KServeV1HttpUser", "KServe v1", versions=False),
        ServerKind(
            "bentoml-http",
            "bentoml",
            "http",
            "BentoMLHttpUser",
            "BentoML",
            default_check="status",
        ),
        ServerKind(
            "openai-chat",
            "openai",
            "http",
            "OpenAIUser",
            "OpenAI chat",
            generative=True,
            chat=True,
            route="/chat/completions",
            stream_format="openai_chat",
        ),
        ServerKind(
            "openai-completions",
            "openai",
            "http",
            "OpenAIUser",
            "OpenAI completions",
            generative=True,
            route="/completions",
            stream_format="openai_completions",
        ),
        # Triton's generate extension (HTTP): a prompt in text_input, text_output events
        ServerKind(
            "triton-generate",
            "triton",
            "http",
            "TritonGenerateUser",
            "Triton generate",
            generative=True,
            scheme_dropped=True,
            stream_format="triton_generate",
        ),
    )
}
TARGET_KINDS: tuple[str, ...] = get_args(TargetKind)

ServerRole = Literal["start_check", "metrics_page", "counters", "source_config", "local"]


@dataclass(frozen=True)
class ServerRecord:
    """Where each role of one server is implemented, as ``module:attribute``; None: the server has no
    such role (its targets read no counters, it has no local launcher)."""

    server: Server
    #: (the target's user class, ``startchecks.fit.StartContext``) -> ``StartFindings``: fits the
    #: class to the model; with ``context.check``, checks that the server serves it as the target sends
    start_check: str
    #: (Target) -> its metrics page, None when none is given and none derives from its address
    metrics_page: str
    #: (kind, address, model, version, metrics_url, timeout_s, tls) -> ``servermetrics.snapshot.ModelCounters``
    #: (None: `metrics_page` gives no page, so nothing is read)
    counters: str | None
    #: (Target, metrics page) -> the collector's source config for it
    source_config: str | None
    #: ``local.servers.manager.LocalServer``: how `inferload servers` starts, probes and stops it
    local: str | None
    #: the name `inferload servers` knows that launcher by (None: the server's)
    local_name: str | None = None


SERVER_RECORDS: dict[Server, ServerRecord] = {
    record.server: record
    for record in (
        ServerRecord(
            "triton",
            start_check="inferload.startchecks.triton:start_check",
            metrics_page="inferload.servermetrics.triton:metrics_page",
            counters="inferload.servermetrics.triton:open_counters",
            source_config="inferload.observe.collector:TritonSourceConfig.for_target",
            local="inferload.local.servers.triton_local:LOCAL",
        ),
        ServerRecord(
            "torchserve",
            start_check="inferload.startchecks.torchserve:start_check",
            metrics_page="inferload.servermetrics.torchserve:metrics_page",
            counters="inferload.servermetrics.torchserve:open_counters",
            source_config="inferload.observe.collector:TorchServeSourceConfig.for_target",
            local="inferload.local.servers.torchserve_local:LOCAL",
        ),
        ServerRecord(
            "kserve",
            start_check="inferload.startchecks.kserve:start_check",
            metrics_page="inferload.servermetrics.kserve:metrics_page",
            counters="inferload.servermetrics.kserve:open_counters",
            source_config="inferload.observe.collector:KServeSourceConfig.for_target",
            local="inferload.local.servers.kserve_local:LOCAL",
        ),
        ServerRecord(
            "bentoml",
            start_check="inferload.startchecks.bentoml:start_check",
            metrics_page="inferload.servermetrics.bentoml:metrics_page",
            counters="inferload.servermetrics.bentoml:open_counters",
            source_config="inferload.observe.collector:BentoMLSourceConfig.for_target",
            local="inferload.local.servers.bentoml_local:LOCAL",
        ),
        # llama.cpp's metrics page is read when a target names it (vLLM's and SGLang's not yet); run
        # locally: llama.cpp's server with the built-in LLM
        ServerRecord(
            "openai",
            start_check="inferload.startchecks.openai:start_check",
            metrics_page="inferload.servermetrics.openai:metrics_page",
            counters="inferload.servermetrics.openai:open_counters",
            source_config="inferload.observe.collector:OpenAISourceConfig.for_target",
            local="inferload.local.servers.llamacpp_local:LOCAL",
            local_name="llamacpp",
        ),
    )
}


def has_role(server: Server, role: ServerRole) -> bool:
    """The server's record names an implementation of the role."""
    return getattr(SERVER_RECORDS[server], role) is not None


def implementation(server: Server, role: ServerRole) -> Any:
    """What a server's record names for a role, imported now (a KeyError for an unknown server, a
    LookupError for a role the server does not have: ask `has_role` first)."""
    named: str | None = getattr(SERVER_RECORDS[server], role)
    if named is None:
        raise LookupError(f"the {server} server has no {role}")
    module, _, attribute = named.partition(":")
    found: Any = import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def kinds_of(server: Server) -> tuple[str, ...]:
    """The kinds one server answers, in the table's order."""
    return tuple(kind for kind, record in SERVER_KINDS.items() if record.server == server)


def kinds_spoken_by(user_class: str) -> tuple[str, ...]:
    """The kinds whose record names ``user_class`` as the class that speaks them (its ``target_kinds``)."""
    return tuple(kind for kind, record in SERVER_KINDS.items() if record.user_class == user_class)


TRITON_KINDS = kinds_of("triton")
#: the kinds whose requests are prompts and whose answers are generated text
GENERATIVE_KINDS = tuple(kind for kind, record in SERVER_KINDS.items() if record.generative)
#: kinds whose address takes a scheme (``http://`` / ``https://``)
SCHEME_KINDS = tuple(kind for kind, record in SERVER_KINDS.items() if record.protocol == "http")
#: the gRPC kinds (an address ``host:port``, headers as gRPC metadata)
GRPC_KINDS = tuple(kind for kind, record in SERVER_KINDS.items() if record.protocol == "grpc")
