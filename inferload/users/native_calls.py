"""Blocking gRPC calls made on native threads, their completions handed to gevent in batches.

gRPC under gevent (`grpc.experimental.gevent.init_gevent()`) hands every completion-queue wait of
every call to gevent's threadpool and back to the hub: one threadpool task, one async watcher made
and fired, and two thread wake-ups per call (docs/benchmarks.md, "What the profiles show"). Here
each simulated user owns one native thread (not a greenlet: made with the unpatched
``_thread.start_new_thread``) that makes the user's calls, blocking, outside the hub: a blocking
gRPC call made off the hub's thread waits on its completion queue directly (gevent's threadpool
runs a task at once when asked from a thread that is not its hub's). The user's greenlet hands
the thread its call through a native queue and waits on a `gevent.hub.Waiter`; the thread puts the
outcome on one deque per user class and wakes the hub through ONE async watcher, fired only
when no wake-up is already pending, so completions that land together are delivered in one
loop turn.

Each user's thread calls through its own multicallable, made on the user's own channel: gRPC's
channel state guards itself with `threading` locks, which gevent has patched, and such a lock
contended between two native threads can deadlock (measured: two native threads sharing one
channel hung), so no channel is ever used by two native threads at once.

The greenlet sees exactly what a blocking call would: the response, or the `grpc.RpcError` raised.
If the greenlet is killed while its call is in flight (a Locust user stopped), the call finishes
on its thread (bounded by its timeout) and its outcome is dropped.
"""

from __future__ import annotations

import collections
from _queue import SimpleQueue  # the C queue: native locks (gevent patches queue.SimpleQueue, not _queue)
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent import monkey
from gevent.hub import Waiter

#: ``INFERLOAD_GRPC_CALLS``: ``gevent`` (default: each call blocks its greenlet through gRPC's own
#: gevent integration) or ``native`` (this module; opt-in: item 8 of `make bench` measured no CPU
#: gain over the gevent path on a shared 2-core machine, and a lower maximum req/s per process)
CALLS_ENV = "INFERLOAD_GRPC_CALLS"
CALLS_MODES = ("gevent", "native", "process")  # process: `inferload.users.call_process`
#: how long `NativeCaller.close` waits for its thread past the call timeout
CLOSE_GRACE_S = 2.0

_Outcome = tuple[bool, Any]  # (True, response) or (False, the exception raised)
_STOP = ("stop",)  # the request of the job that ends a caller's thread


def calls_mode(environ: dict[str, str] | Any) -> str:
    """The gRPC call path chosen by ``INFERLOAD_GRPC_CALLS`` (``gevent`` unless set to ``native`` or ``process``)."""
    value = str(environ.get(CALLS_ENV, "gevent") or "gevent").strip().lower()
    if value not in CALLS_MODES:
        raise ValueError(f"{CALLS_ENV}={value!r}: expected one of {', '.join(CALLS_MODES)}")
    return value


@dataclass
class Completions:
    """Outcomes of native-thread calls, delivered to their waiting greenlets by the hub in batches."""

    done: collections.deque[tuple[Waiter, _Outcome]] = field(default_factory=collections.deque)
    users: int = 0
    batches: int = 0  # loop turns that delivered at least one outcome
    delivered: int = 0
    _watcher: Any = None
    _signalled: bool = False

    def attach(self) -> None:
        """A user starts using native calls (the watcher runs while any does)."""
        self.users += 1
        if self._watcher is None:
            self._watcher = gevent.get_hub().loop.async_()
            self._watcher.start(self._deliver)

    def detach(self) -> None:
        self.users -= 1
        if self.users <= 0 and self._watcher is not None:
            self._deliver()
            self._watcher.stop()
            self._watcher.close()
            self._watcher = None
            self.users = 0

    def post(self, waiter: Waiter, outcome: _Outcome) -> None:
        """From a native thread: queue the outcome; wake the hub unless a wake-up is pending."""
        self.done.append((waiter, outcome))  # append before reading the flag: see _deliver
        if not self._signalled:
            self._signalled = True
            watcher = self._watcher
            if watcher is not None:
                watcher.send()

    def _deliver(self) -> None:
        """In the hub: hand every queued outcome to its greenlet."""
        self._signalled = False  # reset before draining: a post after this line signals again
        done = self.done
        if done:
            self.batches += 1
        while done:
            waiter, outcome = done.popleft()
            self.delivered += 1
            waiter.switch(outcome)  # a killed greenlet's waiter keeps the value and nobody reads it


class NativeCaller:
    """One user's calls on one native thread: ``caller(request, timeout=..., metadata=...)``."""

    def __init__(self, call: Callable[..., Any], completions: Completions) -> None:
        self._call = call
        self._completions = completions
        self._jobs: SimpleQueue[tuple[Waiter, Any, dict[str, Any]]] = SimpleQueue()
        self._open = True
        completions.attach()
        start_new_thread = monkey.get_original("_thread", "start_new_thread")
        start_new_thread(self._run, ())

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        if not self._open:
            raise RuntimeError("native gRPC caller used after close()")
        waiter = Waiter()
        self._jobs.put((waiter, request, kwargs))
        ok, value = waiter.get()
        if ok:
            return value
        raise value

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop the thread once its call (if any) is done; True when it stopped in time."""
        if not self._open:
            return True
        self._open = False
        waiter = Waiter()
        self._jobs.put((waiter, _STOP, {}))  # the stop job: the thread answers it and exits
        try:
            stopped = gevent.with_timeout((timeout_s or 0.0) + CLOSE_GRACE_S, waiter.get, timeout_value=None) is not None
        finally:
            self._completions.detach()
        return stopped

    def _run(self) -> None:
        jobs, call, post = self._jobs, self._call, self._completions.post
        while True:
            waiter, request, kwargs = jobs.get()
            if request is _STOP:
                post(waiter, (True, "stopped"))
                return
            try:
                outcome: _Outcome = (True, call(request, **kwargs))
            except BaseException as exc:  # handed to the caller, who raises it
                outcome = (False, exc)
            post(waiter, outcome)
