"""TLS per target: the ``tls`` key (CA, client certificate and key, server name) and ``https://`` addresses.

``TlsSettings`` holds file *paths* only, never their contents: each user reads the files when it
starts (``inferload.users.tls``), on the machine it runs on, and a key's bytes go nowhere but to the
TLS library. Paths are relative to the scenario file (made absolute when its folder is known, and
then checked to exist and to hold PEM data of the right kind).

A target uses TLS when it has a ``tls`` mapping (``tls: true`` is short for ``tls: {}``: the
system's CAs). An ``https://`` address on a ``triton-http`` or ``torchserve-rest`` target implies
``tls: {}`` (``tls_from_scheme``); an explicit ``http://`` address with ``tls`` is an error
(``tls_from_scheme``). ``triton-grpc`` addresses take no scheme: ``tls`` alone turns TLS on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import StrictBool, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario.fields import FrozenModel, Token
from inferload.scenario.input_files import read_limited, scenario_file
from inferload.scenario.kinds import GRPC_KINDS, SCHEME_KINDS, SERVER_KINDS
from inferload.scenario.messages import Check, checks_error

#: a PEM file is read at most this far when it is checked (certificate bundles are a few hundred KiB)
MAX_PEM_BYTES = 4 * 1024 * 1024
_CERT_MARK = b"-----BEGIN CERTIFICATE-----"
_KEY_MARKS = (b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN RSA PRIVATE KEY-----", b"-----BEGIN EC PRIVATE KEY-----")
_ENCRYPTED_KEY_MARK = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"


def pem_problem(path: Path, what: str) -> str | None:
    """Why ``path`` is not a readable PEM file of ``what`` ('certificate' or 'key'); None when it is.

    Only the PEM markers are looked at; a key's bytes are never put in a message.
    """
    try:
        head = read_limited(path, MAX_PEM_BYTES)  # regular, bounded, read without waiting (/proc/kmsg waits)
    except ValueError as exc:
        return str(exc)
    if what == "certificate":
        if _CERT_MARK not in head:
            return f"{path} holds no PEM certificate (expected a '-----BEGIN CERTIFICATE-----' block)"
        return None
    if _ENCRYPTED_KEY_MARK in head:
        return f"{path} holds an encrypted private key; give an unencrypted PEM key (openssl pkey -in KEY -out PLAIN)"
    if not any(mark in head for mark in _KEY_MARKS):
        return f"{path} holds no PEM private key (expected a '-----BEGIN PRIVATE KEY-----' block)"
    return None


class TlsSettings(FrozenModel):
    """How a target's connections are secured. Every key is optional; ``tls: {}`` = the system's CAs."""

    #: CA certificates (PEM) that verify the server, instead of the system's
    ca_file: StrictStr | None = None
    #: a client certificate (PEM) for mutual TLS; needs ``key_file``
    cert_file: StrictStr | None = None
    #: the client certificate's private key (PEM, unencrypted); needs ``cert_file``
    key_file: StrictStr | None = None
    #: the name the server's certificate must carry (and the SNI name); default: the address's host
    server_name: Token | None = None
    #: HTTPS targets only: do not verify the server's certificate at all (testing only)
    insecure_skip_verify: StrictBool = False

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario file; checked (exists, readable, PEM) when its folder is known."""
        kind = "key" if info.field_name == "key_file" else "certificate"
        return scenario_file(value, info, "a PEM file", lambda path: pem_problem(path, kind))

    @model_validator(mode="after")
    def _pairs(self) -> TlsSettings:
        checks: list[Check] = []
        if self.key_file is not None and self.cert_file is None:
            checks.append((("key_file",), "a key_file needs its cert_file (the client certificate)"))
        if self.cert_file is not None and self.key_file is None:
            checks.append((("cert_file",), "a cert_file needs its key_file (the client certificate's private key)"))
        if self.insecure_skip_verify and self.ca_file is not None:
            checks.append((("ca_file",), "is not used with insecure_skip_verify: true (give one or the other)"))
        if checks:
            raise checks_error(checks)
        return self


def tls_shorthand(value: object) -> object:
    """``tls: true`` → ``{}`` (TLS with the system's CAs); ``tls: false`` → no TLS."""
    if value is True:
        return {}
    if value is False:
        return None
    return value


def _scheme(address: object) -> str | None:
    if isinstance(address, str) and "://" in address:
        return address.strip().split("://", 1)[0].lower()
    return None


