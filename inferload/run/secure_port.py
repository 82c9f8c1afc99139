"""The master's worker port, authenticated and encrypted: ZeroMQ CURVE with keys derived from the run key.

Locust's master takes every message anyone sends to its port: a malformed heartbeat ended its
listener, forged `stats` and `exception` messages changed the exit code. Here the transport itself
is authenticated, so a peer without the run key gets nothing processed: its connection never
completes the CURVE handshake (libzmq refuses it before any frame is delivered), and the master
sends it nothing either (no spawn message with the options, no locustfile).

Why CURVE rather than an HMAC on each Locust message: CURVE authenticates the connection before a
single frame reaches Python, so no frame of a keyless peer is even parsed; it encrypts everything
(the spawn message's options, the locustfile with the scenario and its payload files, the
reports), which an HMAC would not; and it has its own session keys per connection, so a recorded
conversation cannot be replayed, where signed messages would need a replay counter of their own.
The cost is one key exchange per connection and symmetric encryption of each frame (reports come
every ~3 s, heartbeats every second). pyzmq's libzmq has CURVE built in (`zmq.has("curve")`).

Keys: the master's secret key is HMAC-SHA256(run key, "inferload master v1") and the workers'
secret key HMAC-SHA256(run key, "inferload worker v1"), each z85-encoded; the public keys follow
(`zmq.curve_public`). Every worker has the same key pair: holding the run key is what a worker is.
On the master a ZAP handler (ZeroMQ's authentication protocol, a greenlet on the socket's context)
admits CURVE clients with the workers' public key only; a client must also know the master's public
key, which is never sent.

Locust makes its sockets through `locust.rpc.zmqrpc.Server` and `Client` (`locust.runners` calls
`rpc.Server(host, port)` and `rpc.Client(host, port, identity)` through that module when it makes
its runner and when it reconnects). `secure_master_port(key)` puts subclasses in their place that
set CURVE before they bind or connect; the locustfile calls it (`run.locust_classes`) before Locust makes
its runner. tests/unit/test_secure_port.py fails when Locust moves them.

A peer that holds the key is trusted, but a malformed message from one (a bug) must not end the
master's listener: `message_problem` checks what Locust reads of each message before Locust
handles it, and such a message is dropped and logged (once per worker). The master can also hold
back a worker's message (`CurveServer.admit`, used by `run.workers` for a worker that comes back
after it was declared missing).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import socket as stdlib_socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack
import zmq
from zmq.utils import z85

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"inferload"
#: Locust messages whose `data` Locust's master reads without checking it: what it reads
NUMBER = (int, float)


@dataclass(frozen=True)
class CurveKeys:
    """z85-encoded CURVE keys of one run key: the master's pair and the workers' pair."""

    master_public: bytes
    master_secret: bytes
    worker_public: bytes
    worker_secret: bytes


def derive_keys(run_key: bytes) -> CurveKeys:
    def secret(role: bytes) -> bytes:
        return z85.encode(hmac.new(run_key, b"inferload " + role + b" v1", hashlib.sha256).digest())

    master, worker = secret(b"master"), secret(b"worker")
    return CurveKeys(zmq.curve_public(master), master, zmq.curve_public(worker), worker)


def client_options(sock: Any, keys: CurveKeys) -> None:
    """A socket that connects to a master of this run key (set before `connect`)."""
    sock.curve_serverkey = keys.master_public
    sock.curve_publickey = keys.worker_public
    sock.curve_secretkey = keys.worker_secret


def message_problem(message: Any) -> str | None:
    """What is wrong with a worker's message for Locust's master to handle it, or None.

    Only the parts Locust's `MasterRunner.handle_message` (and its report listeners) index without a
    check: a message of another type passes (Locust logs unknown types itself)."""
    kind, data, node = getattr(message, "type", None), getattr(message, "data", None), getattr(message, "node_id", None)
    if not isinstance(kind, str) or not isinstance(node, str):
        return "not a Locust message (type and node id must be strings)"
    if kind == "client_ready" and not (data is None or data == -1 or isinstance(data, str)):
        return "client_ready: expected a version string"
    if kind == "heartbeat":
        if not isinstance(data, dict) or not isinstance(data.get("state"), str):
            return "heartbeat: expected data with a state"
        if not isinstance(data.get("current_cpu_usage"), NUMBER) or not isinstance(data.get("current_memory_usage", 0), NUMBER):
            return "heartbeat: expected numbers for current_cpu_usage and current_memory_usage"
    if kind == "stats":
        if not isinstance(data, dict):
            return "stats: expected a report"
        shapes = (("stats", list), ("errors", dict), ("stats_total", dict), ("user_classes_count", dict))
        for key, kind_of in shapes:
            if not isinstance(data.get(key), kind_of):
                return f"stats: expected {key} to be a {kind_of.__name__}"
        if not isinstance(data.get("user_count"), int):
            return "stats: expected user_count to be a whole number"
    if kind == "spawning_complete" and not (isinstance(data, dict) and isinstance(data.get("user_classes_count"), dict)):
        return "spawning_complete: expected user_classes_count"
    if kind == "exception" and not (
        isinstance(data, dict) and isinstance(data.get("msg"), str) and isinstance(data.get("traceback"), str)
    ):
        return "exception: expected msg and traceback"
    if kind == "locustfile" and not (isinstance(data, dict) and isinstance(data.get("version"), str)):
        return "locustfile: expected a version"
    if kind == "logs" and not (isinstance(data, dict) and isinstance(data.get("worker_id"), str)):
        return "logs: expected a worker_id"
    return None


class ZapHandler:
    """ZeroMQ's authentication (ZAP, RFC 27) for one context: CURVE clients with `allowed` as their key."""

    def __init__(self, context: Any, allowed: bytes) -> None:
        import gevent

        self.allowed = z85.decode(allowed)
        self.refused = 0
        self.socket = context.socket(zmq.REP)
        self.socket.linger = 0
        self.socket.bind(ZAP_ENDPOINT)
        self.greenlet = gevent.spawn(self._serve)

    def _serve(self) -> None:
        while True:
            try:
                frames = self.socket.recv_multipart()
            except zmq.ZMQError:
                return  # closed
            version, request_id, domain, address, _identity, mechanism = frames[:6]
            credentials = frames[6:]
            ok = mechanism == b"CURVE" and domain == ZAP_DOMAIN and credentials[:1] == [self.allowed]
            if not ok:
                self.refused += 1
                if self.refused <= 20:
                    logger.error(
                        "refused a connection from %s to the master's port: it does not hold this run's key (%s)",
                        address.decode("utf-8", "replace") or "?",
                        mechanism.decode("ascii", "replace"),
                    )
            status = (b"200", b"OK") if ok else (b"400", b"not this run's key")
            self.socket.send_multipart([version, request_id, *status, b"worker" if ok else b"", b""])

    def close(self) -> None:
        self.greenlet.kill(block=False)
        self.socket.close(linger=0)


