"""A worker's last messages reach the master even when its process ends at once: ZeroMQ sends from a
thread of its own, and a fork of the warm Locust ends with ``os._exit`` right after Locust queued
the worker's last report and its ``quit``. `send_last_messages` (on Locust's ``quit`` event) sends
what the socket holds first. A ROUTER socket stands for the master here."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import zmq

#: a worker that queues its last reports (20 MB in all: more than the socket sends at once) and its
#: quit, sends them, then ends as a fork of the warm Locust does
WORKER = """
import os, sys
from locust.rpc import Message, zmqrpc
from inferload.run.workers import send_last_messages

class Runner:  # what send_last_messages reads of a WorkerRunner: its client
    pass

runner = Runner()
runner.client = zmqrpc.Client("127.0.0.1", int(sys.argv[1]), "worker-1")
payload = b"x" * 100_000
for index in range(200):
    runner.client.send(Message("stats", {"index": index, "payload": payload}, "worker-1"))
runner.client.send(Message("quit", None, "worker-1"))
send_last_messages(runner)
os._exit(0)
"""


def test_a_worker_that_ends_with_os_exit_still_delivers_its_last_reports_and_its_quit():
    context = zmq.Context()
    master = context.socket(zmq.ROUTER)
    master.linger = 0
    port = master.bind_to_random_port("tcp://127.0.0.1")
    try:
        worker = subprocess.run([sys.executable, "-c", WORKER, str(port)], capture_output=True, text=True, timeout=60)
        assert worker.returncode == 0, worker.stderr
        received: list[tuple[str, object]] = []
        while master.poll(5000):  # everything the worker sent is here already: a short wait ends the loop
            _, frame = master.recv_multipart()
            kind, data, _node = msgpack.unpackb(frame, raw=False)
            received.append((kind, data["index"] if kind == "stats" else None))
            if kind == "quit":
                break
    finally:
        master.close()
        context.term()
    assert received == [("stats", index) for index in range(200)] + [("quit", None)]
