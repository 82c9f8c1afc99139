"""Request headers per target: static ``headers``, ``headers_from_env`` and TorchServe's ``token_file``.

The scenario holds header names, static values, environment variable *names* and the key file's
path, never a secret itself: a value from the environment or the key file is read by each user at
its start (``request_headers``), on the machine it runs on, and goes nowhere but on the wire.
``check_headers`` is the validation of the keys that span each other (a header set twice, one a
gRPC target cannot send as metadata, a ``token_file`` beside an ``Authorization`` header).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

from inferload.errors import UsageError
from inferload.scenario.input_files import read_limited
from inferload.scenario.kinds import GRPC_KINDS
from inferload.scenario.limits import MAX_SMALL_FILE_BYTES
from inferload.scenario.messages import Check, custom_error, describe_value

#: RFC 9110 token characters: what a header name may hold
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: gRPC metadata keys (sent in lower case); ``-bin`` keys carry bytes, not text, and are not offered
_GRPC_KEY_RE = re.compile(r"[0-9a-z_.\-]+")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: headers that frame the request itself: set by the client, never by a scenario
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection"})
GRPC_RESERVED = frozenset({"content-type", "te", "user-agent"})


class HeadersError(UsageError):
    """A target's headers cannot be made: an environment variable unset, a key file unreadable."""


def _has_control(value: str) -> bool:
    return any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value)


def _header_name(value: object) -> str:
    if not isinstance(value, str) or not _HEADER_NAME_RE.fullmatch(value):
        raise custom_error(
            f"expected a header name of letters, digits and !#$%&'*+-.^_`|~ (no spaces or ':'); got {describe_value(value)}"
        )
    if value.lower() in FRAMING_HEADERS:
        raise custom_error(f"{value} is set by the client itself and cannot be given")
    return value


def _header_value(value: object) -> str:
    if not isinstance(value, str):
        raise custom_error(f"expected a string (quote numbers); got {describe_value(value)}")
    if _has_control(value):
        raise custom_error("expected a header value without control characters (no line breaks)")
    return value


def _env_name(value: object) -> str:
    if not isinstance(value, str) or not _ENV_NAME_RE.fullmatch(value):
        raise custom_error(f"expected an environment variable name like MY_TOKEN; got {describe_value(value)}")
    return value


HeaderName = Annotated[str, BeforeValidator(_header_name)]
HeaderValue = Annotated[str, BeforeValidator(_header_value)]
EnvName = Annotated[str, BeforeValidator(_env_name)]


def check_headers(kind: str | None, headers: Mapping[str, str], from_env: Mapping[str, str]) -> list[Check]:
    """Problems across the header keys, each at its own key path."""
    checks: list[Check] = []
    seen = {name.lower(): name for name in headers}
    for name in from_env:
        if name.lower() in seen:
            checks.append((("headers_from_env", name), f"header {name!r} is also in headers ({seen[name.lower()]!r})"))
    if kind is not None and kind in GRPC_KINDS:
        for key, names in (("headers", headers), ("headers_from_env", from_env)):
            for name in names:
                problem = _grpc_key_problem(name.lower(), kind)
                if problem:
                    checks.append(((key, name), problem))
        for name, value in headers.items():
            if not value.isascii() or "\t" in value:
                checks.append((("headers", name), "gRPC metadata values are printable ASCII"))
    return checks


def _grpc_key_problem(key: str, kind: str) -> str | None:
    if not _GRPC_KEY_RE.fullmatch(key):
        return f"a {kind} target sends headers as gRPC metadata, whose keys are letters, digits, '_', '.' and '-'"
    if key.startswith("grpc-") or key in GRPC_RESERVED:
        return f"{key!r} is reserved by gRPC itself"
    if key.endswith("-bin"):
        return "'-bin' metadata carries binary values; send a text header"
    return None


def _token_file_key(path: Path, section: str) -> str | None:
    """The ``section`` key (``inference``, ``management``) in TorchServe's ``key_file.json``, None when
    it holds none; ``HeadersError`` naming the file when it is no regular file, too large, unreadable
    or not JSON."""
    try:
        raw = read_limited(path, MAX_SMALL_FILE_BYTES)
    except ValueError as exc:
        raise HeadersError(f"cannot read token_file: {exc}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise HeadersError(f"token_file {path} is not JSON (expected TorchServe's key_file.json)") from None
    part = data.get(section) if isinstance(data, dict) else None
    key = part.get("key") if isinstance(part, dict) else None
    return key if isinstance(key, str) and key else None


def read_inference_key(path: Path) -> str:
    """The inference key in TorchServe's ``key_file.json`` (``{"inference": {"key": ...}, ...}``)."""
    key = _token_file_key(path, "inference")
    if key is None:
        raise HeadersError(f"token_file {path} has no inference key (expected TorchServe's key_file.json: inference.key)")
    return key


def read_management_key(path: Path) -> str | None:
    """The management key in TorchServe's ``key_file.json`` (None when it holds none); ``HeadersError``
    when the file cannot be read (`_token_file_key`)."""
    return _token_file_key(path, "management")


def request_headers(
    target_name: str,
    headers: Mapping[str, str] | None,
    from_env: Mapping[str, str] | None,
    token_file: str | None,
    base_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers a target's requests carry, secrets read now; ``HeadersError`` naming the target otherwise."""
    environ = os.environ if environ is None else environ
    result = dict(headers or {})
    for name, variable in (from_env or {}).items():
        value = environ.get(variable)
        if value is None:
            raise HeadersError(
                f"target {target_name!r}: environment variable {variable} (for header {name}) is not set"
                " on this machine (headers_from_env is read where the users run)"
            )
        if _has_control(value):
            raise HeadersError(f"target {target_name!r}: environment variable {variable} holds control characters")
        result[name] = value
    if token_file is not None:
        try:
            key = read_inference_key(base_dir / token_file)
        except HeadersError as exc:
            raise HeadersError(f"target {target_name!r}: {exc}") from None
        result["Authorization"] = f"Bearer {key}"
    return result