def _keepalive(sock: Any, host: str, port: int) -> None:
    """What Locust's `BaseSocket` sets on every socket: TCP keep-alive, IPv6 where the host has it."""
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 30)
    if stdlib_socket.has_dualstack_ipv6() and not _ipv4_only(host, port):
        sock.setsockopt(zmq.IPV6, 1)


def _ipv4_only(host: str, port: int) -> bool:
    if host == "*":
        return False
    try:
        return "Family.AF_INET6" not in str(stdlib_socket.getaddrinfo(host, port, proto=stdlib_socket.IPPROTO_TCP))
    except stdlib_socket.gaierror:
        return False


def secure_master_port(run_key: bytes) -> None:
    """From now on, Locust's master and worker sockets in this process speak CURVE with `run_key`'s keys."""
    import zmq.green as green_zmq  # here: the CLI imports this module for `derive_keys` and stays without gevent
    from locust.exception import RPCError, RPCReceiveError
    from locust.rpc import Message, zmqrpc

    keys = derive_keys(run_key)
    if getattr(zmqrpc.Server, "curve_keys", None) == keys:
        return

    class CurveServer(zmqrpc.Server):
        """Locust's master socket with CURVE (and a ZAP handler) set before it binds."""

        curve_keys: ClassVar[CurveKeys] = keys
        #: may hold back a well-formed message (True: hand it to Locust); see `run.workers`
        admit: Callable[[str, Any], bool] | None = None

        def __init__(self, host: str, port: int) -> None:
            self.context = green_zmq.Context()
            self.zap = ZapHandler(self.context, keys.worker_public)
            self.socket = self.context.socket(zmq.ROUTER)
            _keepalive(self.socket, host, port)
            self.socket.curve_server = True
            self.socket.curve_secretkey = keys.master_secret
            self.socket.curve_publickey = keys.master_public
            self.socket.zap_domain = ZAP_DOMAIN
            self.malformed: set[str] = set()
            try:
                if port == 0:
                    self.port = self.socket.bind_to_random_port(f"tcp://{host}")
                else:
                    self.socket.bind(f"tcp://{host}:{port}")
                    self.port = port
            except zmq.ZMQError as error:
                self.zap.close()
                raise RPCError(f"Socket bind failure: {error}") from error

        def recv_from_client(self) -> tuple[str, Any]:
            """The next message Locust may handle: malformed ones are dropped (logged once per worker)."""
            while True:
                try:
                    frames = self.socket.recv_multipart()
                except zmq.ZMQError as error:
                    raise RPCError("ZMQ network broken") from error
                if len(frames) != 2:
                    continue
                address = frames[0].decode("utf-8", "replace")
                try:
                    message = Message.unserialize(frames[1])
                except (ValueError, TypeError, msgpack.UnpackException) as error:
                    raise RPCReceiveError("ZMQ interrupted or corrupted message", addr=address) from error
                problem = message_problem(message)
                if problem is not None:
                    if address not in self.malformed:
                        self.malformed.add(address)
                        logger.error("dropped a malformed message from worker %r: %s (logged once per worker)", address, problem)
                    continue
                if self.admit is None or self.admit(address, message):
                    return address, message

        def close(self, linger: int | None = None) -> None:
            self.zap.close()
            super().close(linger=linger)

    class CurveClient(zmqrpc.Client):
        """Locust's worker socket with CURVE set before it connects."""

        curve_keys: ClassVar[CurveKeys] = keys

        def __init__(self, host: str, port: int, identity: str) -> None:
            self.context = green_zmq.Context()
            self.socket = self.context.socket(zmq.DEALER)
            _keepalive(self.socket, host, port)
            self.socket.setsockopt(zmq.IDENTITY, identity.encode())
            client_options(self.socket, keys)
            self.socket.connect(f"tcp://{host}:{port}")

    zmqrpc.Server = CurveServer  # type: ignore[misc]
    zmqrpc.Client = CurveClient  # type: ignore[misc]
