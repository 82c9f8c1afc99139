"""``self.client`` of every inferload user, and the default task that uses it.

An `InferenceClient` (one per user, made with the user) sends one of the target's pre-encoded
requests per `infer()` call (the next pick, or the request index given), times it, and reports
it through Locust's request event: request type the protocol's (``gRPC``, ``HTTP``, ``REST``),
name the target's, context ``{"target": name}`` (and a streamed request's `StreamTiming`, an
open-loop arrival's send lag), failures as inferload's request errors
(`inferload.users.failures`). It returns what it measured as an `InferResult` and never raises
for a failed call: the failure is in the result and in Locust's statistics, as a failed request of
Locust's own HTTP client is.

`inference_task` is the default task of every inferload user, and it is built on the same client:
a closed loop (the next call as soon as the last one answered, with a pause after refused
connections: `RefusedBackoff`), or, on a scenario's open-loop shape, the sender of the arrivals
its scheduler queues (latency counted from each arrival's intended send time). A user class that
declares tasks of its own runs only those (`InferenceUser.__init_subclass__`); Locust takes a
function in ``tasks``, so ``tasks = {inference_task: 3, my_task: 1}`` keeps the default one next to
them.

On a native slot (the user's class has an ``engine``: `inferload.users.engine`) the default task
hands the slot its whole loop, and `infer()` makes its one call through `NativeEngine.call` (the
engine sends and times it; this client reports it as above). That branch runs only once the
native extension has an ``Engine``; until then every user takes the Python transport.

`ArrivalQueue` is where an open-loop target's arrivals wait for a free sender: the run's scheduler
(`inferload.run.traffic`) offers them, the senders take them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
from gevent.queue import Queue

from inferload.errors import ConnectionRefused, SequenceRefused
from inferload.traffic.arrivals import Arrival
from inferload.users.failures import classify_exception

if TYPE_CHECKING:
    from inferload.users.base import InferenceUser
    from inferload.users.engine import NativeSlot
import os
from collections.abc import Mapping

# The test-only receive-time shift: the one place that names it (docs/calibration.md, "The test hook").
#
# ``INFERLOAD_TEST_RECEIVE_SHIFT_US`` (whole microseconds) makes the client wrong by a known amount:
# every receive time the client records is that much later, in the Python transport
# (`inferload.users.client`, read once per client) and in the native engine (`receive_shift_ns` in
# ``native/src/engine/clock.rs``, read once per process). A calibration run with it must report
# every latency figure that much too high: the test that shows the calibration can see an error.
# Never set it outside tests.
RECEIVE_SHIFT_ENV = "INFERLOAD_TEST_RECEIVE_SHIFT_US"


def receive_shift_us(environ: Mapping[str, str] | None = None) -> int:
    """The shift in whole µs (0 when the variable is absent, empty, negative or not a whole number)."""
    text = (os.environ if environ is None else environ).get(RECEIVE_SHIFT_ENV, "").strip()
    return int(text) if text.isdigit() else 0


@dataclass(frozen=True)
class InferResult:
    """One inference call as `InferenceClient.infer` measured and reported it."""

    #: the request's latency as reported to Locust, ms (open loop: from the arrival's intended send time)
    latency_ms: float
    #: bytes of the answer's outputs (0 for a failed call)
    response_length: int
    #: the failure as reported to Locust (an `inferload.errors.RequestError`); None: a success
    error: BaseException | None = None
    #: which of the target's distinct requests was sent (None: a protocol without pre-encoded requests)
    request_index: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class RefusedBackoff:
    """A closed-loop user's pause after refused connections: exponential, reset by any other outcome."""

    first_s: float = 0.01
    max_s: float = 1.0
    delay_s: float = 0.0

    def after(self, exception: BaseException | None) -> float:
        """The pause before the next call, given how the last one ended."""
        if isinstance(exception, (ConnectionRefused, SequenceRefused)):
            self.delay_s = self.first_s if self.delay_s <= 0 else min(self.max_s, self.delay_s * 2)
        else:  # reached the server (a success, its own failure, or a timeout that took its time): no pause
            self.delay_s = 0.0
        return self.delay_s


