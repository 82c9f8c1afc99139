"""The call process of ``INFERLOAD_GRPC_CALLS=process``: a `grpc.aio` client with no gevent.

    python -m inferload.users.call_child FD CONFIG_JSON

started by `inferload.users.call_process` (one per Locust process and user class), through
`inferload/run/die_with_parent.py` so it gets SIGTERM when its Locust process dies. FD is its end
of a socketpair; CONFIG_JSON names the address, the call timeout and the gRPC metadata.

Frames both ways, little-endian (`call_process.REQUEST`/`REPLY`): a request is (call id, length)
and the serialized ModelInferRequest; a reply is (call id, gRPC status code, send and receive
`monotonic_ns` taken here around the call, length) and the serialized response (status 0) or the
error details (UTF-8). Replies that complete in one event-loop turn leave in one write.

It imports only the standard library, grpc and `call_frames` (never Locust or gevent: `grpc.aio`
hangs in a gevent-patched process). It exits when its socket reaches end of file (its Locust
process closed it or died).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from typing import Any

import grpc

from inferload.users.call_frames import REPLY, REQUEST, UNKNOWN_CODE

MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
READ_SIZE = 1 << 20


class _Replies:
    """Replies waiting to be written; one write per loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop, self._sock = loop, sock
        self._out = bytearray()
        self._scheduled = False
        self._writer = False

    def add(self, call_id: int, code: int, sent_ns: int, received_ns: int, payload: bytes) -> None:
        self._out += REPLY.pack(call_id, code, sent_ns, received_ns, len(payload))
        self._out += payload
        if not self._scheduled and not self._writer:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        try:
            sent = self._sock.send(self._out) if self._out else 0
        except BlockingIOError:
            sent = 0
        except OSError:  # the Locust process is gone: the reader sees EOF and ends the process
            self._out.clear()
            sent = 0
        del self._out[:sent]
        if self._out and not self._writer:
            self._writer = True
            self._loop.add_writer(self._sock.fileno(), self.flush)
        elif not self._out and self._writer:
            self._writer = False
            self._loop.remove_writer(self._sock.fileno())


async def serve(fd: int, config: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    replies = _Replies(loop, sock)
    timeout = config.get("timeout")
    metadata = tuple(tuple(pair) for pair in config.get("metadata") or ()) or None
    options = [tuple(pair) for pair in config.get("options") or ()]
    tasks: set[asyncio.Task[None]] = set()
    async with grpc.aio.insecure_channel(config["address"], options=options) as channel:
        infer = channel.unary_unary(MODEL_INFER_METHOD, request_serializer=None, response_deserializer=None)

        async def one(call_id: int, body: bytes) -> None:
            sent = time.monotonic_ns()
            try:
                response = await infer(body, timeout=timeout, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                replies.add(call_id, exc.code().value[0], sent, time.monotonic_ns(), (exc.details() or "").encode())
                return
            except Exception as exc:  # sent back as a failure of this call, never lost
                replies.add(call_id, UNKNOWN_CODE, sent, time.monotonic_ns(), f"{type(exc).__name__}: {exc}".encode())
                return
            replies.add(call_id, 0, sent, time.monotonic_ns(), response)

        pending = bytearray()
        while True:
            data = await loop.sock_recv(sock, READ_SIZE)
            if not data:
                break
            pending += data
            at = 0
            while len(pending) - at >= REQUEST.size:
                call_id, length = REQUEST.unpack_from(pending, at)
                end = at + REQUEST.size + length
                if end > len(pending):
                    break
                task = loop.create_task(one(call_id, bytes(pending[at + REQUEST.size : end])))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                at = end
            del pending[:at]
        for task in list(tasks):
            task.cancel()
    sock.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m inferload.users.call_child FD CONFIG_JSON\n")
        return 2
    asyncio.run(serve(int(argv[0]), json.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
