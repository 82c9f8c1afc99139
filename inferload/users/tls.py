"""A target's ``tls`` settings made into what each client library takes, when a user starts.

- gRPC (``triton-grpc``): ``grpc_credentials`` → ``grpc.ssl_channel_credentials(root, key, chain)``
  and the channel options (``grpc.ssl_target_name_override`` for ``server_name``).
- geventhttpclient (``torchserve-rest``) and tritonclient.http (``triton-http``, built on it):
  ``http_tls_options`` → ``ssl_context_factory`` (one ``SSLContext`` with the CA, the client
  certificate and the verification mode), ``ssl_options`` (``server_hostname``) and ``insecure``.

Files are read here, on the machine the users run on; a key's bytes go to the TLS library and
nowhere else (messages name the path only). Relative paths resolve against the scenario's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gevent.ssl

from inferload.errors import InferloadError
from inferload.scenario.tls import TlsSettings


class TlsFileError(InferloadError):
    """A target's TLS file cannot be read or used where the users run."""


def _path(path: str, base_dir: Path) -> Path:
    return base_dir / path  # an absolute path stays absolute


def _read(path: Path, what: str, target: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsFileError(f"target {target!r}: cannot read tls {what} {path}: {exc.strerror or type(exc).__name__}") from None


def grpc_credentials(tls: TlsSettings, base_dir: Path, target: str) -> tuple[Any, list[tuple[str, Any]]]:
    """(channel credentials, extra channel options) for a gRPC channel with these settings."""
    import grpc

    root = _read(_path(tls.ca_file, base_dir), "ca_file", target) if tls.ca_file else None
    key = _read(_path(tls.key_file, base_dir), "key_file", target) if tls.key_file else None
    chain = _read(_path(tls.cert_file, base_dir), "cert_file", target) if tls.cert_file else None
    credentials = grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)
    options: list[tuple[str, Any]] = []
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return credentials, options


def ssl_context(tls: TlsSettings, base_dir: Path, target: str) -> gevent.ssl.SSLContext:
    """A client ``SSLContext``: the CA (or the system's), the client certificate, verification on
    unless ``insecure_skip_verify``."""
    try:
        if tls.insecure_skip_verify:
            context = gevent.ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = gevent.ssl.CERT_NONE
        else:
            cafile = str(_path(tls.ca_file, base_dir)) if tls.ca_file else None
            context = gevent.ssl.create_default_context(cafile=cafile)
        if tls.cert_file and tls.key_file:
            context.load_cert_chain(str(_path(tls.cert_file, base_dir)), str(_path(tls.key_file, base_dir)))
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        files = ", ".join(f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f)
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        raise TlsFileError(f"target {target!r}: cannot use the tls files ({files}): {reason}") from None
    return context


def http_tls_options(tls: TlsSettings, base_dir: Path, target: str) -> dict[str, Any]:
    """Keyword arguments for geventhttpclient's ``HTTPClient`` (and tritonclient.http's client)."""
    context = ssl_context(tls, base_dir, target)
    options: dict[str, Any] = {
        # geventhttpclient calls the factory with cafile=...; the context above already holds what it needs
        "ssl_context_factory": lambda *_, **__: context,
        # insecure: geventhttpclient then leaves the context's own (unverified) mode alone
        "insecure": tls.insecure_skip_verify,
    }
    if tls.server_name:
        options["ssl_options"] = {"server_hostname": tls.server_name}
    return options


def native_tls(tls: TlsSettings, base_dir: Path, target: str) -> dict[str, Any]:
    """The native engine's TLS settings (PEM contents read here; rustls verifies, docs/engine.md)."""
    return {
        "ca_pem": _read(_path(tls.ca_file, base_dir), "ca_file", target) if tls.ca_file else None,
        "cert_pem": _read(_path(tls.cert_file, base_dir), "cert_file", target) if tls.cert_file else None,
        "key_pem": _read(_path(tls.key_file, base_dir), "key_file", target) if tls.key_file else None,
        "server_name": tls.server_name,
        "insecure_skip_verify": tls.insecure_skip_verify,
    }
