"""The gRPC call process (``INFERLOAD_GRPC_CALLS=process``) without a server: a call to a port where
nothing listens comes back as gRPC's UNAVAILABLE; a killed call process fails the calls after it
with a message naming it (no hang); closing it leaves no process behind."""

from __future__ import annotations

import os
import signal

import gevent
import grpc
import psutil
import pytest

from inferload.users.call_frames import REPLY, REQUEST
from inferload.users.call_process import CallProcess, CallProcessError
from inferload.users.native_calls import CALLS_ENV, calls_mode
from tests.support.ports import free_port

DEADLINE_S = 60.0


def test_process_is_a_calls_mode() -> None:
    assert calls_mode({CALLS_ENV: "process"}) == "process"


def test_frames_round_trip() -> None:
    assert REQUEST.unpack(REQUEST.pack(7, 12)) == (7, 12)
    assert REPLY.unpack(REPLY.pack(7, 14, 1, 2, 3)) == (7, 14, 1, 2, 3)


def _call(process: CallProcess, body: bytes) -> CallProcessError:
    with pytest.raises(CallProcessError) as caught:
        gevent.with_timeout(DEADLINE_S, process, body)
    return caught.value


def test_failures_come_back_as_grpc_errors_and_a_dead_call_process_never_hangs() -> None:
    process = CallProcess(f"127.0.0.1:{free_port()}", 2.0, None)
    try:
        refused = _call(process, b"")
        assert isinstance(refused, grpc.RpcError) and refused.code() == grpc.StatusCode.UNAVAILABLE, refused

        os.kill(process.pid, signal.SIGKILL)
        dead = _call(process, b"")
        assert dead.code() == grpc.StatusCode.INTERNAL
        assert f"gRPC call process (pid {process.pid}) ended" in dead.details()
        assert f"gRPC call process (pid {process.pid})" in _call(process, b"").details()  # and every later call
    finally:
        process.close()
    assert process.closed
    assert not psutil.pid_exists(process.pid) or psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE


def test_close_ends_the_call_process() -> None:
    process = CallProcess(f"127.0.0.1:{free_port()}", 2.0, None)
    assert process.close() == 0  # it exits by itself at end of file
    assert not psutil.pid_exists(process.pid)
