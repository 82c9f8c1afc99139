"""Server addresses and metrics URLs as scenarios write them → one canonical form per target kind.

``normalise_address`` raises ``ValueError`` with what was expected; ``MetricsUrl`` is the field
type of ``metrics_url`` (path defaults to ``/metrics``), ``ManagementUrl`` that of a TorchServe
target's ``management_url`` (the management API's root).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import BeforeValidator

from inferload.errors import MASK, mask_secrets
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.messages import custom_error, describe_value

_HOSTNAME_RE = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def _split_host_port(text: str, example: str, written: str | None = None) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) → (host as written, port); ValueError otherwise, quoting
    ``written`` (the whole address as the scenario wrote it; ``text`` itself by default)."""
    shown = text if written is None else written
    if "@" in text:  # user:password@host: never sent, never shown
        credentials = text.rpartition("@")[0]
        raise ValueError(
            f"credentials in an address are not sent; got {shown.replace(credentials, MASK)!r} (send them as a"
            " header instead: the target's headers, or headers_from_env naming an environment variable)"
        )
    expected = f"expected host:port like {example!r}; got {shown!r}"
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise ValueError(expected)
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"invalid IPv6 address {host!r} in {shown!r}") from None
        host = f"[{host}]"
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon or not host:
            raise ValueError(expected)
        if not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"invalid host {host!r} in {shown!r}")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"the port must be a number from 1 to 65535; got {port_text!r} in {shown!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"the port must be a number from 1 to 65535; got {port} in {shown!r}")
    return host, port


def _split_url(text: str, schemes: tuple[str, ...], example: str) -> tuple[str, str]:
    """``scheme://host:port[/path]`` → (scheme, rest); no scheme → (schemes[0], text)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return schemes[0], text
    if scheme.lower() not in schemes:
        allowed = " or ".join(f"{s}://" for s in schemes)
        raise ValueError(f"expected {allowed} like {example!r}; got {mask_secrets(text, ())!r}")
    return scheme.lower(), rest


def normalise_address(kind: str, address: str) -> str:
    """The canonical address of a target, or ValueError saying what was expected.

    triton-grpc → ``host:port``; triton-http → ``host:port`` (tritonclient's form; an
    ``http://`` or ``https://`` prefix is accepted and dropped: TLS is the target's ``tls``);
    torchserve-rest, kserve-v2-http, kserve-v1-http → ``http://host:port`` (``https://`` kept);
    kserve-v2-grpc → ``host:port`` (as triton-grpc).
    """
    text = address.strip()
    record = SERVER_KINDS[kind]
    if record.protocol == "grpc":
        if "://" in text:
            raise ValueError(f"expected host:port without a scheme like '127.0.0.1:8001'; got {text!r}")
        host, port = _split_host_port(text, "127.0.0.1:8001")
        return f"{host}:{port}"
    if record.scheme_dropped:
        _, rest = _split_url(text, ("http", "https"), "http://127.0.0.1:8000")  # https: the target's tls
        host, port = _split_host_port(rest.rstrip("/"), "127.0.0.1:8000", text)
        return f"{host}:{port}"
    scheme, rest = _split_url(text, ("http", "https"), "http://127.0.0.1:8080")
    hostport = rest.rstrip("/")
    if "/" in hostport:
        raise ValueError(f"expected http://host:port without a path; got {text!r}")
    host, port = _split_host_port(hostport, "http://127.0.0.1:8080", text)
    return f"{scheme}://{host}:{port}"


def _http_url(value: object, example: str) -> tuple[str, str, bool, str]:
    """An http(s) URL → (scheme, host:port, whether a path followed, path); a custom error otherwise."""
    if not isinstance(value, str) or "://" not in value:
        raise custom_error(f"expected a URL like {example!r}; got {describe_value(value)}")
    scheme, rest = value.strip().split("://", 1)
    if scheme.lower() not in ("http", "https"):
        raise custom_error(f"expected an http:// or https:// URL like {example!r}; got {describe_value(mask_secrets(value, ()))}")
    hostport, slash, path = rest.partition("/")
    try:
        host, port = _split_host_port(hostport, example.split("://", 1)[1].split("/", 1)[0], value.strip())
    except ValueError as error:
        raise custom_error(str(error)) from None
    return scheme.lower(), f"{host}:{port}", bool(slash), path


def _metrics_url(value: object) -> str | None:
    if value is None:
        return None
    scheme, hostport, slash, path = _http_url(value, "http://127.0.0.1:8002/metrics")
    return f"{scheme}://{hostport}/{path}" if slash else f"{scheme}://{hostport}/metrics"


def _management_url(value: object) -> str | None:
    """TorchServe's management API root: ``http(s)://host:port`` (a path prefix is kept, no trailing slash)."""
    if value is None:
        return None
    scheme, hostport, _, path = _http_url(value, "http://127.0.0.1:8081")
    path = path.strip("/")
    return f"{scheme}://{hostport}/{path}" if path else f"{scheme}://{hostport}"


MetricsUrl = Annotated[str | None, BeforeValidator(_metrics_url)]
ManagementUrl = Annotated[str | None, BeforeValidator(_management_url)]
