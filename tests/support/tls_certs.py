"""Throwaway certificates for TLS tests, made with the ``openssl`` command into a test's folder.

EC keys (fast to make), except the server's: RSA, the only kind TorchServe reads.

``make_certificates(folder)`` writes a CA, a server certificate for 127.0.0.1 and localhost
(subject alternative names IP and DNS) signed by it, a client certificate signed by it, and a
second, unrelated CA (the "wrong CA"). Keys are unencrypted PEM files in that folder only.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", str(key), "-out", str(cert), cwd=folder,
    )  # fmt: skip
    return cert, key


def _signed(folder: Path, name: str, ca: tuple[Path, Path], extensions: str, rsa: bool = False) -> tuple[Path, Path]:
    key, csr, cert, ext = (folder / f"{name}.{suffix}" for suffix in ("key", "csr", "pem", "ext"))
    ext.write_text(extensions)
    algorithm = ["-newkey", "rsa:2048"] if rsa else ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    _openssl("req", *algorithm, "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr), cwd=folder)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
        "-days", "2", "-extfile", str(ext), "-out", str(cert), cwd=folder,
    )  # fmt: skip
    return cert, key


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "test-ca")
    server = _signed(
        folder,
        "server",
        ca,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        rsa=True,  # TorchServe reads only RSA private keys (its ConfigManager.loadPrivateKey)
    )
    client = _signed(
        folder,
        "client",
        ca,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    other_ca, _ = _ca(folder, "other-ca")
    return Certificates(ca[0], server[0], server[1], client[0], client[1], other_ca)
