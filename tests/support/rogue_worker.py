"""A rogue client of a Locust master, and a fake master: what anyone who reaches the port can do.

`RogueWorker` speaks Locust's worker protocol (ZeroMQ DEALER, `locust.rpc.Message` in msgpack):
it says `client_ready`, answers heartbeats, reads what the master sends it (the spawn message
with the master's parsed options) and sends `stats` reports and other messages of its own making.
Without a run key it connects as anyone could (no CURVE); with one it holds the key (a trusted
peer gone bad); with `master_key_only` it knows the master's public key but not the workers' keys.
`FakeMaster` answers a worker's `locustfile` request with whatever text it is given, over CURVE
with a run key's keys when given one. Plain pyzmq sockets with timeouts (no gevent), so a test
drives them step by step.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import zmq
from locust import __version__ as locust_version
from locust.rpc import Message

from inferload.run.secure_port import client_options, derive_keys

#: what Locust's own stats listener reads from every report (an empty report of no requests)
EMPTY_LOCUST_STATS: dict[str, Any] = {
    "stats": [],
    "errors": {},
    "stats_total": {
        "name": "Aggregated",
        "method": "",
        "last_request_timestamp": None,
        "start_time": time.time(),
        "num_requests": 0,
        "num_none_requests": 0,
        "num_failures": 0,
        "total_response_time": 0,
        "max_response_time": 0,
        "min_response_time": None,
        "total_content_length": 0,
        "response_times": {},
        "num_reqs_per_sec": {},
        "num_fail_per_sec": {},
    },
    "user_count": 0,
    "user_classes_count": {},
}


class RogueWorker:
    """A client that says it is a worker; `received` keeps every message the master sent it."""

    def __init__(self, host: str, port: int, run_key: str | None = None, master_key_only: bool = False) -> None:
        self.client_id = f"rogue_{uuid.uuid4().hex}"
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, self.client_id.encode())
        self.socket.setsockopt(zmq.LINGER, 0)
        if run_key is not None:
            keys = derive_keys(run_key.encode())
            client_options(self.socket, keys)
            if master_key_only:  # the master's public key, but a key pair of its own
                self.socket.curve_publickey, self.socket.curve_secretkey = zmq.curve_keypair()
        self.socket.connect(f"tcp://{host}:{port}")
        self.received: list[Message] = []
        self._last_heartbeat = 0.0

    def send(self, kind: str, data: Any) -> None:
        """Queue a message (never blocking: a peer the master does not admit has no connection to send on)."""
        with contextlib.suppress(zmq.Again):
            self.socket.send(Message(kind, data, self.client_id).serialize(), zmq.NOBLOCK)

    def say_ready(self) -> None:
        self.send("client_ready", locust_version)

    def send_report(self, extra: dict[str, Any]) -> None:
        """A `stats` message: an empty Locust report plus `extra` (inferload's payloads)."""
        self.send("stats", {**EMPTY_LOCUST_STATS, **extra})

    def pump(self, seconds: float) -> None:
        """Read what the master sends for `seconds`, sending a heartbeat every second meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if time.monotonic() - self._last_heartbeat >= 1.0:
                state = "running" if any(m.type == "spawn" for m in self.received) else "ready"  # "ready": counted as joined
                self.send("heartbeat", {"state": state, "current_cpu_usage": 1.0, "current_memory_usage": 1})
                self._last_heartbeat = time.monotonic()
            if self.socket.poll(int(min(left, 0.2) * 1000), zmq.POLLIN):
                self.received.append(Message.unserialize(self.socket.recv()))

    def silence(self, seconds: float) -> list[str]:
        """Pump for `seconds`; the types of what the master sent meanwhile (nothing, to a peer it does not admit)."""
        self.pump(seconds)
        return [message.type for message in self.received]

    def wait_for(self, kind: str, timeout_s: float) -> Message:
        """The first message of `kind` from the master (pumping meanwhile)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in self.received:
                if message.type == kind:
                    return message
            self.pump(0.2)
        raise AssertionError(f"the master sent no {kind!r} within {timeout_s:g} s; got {[m.type for m in self.received]}")

    def close(self) -> None:
        self.socket.close()
        self._context.term()


class FakeMaster:
    """Answers `locustfile` requests on a port with `contents` (and nothing else)."""

    def __init__(self, contents: str, run_key: str | None = None) -> None:
        self.contents = contents
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if run_key is not None:  # a master of that run key (any worker key is taken: no ZAP here)
            keys = derive_keys(run_key.encode())
            self.socket.curve_server = True
            self.socket.curve_secretkey = keys.master_secret
            self.socket.curve_publickey = keys.master_public
        self.port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.served = 0

    def serve(self, timeout_s: float, until: Callable[[], bool] = lambda: False) -> None:
        """Answer every request that comes within `timeout_s`, or until `until()` is true."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0 and not until():
            if self.socket.poll(int(min(left, 0.2) * 1000), zmq.POLLIN):
                identity, frame = self.socket.recv_multipart()
                request = Message.unserialize(frame)
                if request.type == "locustfile":
                    answer = {"locustfiles": [{"filename": "locustfile.py", "contents": self.contents}]}
                    self.socket.send_multipart([identity, Message("locustfile", answer, request.node_id).serialize()])
                    self.served += 1

    def close(self) -> None:
        self.socket.close()
        self._context.term()
