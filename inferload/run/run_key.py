"""The run key of a distributed run: where it comes from, and the signature of the code it vouches for.

One secret, `INFERLOAD_RUN_KEY`, shared by a master and its workers (docs/operations.md, "Trust
model"). Workers sign their reports with it (`inferload.measure.report_auth`); the master signs the
self-contained locustfile it serves (`sign_locustfile`), and `inferload worker` runs only a
locustfile whose signature it checks with its own key (`verify_locustfile`), so a fake master
cannot make a worker run its code. `inferload run --workers N` makes a key for its local workers
when none is set; a run that waits for workers on other machines needs the user's own key, set on
every machine.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from inferload.errors import RunKeyError, UsageError
from inferload.measure.report_auth import (
    RUN_KEY_ENV,
    missing_run_key_message,
    require_run_key,
    run_key_from_environ,
)

__all__ = [
    "RUN_KEY_ENV",
    "LocustfileNotTrusted",
    "generate_run_key",
    "require_run_key",
    "run_key_for_distributed_run",
    "sign_locustfile",
    "verify_locustfile",
]

#: the last line of a signed locustfile: this prefix, then the HMAC-SHA256 (hex) of everything before it
SIGNATURE_PREFIX = "# inferload-signature: hmac-sha256="
_DOMAIN = b"inferload-locustfile-v1\0"  # a locustfile's MAC can never pass for a report's


class LocustfileNotTrusted(UsageError):
    """A locustfile served by a master is not signed with this worker's run key."""


def generate_run_key() -> str:
    return secrets.token_urlsafe(32)


def run_key_for_distributed_run(remote_workers: int, environ: Mapping[str, str]) -> str:
    """`INFERLOAD_RUN_KEY` when set; else a new key when every worker is local (the CLI passes it to
    them); RunKeyError when workers on other machines are expected (they must be given the key)."""
    key = run_key_from_environ(environ)
    if key is not None:
        return key.decode()
    if remote_workers:
        raise RunKeyError(missing_run_key_message("--remote-workers"))
    return generate_run_key()


def _signature(key: bytes, body: str) -> str:
    return hmac.new(key, _DOMAIN + body.encode("utf-8"), hashlib.sha256).hexdigest()


def sign_locustfile(text: str, key: bytes) -> str:
    """`text` with a last line that signs it."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{SIGNATURE_PREFIX}{_signature(key, body)}\n"


def verify_locustfile(text: str, key: bytes) -> str:
    """`text` itself when its last line is a signature of the rest made with `key`; else LocustfileNotTrusted."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(SIGNATURE_PREFIX):
        raise LocustfileNotTrusted("it carries no inferload signature (not a locustfile written by `inferload run`)")
    if not hmac.compare_digest(last[len(SIGNATURE_PREFIX) :], _signature(key, body + "\n")):
        raise LocustfileNotTrusted(f"its signature does not match this machine's {RUN_KEY_ENV} (another run's key, or altered)")
    return text
