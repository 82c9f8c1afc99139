"""The per-request join: Triton's trace of a request next to the client's times for it (pure).

A Triton trace (``--trace-config triton,...``, level TIMESTAMPS) gives per request: the frontend's
receive and send (``HTTP_RECV_START``/``HTTP_SEND_END``, ``GRPC_WAITREAD_END``/``GRPC_SEND_END``),
``REQUEST_START``/``REQUEST_END``, ``QUEUE_START``, ``COMPUTE_START``, ``COMPUTE_INPUT_END``,
``COMPUTE_OUTPUT_START``, ``COMPUTE_END``, and the request's id. Joined on that id with the
client's latency, one request splits into parts that add up to its latency:

    network_client_ms  client latency - the server's span (frontend receive .. send): the wire both
                       ways, the client library and the load generator's own scheduling
    frontend_ms        the server's span - queue - compute (HTTP/gRPC handling, request set-up)
    queue_ms           QUEUE_START .. COMPUTE_START (the scheduler's queue, dynamic batching's wait)
    compute_input_ms   COMPUTE_START .. COMPUTE_INPUT_END
    compute_infer_ms   COMPUTE_INPUT_END .. COMPUTE_OUTPUT_START
    compute_output_ms  COMPUTE_OUTPUT_START .. COMPUTE_END (cut at the span's end: a backend may send
                       the response before it closes the execution)

Only durations measured on one clock are subtracted, so the join needs no common clock between the
client and the server machine. The batch a request ran in: requests of a model with the same
compute span ran in one execution, so its size is the number of traced requests sharing it
(exact when every request is traced, a lower bound when only a share is).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The client's side of the per-request join with Triton's trace: every traced target's request
# carries an id, and its send and receive times are kept here (one store per process and target).
#
# Ids are ``<prefix>-<n>``: the prefix is random per process (so workers never collide), ``n``
# counts up. Times are ``time.monotonic_ns()``, the clock Triton's trace timestamps use
# (``steady_clock``, CLOCK_MONOTONIC on Linux): on one machine they compare directly. Requests sent
# during the warm-up are not kept; nor are failed ones. At most ``MAX_RECORDS`` are kept per process
# and target (about 40 bytes each); later ones are counted in ``dropped``.
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


FRONTEND_START = ("HTTP_RECV_START", "GRPC_WAITREAD_END", "REQUEST_START")
FRONTEND_END = ("HTTP_SEND_END", "GRPC_SEND_END", "REQUEST_END")
#: the end of Triton's request span for the per-request residual: the response's send start (the last,
#: a streamed request's final response), else REQUEST_END. REQUEST_END and *_SEND_END can come after
#: the client already has the answer: the Python backend ends its execution after sending the
#: response, and a busy server notes the send's end late (measured here: 1 ms after the client's receive)
RESPONSE_LEFT = ("GRPC_SEND_START", "HTTP_SEND_START", "REQUEST_END")
COMPONENTS = ("network_client_ms", "frontend_ms", "queue_ms", "compute_input_ms", "compute_infer_ms", "compute_output_ms")


@dataclass(frozen=True)
class ServerTrace:
    """One traced request as Triton wrote it: its model, its request id and its timestamps (ns)."""

    model: str
    request_id: str
    timestamps: Mapping[str, int]

    def first(self, names: tuple[str, ...]) -> int | None:
        for name in names:
            if name in self.timestamps:
                return self.timestamps[name]
        return None


@dataclass(frozen=True)
class JoinedRequest:
    """One request's latency split into parts (milliseconds) and the size of the batch it ran in."""

    request_id: str
    latency_ms: float
    network_client_ms: float
    frontend_ms: float
    queue_ms: float
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float
    batch_size: int
    #: Triton's own span of the request: REQUEST_START .. its (final) response's send start, or
    #: REQUEST_END without one (the frontend span without either); see `RESPONSE_LEFT`
    request_ms: float = 0.0

    @property
    def residual_ms(self) -> float:
        """What the server did not see of this request: client latency - Triton's request span
        (`request_ms`): the client, the wire both ways, the frontend before REQUEST_START and the
        response's delivery; the per-request form of the summary's ``residual_ms``. Not clamped."""
        return self.latency_ms - self.request_ms

    @property
    def compute_ms(self) -> float:
        return self.compute_input_ms + self.compute_infer_ms + self.compute_output_ms

    def component(self, name: str) -> float:
        return float(getattr(self, name))


_NEEDED = ("QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")


def complete(trace: ServerTrace) -> bool:
    """The trace has every timestamp the split needs (a failed or cancelled request has not)."""
    return (
        bool(trace.request_id)
        and all(name in trace.timestamps for name in _NEEDED)
        and trace.first(FRONTEND_START) is not None
        and trace.first(FRONTEND_END) is not None
    )


def _ms(ns: int) -> float:
    return max(0, ns) / 1e6


def split(trace: ServerTrace, client: ClientTiming, batch_size: int) -> JoinedRequest:
    """One complete trace and the client's times for the same request, as parts of its latency."""
    ts = trace.timestamps
    start = trace.first(FRONTEND_START)
    end = trace.first(FRONTEND_END)
    assert start is not None and end is not None  # complete(trace)
    span = max(0, end - start)
    queue = max(0, ts["COMPUTE_START"] - ts["QUEUE_START"])
    compute_input = max(0, ts["COMPUTE_INPUT_END"] - ts["COMPUTE_START"])
    compute_infer = max(0, ts["COMPUTE_OUTPUT_START"] - ts["COMPUTE_INPUT_END"])
    compute_output = max(0, min(ts["COMPUTE_END"], end) - ts["COMPUTE_OUTPUT_START"])
    inside = queue + compute_input + compute_infer + compute_output
    if inside > span:  # timestamps out of order by a few ns: the span is at least what it holds
        span = inside
    latency_ns = client.received_ns - client.sent_ns
    request_start, request_end = ts.get("REQUEST_START"), trace.first(RESPONSE_LEFT)
    request_span = request_end - request_start if request_start is not None and request_end is not None else span
    return JoinedRequest(
        request_id=trace.request_id,
        latency_ms=_ms(latency_ns),
        network_client_ms=_ms(latency_ns - span),
        frontend_ms=_ms(span - inside),
        queue_ms=_ms(queue),
        compute_input_ms=_ms(compute_input),
        compute_infer_ms=_ms(compute_infer),
        compute_output_ms=_ms(compute_output),
        batch_size=batch_size,
        request_ms=max(0, request_span) / 1e6,
    )


@dataclass(frozen=True)
class JoinResult:
    """What the join found: the joined requests, and what did not join (for the summary)."""

    joined: tuple[JoinedRequest, ...]
    server_traces: int  # complete traces of the model read from the trace file
    unmatched_traces: int  # complete traces whose id no client kept (warm-up, another client, failed)


def join(traces: Iterable[ServerTrace], clients: Mapping[str, ClientTiming], model: str) -> JoinResult:
    """Join ``model``'s complete traces with the client's timings on the request id."""
    usable = [t for t in traces if t.model == model and complete(t)]
    sizes = Counter((t.timestamps["COMPUTE_START"], t.timestamps["COMPUTE_END"]) for t in usable)
    joined = []
    for trace in usable:
        client = clients.get(trace.request_id)
        if client is None:
            continue
        size = sizes[(trace.timestamps["COMPUTE_START"], trace.timestamps["COMPUTE_END"])]
        joined.append(split(trace, client, size))
    return JoinResult(tuple(joined), len(usable), len(usable) - len(joined))
