"""A background writer: callers hand it points and never wait; it writes them in batches.

`submit()` only encodes and appends to a bounded buffer under a lock (no I/O). A writer thread
takes up to `batch_size` lines every `flush_interval_s` and writes them. A failed write that may
succeed later (connection refused, timeout, HTTP 429/5xx) is retried with exponential backoff
while new points keep arriving; past `max_buffer_points` the oldest buffered points are dropped
and counted. A batch the server rejects for good (HTTP 4xx) is dropped and counted.

It uses `threading`: a real thread in the collector, and a greenlet under Locust, whose gevent
monkey patching turns `threading.Thread`, `Event` and `Lock` into their gevent versions (sockets
are patched too, so a write there waits only its own greenlet).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

from inferload.observe.sink.errors import SinkError
from inferload.observe.sink.line_protocol import Point, encode_points

logger = logging.getLogger(__name__)


class Writer(Protocol):
    """Writes one line protocol body, or raises SinkError."""

    def write(self, body: bytes, timeout_s: float | None = None) -> None: ...

    def close(self) -> None: ...


@dataclass
class SinkStats:
    """What happened to the points handed to a BackgroundWriter."""

    points_written: int = 0
    points_dropped: int = 0  # buffer full, rejected by the server, or still unsent at close
    points_pending: int = 0
    write_errors: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class BackgroundWriter:
    """Bounded, batched, retrying writes on a background thread (or greenlet)."""

    def __init__(
        self,
        writer: Writer,
        batch_size: int = 5000,
        flush_interval_s: float = 0.5,
        max_buffer_points: int = 100_000,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        name: str = "influx-writer",
    ) -> None:
        self._writer = writer
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._max_buffer = max_buffer_points
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._name = name
        self._buffer: deque[str] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats = SinkStats()
        self._backoff_s = 0.0
        self._logged_failure = False

    # -- the callers' side ------------------------------------------------------------------
    def submit(self, points: Iterable[Point]) -> None:
        """Queue points for writing; never blocks on I/O."""
        lines = encode_points(points)
        if not lines:
            return
        with self._lock:
            self._buffer.extend(lines)
            overflow = len(self._buffer) - self._max_buffer
            if overflow > 0:
                for _ in range(overflow):
                    self._buffer.popleft()
                self._stats.points_dropped += overflow

    def stats(self) -> SinkStats:
        with self._lock:
            snapshot = SinkStats(**asdict(self._stats))
            snapshot.points_pending = len(self._buffer)
        return snapshot

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 5.0) -> SinkStats:
        """Stop the background loop, try to write what is left within `timeout_s`, count the rest
        as dropped, and return the final figures."""
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self._thread = None
        while time.monotonic() < deadline and self._write_one_batch(deadline - time.monotonic()):
            pass
        with self._lock:
            left = len(self._buffer)
            self._buffer.clear()
            self._stats.points_dropped += left
        if left:
            logger.warning("InfluxDB: %d points still unsent at close were dropped", left)
        self._writer.close()
        return self.stats()

    # -- the background side ----------------------------------------------------------------
    def flush_once(self, timeout_s: float | None = None) -> bool:
        """Write one batch now (the loop's step; tests call it directly). True when the batch was
        written or nothing was pending, False when the write failed."""
        return self._write_one_batch(timeout_s) or not self._buffer

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._backoff_s or self._flush_interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                break
            while self._buffer and not self._stopping.is_set():
                if not self._write_one_batch(None):
                    break
                if len(self._buffer) < self._batch_size:
                    break

    def _write_one_batch(self, timeout_s: float | None) -> bool:
        with self._lock:
            if not self._buffer:
                return False
            count = min(self._batch_size, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(count)]
        body = ("\n".join(batch) + "\n").encode("utf-8")
        try:
            self._writer.write(body, timeout_s=timeout_s if timeout_s and timeout_s > 0 else None)
        except SinkError as exc:
            self._on_failure(batch, exc)
            return False
        with self._lock:
            self._stats.points_written += count
        if self._logged_failure:
            logger.info("InfluxDB: writing again")
            self._logged_failure = False
        self._backoff_s = 0.0
        return True

    def _on_failure(self, batch: list[str], exc: SinkError) -> None:
        with self._lock:
            self._stats.write_errors += 1
            self._stats.last_error = str(exc)
            if exc.retryable:
                room = self._max_buffer - len(self._buffer)
                keep = batch[-room:] if room > 0 else []
                self._buffer.extendleft(reversed(keep))
                self._stats.points_dropped += len(batch) - len(keep)
            else:
                self._stats.points_dropped += len(batch)
        self._backoff_s = min(self._backoff_max_s, (self._backoff_s * 2) or self._backoff_initial_s)
        if not self._logged_failure:
            what = "retrying with backoff" if exc.retryable else f"{len(batch)} points dropped"
            logger.warning("InfluxDB write failed (%s): %s", what, exc)
            self._logged_failure = True
