"""`inferload worker`'s first step: download the master's locustfile and check its signature.

Locust's own `locust -f - --worker` downloads the locustfile from the master and runs it, whoever
the master is (and cannot reach a master whose port speaks CURVE: `inferload.run.secure_port`). `inferload worker` asks the master for it the same way (Locust's `locustfile`
message over ZeroMQ: msgpack of `(type, data, node id)`), checks that it is signed with this
machine's run key (`inferload.run.run_key.verify_locustfile`) and only then writes it to a private
folder, for `locust -f <that file> --worker`. Plain pyzmq and msgpack, without importing Locust:
the CLI process is not monkey-patched by gevent.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import zmq

from inferload.errors import InferloadError
from inferload.run.run_key import RUN_KEY_ENV, LocustfileNotTrusted, verify_locustfile
from inferload.run.secure_port import client_options, derive_keys

#: as long as Locust's own worker waits for its master (CONNECT_TIMEOUT x CONNECT_RETRY_COUNT)
FETCH_TIMEOUT_S = 300.0
ASK_EVERY_S = 1.0
WAITING_NOTE_EVERY_S = 30.0
#: a bigger answer is dropped by ZeroMQ itself (the scenario's payload files travel inside the locustfile)
MAX_ANSWER_BYTES = 512 * 1024 * 1024
LOCUSTFILE_NAME = "locustfile.py"


class LocustfileFetchError(InferloadError):
    """The master did not serve one locustfile in time."""


def fetch_locustfile(master_host: str, master_port: int, key: bytes, timeout_s: float = FETCH_TIMEOUT_S) -> str:
    """The text of the one locustfile the master at `master_host:master_port` serves (over CURVE with
    `key`'s keys: a master without this run key never completes the connection, `inferload.run.secure_port`)."""
    client_id = f"{socket.gethostname()}_inferload_fetch_{uuid.uuid4().hex}"
    request = msgpack.packb(("locustfile", {"version": importlib.metadata.version("locust")}, client_id))
    where = f"{master_host}:{master_port}"
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.IDENTITY, client_id.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_ANSWER_BYTES)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # no request queued before the master is there: one answer, not a pile
        client_options(sock, derive_keys(key))
        sock.connect(f"tcp://{master_host}:{master_port}")
        started = time.monotonic()
        next_note = started + WAITING_NOTE_EVERY_S
        while (now := time.monotonic()) < started + timeout_s:
            if now >= next_note:
                sys.stderr.write(f"inferload worker: waiting for the master at {where} to send its locustfile ...\n")
                next_note = now + WAITING_NOTE_EVERY_S
            with contextlib.suppress(zmq.Again):  # not connected yet: ask again in a moment
                sock.send(request, zmq.NOBLOCK)
            if sock.poll(int(ASK_EVERY_S * 1000), zmq.POLLIN):
                return _locustfile_text(sock.recv(), where)
    finally:
        sock.close()
        context.term()
    raise LocustfileFetchError(
        f"the master at {where} sent no locustfile within {timeout_s:g} s: is it running, reachable, and started with this"
        f" machine's {RUN_KEY_ENV}? (a master with another key is never connected to)"
    )


def _locustfile_text(frame: bytes, where: str) -> str:
    try:
        kind, data, _ = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise LocustfileFetchError(f"the master at {where} sent something that is not a Locust message ({error})") from None
    if kind != "locustfile" or not isinstance(data, dict):
        raise LocustfileFetchError(f"the master at {where} answered {kind!r}, not a locustfile")
    if "error" in data:
        raise LocustfileFetchError(f"the master at {where} could not send its locustfile: {data['error']}")
    files: Any = data.get("locustfiles")
    if not (
        isinstance(files, list) and len(files) == 1 and isinstance(files[0], dict) and isinstance(files[0].get("contents"), str)
    ):
        raise LocustfileFetchError(
            f"the master at {where} did not send exactly one locustfile (is it an `inferload run` master?)"
        )
    return str(files[0]["contents"])


def fetch_verified_locustfile(
    master_host: str, master_port: int, key: bytes, folder: Path, timeout_s: float = FETCH_TIMEOUT_S
) -> Path:
    """Download the master's locustfile, check its signature with `key`, write it into `folder`."""
    text = fetch_locustfile(master_host, master_port, key, timeout_s)
    try:
        verify_locustfile(text, key)
    except LocustfileNotTrusted as error:
        raise LocustfileNotTrusted(
            f"refusing to run the locustfile the master at {master_host}:{master_port} served: {error}"
        ) from None
    path = folder / LOCUSTFILE_NAME
    path.write_text(text)
    return path
