"""Signed worker reports: a worker's figures reach the master only when signed with the run key.

Anyone who reaches a Locust master's port can send it `stats` messages, and Locust hands every one
to the `worker_report` listeners. So each inferload payload a worker adds to a report is sealed:

    {"v": 1, "body": msgpack([kind, worker id, sequence number, payload]), "mac": HMAC-SHA256(key, body)}

keyed by the run key (`INFERLOAD_RUN_KEY`: the same secret on the master and on every worker;
`inferload run --workers N` makes one for its local workers). The signed bytes are the encoding
itself, so nothing has to be re-encoded the same way on the other side. The master opens a seal
only when its MAC is right (checked before anything in the body is decoded), its kind is the one
the listener reads (request-log rows cannot pass as latency figures), its worker id is the id
Locust received the message from, and its sequence number is above that worker's last one (a
recorded report sent again is refused). Everything else is refused, counted (`rejected`) and
logged once per worker id. Cost: one msgpack encoding and one HMAC per report (every ~3 s).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from inferload.errors import RunKeyError

logger = logging.getLogger(__name__)

RUN_KEY_ENV = "INFERLOAD_RUN_KEY"
#: a shorter key is refused: it could be guessed
MIN_RUN_KEY_CHARS = 16
SEAL_VERSION = 1
#: worker ids whose refused reports are logged (one line each); past that, one line says the rest are not
MAX_LOGGED_WORKERS = 20


def run_key_from_environ(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The run key from `INFERLOAD_RUN_KEY` (None when unset or empty); RunKeyError when too short."""
    value = (os.environ if environ is None else environ).get(RUN_KEY_ENV, "").strip()
    if not value:
        return None
    if len(value) < MIN_RUN_KEY_CHARS:
        raise RunKeyError(
            f"{RUN_KEY_ENV} is {len(value)} characters long; expected at least {MIN_RUN_KEY_CHARS} "
            "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return value.encode()


def missing_run_key_message(role: str) -> str:
    return (
        f"{role} needs a run key: set {RUN_KEY_ENV} to the same secret on the master and on every worker "
        "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'); "
        "`inferload run --workers N` makes one for its local workers"
    )


def require_run_key(role: str, environ: Mapping[str, str] | None = None) -> bytes:
    """The run key, or RunKeyError saying how to set one."""
    key = run_key_from_environ(environ)
    if key is None:
        raise RunKeyError(missing_run_key_message(role))
    return key


def mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()


@dataclass
class ReportSealer:
    """A worker's side: seals each payload of one kind with the run key and the next sequence number."""

    key: bytes
    kind: str
    _sequence: int = 0

    def seal(self, worker: str, payload: Any) -> dict[str, Any]:
        self._sequence += 1
        body = msgpack.packb([self.kind, worker, self._sequence, payload], use_bin_type=True)
        return {"v": SEAL_VERSION, "body": body, "mac": mac(self.key, body)}


@dataclass
class ReportOpener:
    """The master's side: the payload of a well-sealed report of one kind, or None (refused, counted)."""

    key: bytes | None  # None: nothing is accepted (a master without a run key)
    kind: str
    #: reports refused so far (unsigned, wrongly signed, sent again, malformed)
    rejected: int = 0
    _last_sequence: dict[str, int] = field(default_factory=dict)
    _logged: set[str] = field(default_factory=set)
    _log_full: bool = False

    def open(self, worker: str, sealed: Any) -> Any | None:
        payload, problem = self._open(worker, sealed)
        if problem is not None:
            self.rejected += 1
            self._log_once(worker, problem)
            return None
        return payload

    def _open(self, worker: str, sealed: Any) -> tuple[Any, str | None]:
        if not isinstance(sealed, dict) or sealed.get("v") != SEAL_VERSION:
            return None, "not signed"
        body, signature = sealed.get("body"), sealed.get("mac")
        if not isinstance(body, bytes) or not isinstance(signature, bytes):
            return None, "not signed"
        if self.key is None:
            return None, f"this master has no run key ({RUN_KEY_ENV})"
        if not hmac.compare_digest(mac(self.key, body), signature):
            return None, f"wrong signature (a different {RUN_KEY_ENV}, or forged)"
        try:
            kind, sender, sequence, payload = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None, "malformed"
        if kind != self.kind:
            return None, f"a {kind!r} payload where {self.kind!r} was expected"
        if sender != worker:
            return None, f"signed by worker {sender!r}, sent as {worker!r} (replayed)"
        if not isinstance(sequence, int) or sequence <= self._last_sequence.get(worker, 0):
            return None, "sent before (replayed)"
        self._last_sequence[worker] = sequence
        return payload, None

    def _log_once(self, worker: str, problem: str) -> None:
        if worker in self._logged or self._log_full:
            return
        if len(self._logged) >= MAX_LOGGED_WORKERS:
            self._log_full = True
            logger.error("refused reports from more than %d worker ids: the others are not logged", MAX_LOGGED_WORKERS)
            return
        self._logged.add(worker)
        logger.error(
            "refused a report (%s) from worker %r: %s; its figures are left out of the results "
            "(logged once per worker; the count is in rejected_reports)",
            self.kind,
            worker,
            problem,
        )


@dataclass
class SignedReports:
    """One kind of inferload payload in Locust's reports: sealed on a worker, opened on the master.

    `for_role` takes the run key from the environment: a worker or a master without one is refused
    (RunKeyError), a local run needs none.
    """

    sealer: ReportSealer | None
    opener: ReportOpener

    @classmethod
    def for_role(cls, kind: str, role: str | None, environ: Mapping[str, str] | None = None) -> SignedReports:
        """`role`: "worker", "master", or None (a local run: no reports)."""
        if role is None:
            return cls(None, ReportOpener(None, kind))
        key = require_run_key(f"a Locust {role} of an inferload run", environ)
        return cls(ReportSealer(key, kind) if role == "worker" else None, ReportOpener(key, kind))

    @property
    def rejected(self) -> int:
        return self.opener.rejected

    def seal(self, worker: str, payload: Any) -> dict[str, Any]:
        if self.sealer is None:
            raise RunKeyError(missing_run_key_message("a Locust worker of an inferload run"))
        return self.sealer.seal(worker, payload)

    def open(self, worker: str, sealed: Any) -> Any | None:
        return self.opener.open(worker, sealed)
