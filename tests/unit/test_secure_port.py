"""The master's port over CURVE, with Locust's own socket classes: the names inferload replaces are
where it expects them (this test fails when Locust moves them), a worker of the run key talks to
the master, a peer without it gets nothing through, and the malformed messages that ended Locust's
listener are dropped before Locust sees them.
"""

from __future__ import annotations

from collections.abc import Iterator

import gevent
import locust.runners
import pytest
import zmq
import zmq.green as green_zmq
from locust.rpc import Message, zmqrpc

from inferload.run.secure_port import derive_keys, message_problem, secure_master_port

KEY = b"unit-test-run-key-0123456789abcdef"


@pytest.fixture
def curve_sockets() -> Iterator[None]:
    """Locust's socket classes replaced for the test, put back after it."""
    server, client = zmqrpc.Server, zmqrpc.Client
    secure_master_port(KEY)
    yield
    zmqrpc.Server, zmqrpc.Client = server, client  # type: ignore[misc]


def test_locust_makes_its_sockets_through_the_names_inferload_replaces():
    assert locust.runners.rpc is zmqrpc  # runners call rpc.Server / rpc.Client at call time
    assert callable(zmqrpc.Server) and callable(zmqrpc.Client)
    for method in ("recv_from_client", "send_to_client", "close"):
        assert hasattr(zmqrpc.Server, method)


def test_keys_are_the_run_keys_own():
    assert derive_keys(KEY) == derive_keys(KEY)
    assert derive_keys(KEY).master_public != derive_keys(b"another-run-key-0123456789").master_public
    keys = derive_keys(KEY)
    assert keys.master_public == zmq.curve_public(keys.master_secret) and keys.master_public != keys.worker_public


def test_a_worker_of_the_run_key_is_heard_and_a_peer_without_it_is_not(curve_sockets):
    server = zmqrpc.Server("127.0.0.1", 0)
    client = zmqrpc.Client("127.0.0.1", server.port, "worker-1")
    stranger = green_zmq.Context().socket(zmq.DEALER)
    stranger.setsockopt(zmq.IDENTITY, b"stranger")
    stranger.linger = 0
    stranger.connect(f"tcp://127.0.0.1:{server.port}")
    try:
        stranger.send(Message("heartbeat", None, "stranger").serialize())  # would have ended Locust's listener
        client.send(Message("client_ready", locust.__version__, "worker-1"))
        with gevent.Timeout(10):
            address, message = server.recv_from_client()
        assert (address, message.type) == ("worker-1", "client_ready")
        server.send_to_client(Message("ack", {"index": 0}, "worker-1"))
        with gevent.Timeout(10):
            assert client.recv().type == "ack"
        with gevent.Timeout(1, False):  # nothing of the stranger's ever arrives
            server.recv_from_client()
            pytest.fail("a message of a peer without the run key was received")
    finally:
        stranger.close()
        client.close(linger=0)
        server.close(linger=0)


def test_a_malformed_message_of_a_worker_is_dropped_and_the_next_one_is_received(curve_sockets):
    server = zmqrpc.Server("127.0.0.1", 0)
    client = zmqrpc.Client("127.0.0.1", server.port, "worker-1")
    try:
        client.send(Message("heartbeat", None, "worker-1"))
        client.send(Message("stats", {"stats": "nope"}, "worker-1"))
        client.send(Message("heartbeat", {"state": "running", "current_cpu_usage": 1.0}, "worker-1"))
        with gevent.Timeout(10):
            _, message = server.recv_from_client()
        assert message.type == "heartbeat" and message.data["state"] == "running"
    finally:
        client.close(linger=0)
        server.close(linger=0)


@pytest.mark.parametrize(
    ("kind", "data", "problem"),
    [
        ("heartbeat", None, "heartbeat: expected data with a state"),
        ("heartbeat", {"state": "running", "current_cpu_usage": "hot"}, "heartbeat: expected numbers"),
        ("client_ready", 7, "client_ready: expected a version string"),
        ("stats", {"stats": [], "errors": {}, "stats_total": {}, "user_classes_count": {}}, "user_count"),
        ("spawning_complete", {}, "spawning_complete: expected user_classes_count"),
        ("exception", {"msg": "m"}, "exception: expected msg and traceback"),
        ("locustfile", None, "locustfile: expected a version"),
    ],
)
def test_what_locusts_master_would_index_unchecked_is_checked_first(kind, data, problem):
    found = message_problem(Message(kind, data, "w"))
    assert found is not None and problem in found
    assert message_problem(Message("heartbeat", {"state": "ready", "current_cpu_usage": 0}, "w")) is None
    assert message_problem(Message("spawning", None, "w")) is None