def tls_from_scheme(data: Any) -> Any:
    """Before a target is validated: its address's scheme and its ``tls`` agree.

    An ``https://`` address without ``tls`` means ``tls: {}``; a torchserve-rest address without a
    scheme takes ``https://`` when the target has ``tls``; ``http://`` with ``tls``, or ``https://``
    with ``tls: false``, is an error at ``address``.
    """
    if not isinstance(data, dict) or data.get("kind") not in SCHEME_KINDS or not isinstance(data.get("address"), str):
        return data
    address, tls = data["address"], data.get("tls")
    scheme = _scheme(address)
    if scheme == "https" and tls is False:
        raise checks_error([(("address",), "an https:// address needs TLS; remove 'tls: false' or write http://")])
    if scheme == "http" and tls not in (None, False):
        raise checks_error(
            [(("address",), f"this target has tls, so its address takes https:// (or no scheme); got {address.strip()!r}")]
        )
    if scheme == "https" and tls is None:
        return {**data, "tls": {}}
    if scheme is None and not SERVER_KINDS[data["kind"]].scheme_dropped and tls not in (None, False):
        return {**data, "address": "https://" + address.strip()}
    return data


def check_tls(kind: str | None, tls: TlsSettings | None) -> list[Check]:
    """Problems between ``tls`` and the target's kind, at their key paths."""
    if tls is None or kind is None:
        return []
    if kind in GRPC_KINDS and tls.insecure_skip_verify:
        return [
            (
                ("tls", "insecure_skip_verify"),
                "gRPC cannot skip verifying the server; give the server's CA in ca_file instead",
            )
        ]
    return []


#: words in a client library's error that point at TLS (a handshake, a certificate, plain text on a TLS port)
_TLS_SIGNS = ("ssl", "tls", "certificate", "handshake", "wrong version number")
#: what a plain-text client sees from a TLS port
_PLAIN_ON_TLS_SIGNS = ("socket closed", "connection reset", "remotedisconnected", "connection aborted", "badstatusline")


def tls_hint(tls: TlsSettings | None, detail: str) -> str:
    """A hint to append to a connection error that looks like a TLS problem ('' otherwise)."""
    lowered = detail.lower()
    if tls is not None and any(sign in lowered for sign in _TLS_SIGNS):
        return f"; the TLS handshake failed with {describe_tls(tls)}: check ca_file, server_name and the client certificate"
    if tls is not None and tls.cert_file is None and any(sign in lowered for sign in _PLAIN_ON_TLS_SIGNS):
        return "; the server closed the TLS connection: does it want a client certificate (tls.cert_file and tls.key_file)?"
    if tls is None and any(sign in lowered for sign in (*_TLS_SIGNS, *_PLAIN_ON_TLS_SIGNS)):
        return "; does the server expect TLS? give the target tls (or an https:// address)"
    return ""


def tls_of(target: Any) -> dict[str, Any]:
    """``{"tls": settings}`` for a target with TLS, else ``{}``: keyword arguments for the server readers
    (a reader of a plain target is called as before)."""
    tls = getattr(target, "tls", None)
    return {"tls": tls} if tls is not None else {}


def requests_tls(tls: TlsSettings | None) -> dict[str, Any]:
    """What ``requests`` takes for these settings: ``verify`` (CA path, or False) and ``cert`` (cert, key)."""
    if tls is None:
        return {}
    options: dict[str, Any] = {}
    if tls.insecure_skip_verify:
        options["verify"] = False
    elif tls.ca_file is not None:
        options["verify"] = tls.ca_file
    if tls.cert_file is not None and tls.key_file is not None:
        options["cert"] = (tls.cert_file, tls.key_file)
    return options


def describe_tls(tls: TlsSettings | None) -> str:
    """A short description for messages (paths only, never contents)."""
    if tls is None:
        return "no TLS"
    parts = [f"CA {tls.ca_file}" if tls.ca_file else "system CAs"]
    if tls.insecure_skip_verify:
        parts = ["server not verified"]
    if tls.cert_file:
        parts.append(f"client certificate {tls.cert_file}")
    if tls.server_name:
        parts.append(f"server name {tls.server_name!r}")
    return "TLS (" + ", ".join(parts) + ")"


__all__ = [
    "TlsSettings",
    "check_tls",
    "describe_tls",
    "pem_problem",
    "requests_tls",
    "tls_from_scheme",
    "tls_hint",
    "tls_of",
    "tls_shorthand",
]
