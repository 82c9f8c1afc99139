"""gRPC calls made by a call process outside gevent (``INFERLOAD_GRPC_CALLS=process``; issue 14).

A prototype, opt-in: each Locust process starts one call process per Triton gRPC user class
(`inferload.users.call_child`: a `grpc.aio` client on asyncio, no gevent), through
`inferload/run/die_with_parent.py`, so it gets SIGTERM if the Locust process dies, and it exits
on its own when its socket closes. A user's greenlet writes (call id, serialized request) into a
buffer and waits on a `gevent.hub.Waiter`; one hub callback per loop turn writes every buffered
request in one write; the replies come back over the same socketpair, and ONE io watcher in the
hub reads them in batches and switches to each waiting greenlet. No gRPC code runs in the Locust
process for these calls.

Latency stays the greenlet's clock (`InferenceUser.infer`'s ``perf_counter`` around ``send``),
as on the other engines: it includes the hand-off both ways. The call process's own send and
receive ``monotonic_ns`` come back with each reply (`last_wire_ns`), closer to the wire.

Failures: a gRPC status comes back as a `CallProcessError` (a `grpc.RpcError` with ``code()``,
``details()``), so the user turns it into tritonclient's exception as for its own calls. If the
call process ends, every call in flight and every later call fails at once with a message that
names it and its exit code; nothing waits forever on a dead process. TLS targets are not
supported by the prototype (insecure channels only).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gevent
import grpc
from gevent.hub import Waiter

from inferload.users.call_frames import REPLY, REQUEST

#: how long `close` waits for the call process to exit before killing it
CLOSE_GRACE_S = 5.0
READ_SIZE = 1 << 20
EXIT_POLL_S = 0.01
_DIE_WITH_PARENT = Path(__file__).resolve().parents[1] / "run" / "die_with_parent.py"
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class CallProcessError(grpc.RpcError):
    """A failed call, as gRPC reports one (``code()``, ``details()``, ``debug_error_string()``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def debug_error_string(self) -> str:
        return self._details


class CallProcess:
    """One call process and its socket; ``caller(request_bytes)`` returns the response bytes."""

    def __init__(
        self,
        address: str,
        timeout_s: float | None,
        metadata: Sequence[tuple[str, str]] | None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        mine, theirs = socket.socketpair()
        self._fd = mine.detach()
        child_fd = theirs.detach()
        os.set_blocking(self._fd, False)
        config = {"address": address, "timeout": timeout_s, "metadata": list(metadata or ()), "options": list(options)}
        command = [sys.executable, "-m", "inferload.users.call_child", str(child_fd), json.dumps(config)]
        if sys.platform.startswith("linux"):
            command = [sys.executable, "-I", "-S", str(_DIE_WITH_PARENT), str(os.getpid()), *command]
        # posix_spawn (vfork + exec, no fork handlers), not gevent's Popen (a Python fork): forking a
        # process whose gRPC threads run made gRPC's poller fail (epoll_wait: Bad file descriptor)
        os.set_inheritable(child_fd, True)
        try:
            self.pid = os.posix_spawn(
                command[0], command, dict(os.environ), file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
            )
        finally:
            os.close(child_fd)
        self.returncode: int | None = None
        self.users = 0
        self.calls = 0
        self.batches_read = 0
        self.writes = 0
        self.last_wire_ns = 0
        self._next_id = 0
        self._pending: dict[int, Waiter] = {}
        self._out = bytearray()
        self._in = bytearray()
        self._flush_scheduled = False
        self._ended: str | None = None
        loop = gevent.get_hub().loop
        self._loop = loop
        self._reader = loop.io(self._fd, 1)
        self._reader.start(self._read)
        self._writer = loop.io(self._fd, 2)

    def __call__(self, request: bytes) -> bytes:
        if self._ended is not None:
            raise CallProcessError(grpc.StatusCode.INTERNAL, self._ended)
        self._next_id = call_id = (self._next_id + 1) & 0xFFFFFFFF
        waiter = Waiter()
        self._pending[call_id] = waiter
        self._out += REQUEST.pack(call_id, len(request))
        self._out += request
        if not self._flush_scheduled and not self._writer.active:
            self._flush_scheduled = True
            self._loop.run_callback(self._flush)
        self.calls += 1
        try:
            code, payload = waiter.get()
        finally:
            self._pending.pop(call_id, None)
        if code == 0:
            return bytes(payload)
        if code < 0:  # the call process ended
            raise CallProcessError(grpc.StatusCode.INTERNAL, payload)
        return self._raise(code, payload)

    @staticmethod
    def _raise(code: int, payload: Any) -> bytes:
        raise CallProcessError(_CODES.get(code, grpc.StatusCode.UNKNOWN), bytes(payload).decode("utf-8", "replace"))

    def _flush(self) -> None:
        """In the hub, once per loop turn: write every buffered request."""
        self._flush_scheduled = False
        if not self._out or self._ended is not None:
            return
        try:
            written = os.write(self._fd, self._out)
        except BlockingIOError:
            written = 0
        except OSError as exc:
            self._end(self._exit_message(f"cannot write to it: {exc.strerror}"))
            return
        self.writes += 1
        del self._out[:written]
        if self._out and not self._writer.active:
            self._writer.start(self._flush)
        elif not self._out and self._writer.active:
            self._writer.stop()

    def _read(self) -> None:
        """In the hub: every reply that has arrived, each handed to its waiting greenlet."""
        try:
            data = os.read(self._fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            data, error = b"", exc.strerror
        else:
            error = None
        if not data:
            self._end(self._exit_message(error))
            return
        buf = self._in
        buf += data
        at, size = 0, REPLY.size
        self.batches_read += 1
        pending = self._pending
        while len(buf) - at >= size:
            call_id, code, sent_ns, received_ns, length = REPLY.unpack_from(buf, at)
            end = at + size + length
            if end > len(buf):
                break
            payload = bytes(buf[at + size : end])
            at = end
            self.last_wire_ns = received_ns - sent_ns
            waiter = pending.pop(call_id, None)
            if waiter is not None:  # None: its greenlet was killed and stopped waiting
                waiter.switch((code, payload))
        del buf[:at]

    def _exit_message(self, error: str | None) -> str:
        if self._ended is not None:
            return self._ended
        returncode = self.poll()  # no waiting: this runs in the hub
        how = f"exit code {returncode}" if returncode is not None else "its socket closed"
        if error:
            how += f", {error}"
        return f"gRPC call process (pid {self.pid}) ended ({how}); calls in flight failed"

    def _end(self, message: str) -> None:
        """Fail every call in flight and every later one with `message`."""
        if self._ended is None:
            self._ended = message
        self._reader.stop()
        self._writer.stop()
        waiting, self._pending = self._pending, {}
        for waiter in waiting.values():  # from the hub, whoever calls this
            self._loop.run_callback(waiter.switch, (-1, message))

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> int | None:
        """Close the socket (the call process exits on end of file); its exit code, or None if killed."""
        if self._fd < 0:
            return self.returncode
        self._end(f"gRPC call process (pid {self.pid}) closed")
        self._reader.close()
        self._writer.close()
        os.close(self._fd)
        self._fd = -1
        # poll, not wait(): this Popen's wait would block the hub
        returncode = gevent.with_timeout(CLOSE_GRACE_S, self._wait_exit, timeout_value=None)
        if returncode is None:
            os.kill(self.pid, signal.SIGKILL)
            returncode = gevent.with_timeout(CLOSE_GRACE_S, self._wait_exit, timeout_value=None)
            return None
        return int(returncode)

    def _wait_exit(self) -> int:
        while (returncode := self.poll()) is None:
            gevent.sleep(EXIT_POLL_S)
        return returncode

    def poll(self) -> int | None:
        """Its exit code once it has ended (negative: killed by that signal; -1 also when reaped elsewhere)."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class ProcessInfer:
    """A user's ``ModelInfer`` through the shared call process: ``infer(request, timeout=..., metadata=...)``.

    The timeout and metadata are the call process's (set when it started, from the target)."""

    def __init__(self, process: CallProcess, parse: Callable[[bytes], Any]) -> None:
        self.process, self._parse = process, parse
        process.users += 1

    def __call__(self, request: bytes, **_fixed: Any) -> Any:
        return self._parse(self.process(request))

    def close(self) -> None:
        """This user is done; the last one closes the call process."""
        process = self.process
        process.users -= 1
        if process.users <= 0:
            process.close()
