"""A fake server on loopback that answers every request with one scripted fault (HTTP/1.1; one HTTP/2 fault).

A fake, named so: no real inference server can be made to answer 20,000-deep JSON, an endless body
or one byte a second, and these are what the instrument must survive. Each connection is served on
a thread of its own until the client hangs up; the server stops with its context.

Faults (``fault=``):
- ``deep``: HTTP 500 whose JSON body is ``[[[…]]]`` ``depth`` deep
- ``deep-ok``: HTTP 200 with the same body
- ``endless``: HTTP 200, a chunked body that never ends
- ``huge-length``: HTTP 200 declaring a 2 GB Content-Length, then bytes until the client goes
- ``drip``: HTTP 200 declaring ``drip_bytes`` bytes, sent one every ``drip_every_s``
- ``bad-chunk``: HTTP 200, a chunked body whose second chunk's size line is not hexadecimal
- ``json``: HTTP 200 with the JSON document ``body`` (JSON of the wrong types, to every request)
- ``goaway``: HTTP/2: to a client's preface, an empty SETTINGS frame and GOAWAY (no error, last stream 0),
  then the connection closes (``connections`` counts them)
- ``big-event``: HTTP 200, an OpenAI chat stream whose second event is one chunk of ``BIG_EVENT_BYTES``
  (a million tiny choices), then ``[DONE]``
"""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

FAULTS = (
    "deep",
    "deep-ok",
    "endless",
    "huge-length",
    "drip",
    "bad-chunk",
    "close",
    "cut",
    "continue-flood",
    "header-flood",
    "json",
    "goaway",
    "big-event",
)
#: the size of the ``big-event`` fault's one large event's data
BIG_EVENT_BYTES = 24 * 1024 * 1024


@functools.cache
def _big_event() -> bytes:
    """The ``big-event`` fault's whole body (made once, on first use)."""
    choice = b'{"index":0,"delta":{"content":"a"}},'
    return (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
        + b'data: {"choices":['
        + choice * (BIG_EVENT_BYTES // len(choice))
        + b'{"index":0}]}\n\ndata: [DONE]\n\n'
    )


@dataclass
class HostileServer:
    address: str
    #: requests whose head was read (every connection may carry several)
    requests: int = 0
    #: connections accepted
    connections: int = 0
    #: when each was accepted (``time.monotonic()``: one clock for every process of the machine)
    accepted_at: list[float] = field(default_factory=list)


def _read_head(conn: socket.socket) -> bool:
    """Reads one request's head and its Content-Length body; False when the client is gone."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        rest += chunk
    return True


def _answer(conn: socket.socket, fault: str, depth: int, drip_bytes: int, drip_every_s: float, document: bytes) -> None:
    if fault in ("deep", "deep-ok", "json"):
        body = document if fault == "json" else b"[" * depth + b"]" * depth
        status = b"500 Internal Server Error" if fault == "deep" else b"200 OK"
        conn.sendall(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        return
    if fault == "endless":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % 65536 + b"[" * 65536 + b"\r\n"
        while True:
            conn.sendall(chunk)
    if fault == "huge-length":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2000000000\r\n\r\n")
        block = b"0" * 65536
        while True:
            conn.sendall(block)
    if fault == "big-event":
        body = _big_event()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body))
        conn.sendall(body)
        return
    if fault == "bad-chunk":
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n[]\r\nzz\r\nnot a chunk\r\n0\r\n\r\n"
        )
        return
    if fault == "continue-flood":  # interim answers without end, never the answer itself
        while True:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
    if fault == "header-flood":  # a status line, then header lines without end
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            conn.sendall(b"X-Flood: yes\r\n" * 256)
    if fault == "close":  # the request read, then the connection closed with no answer
        return
    if fault == "cut":  # the answer stops a tenth of the way through its Content-Length
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[1, 2, 3]\n")
        return
    if fault == "drip":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % drip_bytes)
        for _ in range(drip_bytes):
            conn.sendall(b" ")
            time.sleep(drip_every_s)
        return
    raise ValueError(f"fault {fault!r}: expected one of {FAULTS}")


def _goaway(conn: socket.socket) -> None:
    """To the client's first bytes (its preface), SETTINGS and GOAWAY; then the connection closes.
    Frame heads are 9 bytes: length (3), type (4 SETTINGS, 7 GOAWAY), flags, stream 0."""
    if conn.recv(65536):
        conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + bytes(8))


@contextmanager
def hostile_server(
    fault: str, depth: int = 20_000, drip_bytes: int = 1000, drip_every_s: float = 0.5, body: object = None
) -> Iterator[HostileServer]:
    """The server, listening on 127.0.0.1 (a free port) while the context lasts."""
    if fault not in FAULTS:
        raise ValueError(f"fault {fault!r}: expected one of {FAULTS}")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    server = HostileServer(address=f"127.0.0.1:{listener.getsockname()[1]}")
    stopping = threading.Event()
    document = body if isinstance(body, bytes) else json.dumps(body).encode()  # bytes: sent as they are

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                if fault == "goaway":
                    _goaway(conn)
                    return
                while not stopping.is_set() and _read_head(conn):
                    server.requests += 1
                    _answer(conn, fault, depth, drip_bytes, drip_every_s, document)
                    if fault in ("close", "cut"):
                        return  # the connection closes with the answer (or without one)
            except OSError:
                pass  # the client hung up: what these faults end with

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server.connections += 1
            server.accepted_at.append(time.monotonic())
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield server
    finally:
        stopping.set()
        acceptor.join(timeout=2)
        listener.close()