class InferenceClient:
    """One user's client: ``self.client.infer()`` sends, times and reports one inference call."""

    def __init__(self, user: InferenceUser) -> None:
        self.user = user
        #: test-only (`inferload.users.client`): ms added to every receive time; 0 in real runs
        self.receive_shift_ms = receive_shift_us() / 1000.0

    def infer(self, request_index: int | None = None) -> InferResult:
        """Send the target's next request (or request ``request_index``), report it, return what was measured.

        ``request_index``: one of the target's distinct requests, 0 to ``request_count - 1`` (the
        data-set samples or generated tensors it was encoded from: docs/scenarios.md); None takes
        the next in the target's rotation. A failed call is returned, not raised."""
        if request_index is not None:
            self._check_index(request_index)
        slot = self.user.native_slot
        if slot is not None:
            return self._infer_native(slot, request_index)
        started = time.perf_counter()
        exception, response_length, index = self._call(request_index)
        latency_ms = (time.perf_counter() - started) * 1000.0 + self.receive_shift_ms
        self._report(latency_ms, response_length, exception, None)
        return InferResult(latency_ms, response_length, exception, index)

    @property
    def request_count(self) -> int:
        """How many distinct requests the target has (valid ``request_index`` values: 0 to this - 1)."""
        return self.user.request_pool().size

    def _check_index(self, request_index: int) -> None:
        if isinstance(request_index, bool) or not isinstance(request_index, int):
            raise TypeError(f"request_index: expected an int; got {type(request_index).__name__}")
        count = self.request_count
        if not 0 <= request_index < count:
            raise ValueError(
                f"request_index {request_index}: target {self.user.target.name!r} has {count} distinct "
                f"request{'s' if count != 1 else ''} (0 to {count - 1})"
            )

    def _send_arrival(self, intended: float, request_index: int | None = None) -> InferResult:
        """Open loop (the default task): latency counts from the intended send time, the lag is reported apart."""
        sent = time.time()
        exception, response_length, index = self._call(request_index)
        latency_ms = (time.time() - intended) * 1000.0 + self.receive_shift_ms
        self._report(latency_ms, response_length, exception, (sent - intended) * 1000.0)
        return InferResult(latency_ms, response_length, exception, index)

    def _infer_native(self, slot: NativeSlot, request_index: int | None) -> InferResult:
        """One call on the user's idle native slot (`NativeEngine.call`): the engine sends and times it."""
        index = request_index if request_index is not None else self.user.request_pool().next()[0]
        outcome = slot.engine.call(slot.slot, index)
        self._report(outcome.latency_ms, outcome.response_length, outcome.error, None)
        return InferResult(outcome.latency_ms, outcome.response_length, outcome.error, index)

    def _call(self, request_index: int | None) -> tuple[BaseException | None, int, int | None]:
        """(the failure or None, the answer's length, the request index sent) of one call."""
        user = self.user
        user.wanted_request_index = request_index
        user.sent_request_index = None
        try:
            return None, user.send(), user.sent_request_index
        except Exception as exc:  # every client failure becomes a classified Locust failure
            return classify_exception(exc, user.target.address), 0, user.sent_request_index
        finally:
            user.wanted_request_index = None

    def _report(
        self, latency_ms: float, response_length: int, exception: BaseException | None, send_lag_ms: float | None
    ) -> None:
        user = self.user
        context: dict[str, Any] = {"target": user.target.name}
        if send_lag_ms is not None:
            context["send_lag_ms"] = send_lag_ms
        extra = user.call_context()
        if extra:
            context.update(extra)
        user.environment.events.request.fire(
            request_type=user.request_type,
            name=user.target.name,
            response_time=latency_ms,
            response_length=response_length,
            exception=exception,
            context=context,
        )


def inference_task(user: InferenceUser) -> None:
    """The default task of every inferload user (a function, so that it can go in a class's ``tasks``).

    Native slot: the engine runs the user's whole loop (or makes it an open-loop sender) until the
    user stops. Open loop: the next queued arrival, sent and timed from its intended time. Closed
    loop: one `InferenceClient.infer()`, then a pause when the connection was refused."""
    slot = user.native_slot
    if slot is not None:  # the engine sends, times and records every call of this user
        slot.run_until_released(open_loop=user.arrivals is not None)
        return
    if user.arrivals is not None:
        intended, arrival = user.arrivals.take_arrival()
        index = None if arrival is None else user.request_pool().index_for(arrival.sample, arrival.batch)
        user.client._send_arrival(intended, index)
        return
    result = user.client.infer()
    pause_s = user.refused_backoff.after(result.error)
    if pause_s > 0:
        gevent.sleep(pause_s)


@dataclass
class ArrivalQueue:
    """Arrivals (intended wall-clock send time, the arrival) waiting for a free sender."""

    max_queue: int
    queue: Queue = field(default_factory=Queue)
    idle_senders: int = 0

    def offer(self, intended: float, arrival: Arrival | None = None) -> bool:
        """Queue an arrival; False (unsent) when every sender is busy and the queue is full."""
        if self.queue.qsize() >= self.max_queue + self.idle_senders:
            return False
        self.queue.put((intended, arrival))
        return True

    def take(self) -> float:
        """Block until an arrival is due for this sender; return its intended send time."""
        return self.take_arrival()[0]

    def take_arrival(self) -> tuple[float, Arrival | None]:
        """Block until an arrival is due; (its intended send time, the arrival with its sample and batch)."""
        self.idle_senders += 1
        try:
            queued: tuple[float, Arrival | None] = self.queue.get()
            return queued
        finally:
            self.idle_senders -= 1

    def drain(self) -> list[float]:
        left = []
        while not self.queue.empty():
            left.append(self.queue.get_nowait()[0])
        return left
