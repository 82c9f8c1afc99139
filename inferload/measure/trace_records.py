"""The client's side of the per-request join with Triton's trace: every traced target's request
carries an id, and its send and receive times are kept here (one store per process and target).

Ids are ``<prefix>-<n>``: the prefix is random per process (so workers never collide), ``n``
counts up. Times are ``time.monotonic_ns()``, the clock Triton's trace timestamps use
(``steady_clock``, CLOCK_MONOTONIC on Linux): on one machine they compare directly. Requests sent
during the warm-up are not kept; nor are failed ones. At most ``MAX_RECORDS`` are kept per process
and target (about 40 bytes each); later ones are counted in ``dropped``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

MAX_RECORDS = 2_000_000


@dataclass(frozen=True)
class ClientTiming:
    """One request as the client saw it: its id and when it was sent and answered (monotonic ns)."""

    request_id: str
    sent_ns: int
    received_ns: int

    @property
    def latency_ms(self) -> float:
        return (self.received_ns - self.sent_ns) / 1e6


@dataclass
class ClientTraceRecords:
    """This process's tagged requests of one target."""

    prefix: str = field(default_factory=lambda: os.urandom(4).hex())
    steady_from_ns: int | None = None  # None: not started (nothing kept)
    numbers: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    dropped: int = 0
    _next: int = 0

    def start(self, warmup_s: float) -> None:
        """The run started now: keep requests sent after the warm-up."""
        self.steady_from_ns = time.monotonic_ns() + int(warmup_s * 1e9)

    def next_id(self) -> tuple[int, str]:
        """(number, request id) for the next request."""
        self._next += 1
        return self._next, f"{self.prefix}-{self._next}"

    def add(self, number: int, sent_ns: int, received_ns: int) -> None:
        """A request that succeeded (kept when sent after the warm-up)."""
        if self.steady_from_ns is None or sent_ns < self.steady_from_ns:
            return
        if len(self.numbers) >= MAX_RECORDS:
            self.dropped += 1
            return
        self.numbers.append(number)
        self.sent.append(sent_ns)
        self.received.append(received_ns)

    def timings(self) -> dict[str, ClientTiming]:
        """The kept requests by request id."""
        return {
            f"{self.prefix}-{n}": ClientTiming(f"{self.prefix}-{n}", s, r)
            for n, s, r in zip(self.numbers, self.sent, self.received, strict=True)
        }

    def as_message(self) -> dict[str, Any]:
        """The records as plain lists (what a worker sends to the master)."""
        return {
            "prefix": self.prefix,
            "numbers": self.numbers,
            "sent": self.sent,
            "received": self.received,
            "dropped": self.dropped,
        }

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> ClientTraceRecords:
        records = cls(prefix=str(data["prefix"]), steady_from_ns=0)
        records.numbers = [int(n) for n in data["numbers"]]
        records.sent = [int(n) for n in data["sent"]]
        records.received = [int(n) for n in data["received"]]
        records.dropped = int(data.get("dropped", 0))
        return records


def merge_message(into: ClientTraceRecords, data: dict[str, Any]) -> None:
    """Add a worker's drained records (``as_message``) to the master's store of that worker.

    A worker drains its store at every report, so its own cap never binds there: the master's store
    of each worker and target keeps at most ``MAX_RECORDS`` too and counts the rest in ``dropped``.
    """
    into.prefix = str(data["prefix"])
    room = max(0, MAX_RECORDS - len(into.numbers))
    numbers = data["numbers"]
    into.numbers.extend(int(n) for n in numbers[:room])
    into.sent.extend(int(n) for n in data["sent"][:room])
    into.received.extend(int(n) for n in data["received"][:room])
    into.dropped += int(data.get("dropped", 0)) + max(0, len(numbers) - room)


def drain(records: ClientTraceRecords) -> dict[str, Any] | None:
    """The records kept since the last drain, as a message (None: nothing new); the store is emptied."""
    if not records.numbers and not records.dropped:
        return None
    message = records.as_message()
    records.numbers, records.sent, records.received, records.dropped = [], [], [], 0
    return message
