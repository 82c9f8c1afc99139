"""The one shape every inferload user class has.

A user class is made per scenario target (`user_class_for(target)`); each simulated user builds
its client in `on_start` (the target's requests are encoded once per process, by its first user:
`request_pool()`), then its task sends one inference call (`send()` picks the next request),
times it and reports it through Locust's request event. Closed loop, a user sends its next call
as soon as the last one answered; open loop (`arrivals` set), it sends the arrivals the
scheduler queues and times each from its intended send time (see `inferload.traffic.scheduler`). Protocol modules implement three
methods: `connect()`, `send() -> response bytes`, `close()`, and the class method `encode_request(data)`
(one request encoded for the wire, called up front for every distinct request).

A refused connection (the server is down) is answered in microseconds, so a closed-loop user
backs off before its next call: 10 ms after the first refusal, doubling up to 1 s, back to none at
the first call that reaches the server. Every attempt is still reported, so the failures count
attempts, and a dead server costs a few attempts per user-second rather than the client's CPU.
Open loop does not back off: its arrivals already bound the attempts to the configured rate, and
a refused arrival is counted failed while the next one is taken at its intended time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gevent
import numpy as np
from locust import User, constant, task

from inferload.errors import ConnectionRefused
from inferload.measure.trace_records import ClientTraceRecords
from inferload.scenario.targets import InputSpec, Target
from inferload.traffic.scheduler import ArrivalQueue
from inferload.users.failures import classify_exception
from inferload.users.request_pool import RequestData, RequestPool, RequestSource
from inferload.users.sequence import SequenceSettings


@dataclass
class RefusedBackoff:
    """A closed-loop user's pause after refused connections: exponential, reset by any other outcome."""

    first_s: float = 0.01
    max_s: float = 1.0
    delay_s: float = 0.0

    def after(self, exception: BaseException | None) -> float:
        """The pause before the next call, given how the last one ended."""
        if isinstance(exception, ConnectionRefused):
            self.delay_s = self.first_s if self.delay_s <= 0 else min(self.max_s, self.delay_s * 2)
        else:  # reached the server (a success, its own failure, or a timeout that took its time): no pause
            self.delay_s = 0.0
        return self.delay_s


class InferenceUser(User):
    """Abstract base: one scenario target, one protocol client per simulated user."""

    abstract = True
    wait_time = constant(0)

    #: the scenario target this class sends to (set on the generated subclass)
    target: ClassVar[Target]
    #: label in Locust's "Type" column
    request_type: ClassVar[str] = "infer"
    #: expected output shapes including the batch dimension, from the model's metadata
    #: when it could be read (name -> shape; -1 matches any size); empty: batch check only
    expected_outputs: ClassVar[dict[str, tuple[int, ...]]] = {}
    #: False for a Triton model with max_batch_size 0: the scenario's shape is then the model's
    #: full shape and the tensor is sent without a batch dimension
    model_batches: ClassVar[bool] = True
    #: open loop: the queue of arrivals this target's users send (None: closed loop)
    arrivals: ClassVar[ArrivalQueue | None] = None
    #: folder that relative payload paths (.npy files) are resolved against
    scenario_dir: ClassVar[Path] = Path(".")
    #: this process's pre-encoded requests of the target, shared by its users (made by the first to start)
    request_pool_of_class: ClassVar[RequestPool[Any] | None] = None
    #: a Triton sequence model's correlation IDs and flags (set at start from the model config;
    #: None: the target's ``sequence`` key, if any, decides; see `inferload.users.sequence`)
    sequence_settings: ClassVar[SequenceSettings | None] = None
    #: a traced Triton target's request ids and client times, this process's (set at start; None: not traced)
    trace_records: ClassVar[ClientTraceRecords | None] = None

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.refused_backoff = RefusedBackoff()

    def on_start(self) -> None:
        self.connect()

    def on_stop(self) -> None:
        self.close()

    @task
    def infer(self) -> None:
        if self.arrivals is not None:
            self._send_arrival(self.arrivals.take())
            return
        started = time.perf_counter()
        exception, response_length = self._call()
        self._report((time.perf_counter() - started) * 1000.0, response_length, exception, None)
        pause_s = self.refused_backoff.after(exception)
        if pause_s > 0:
            gevent.sleep(pause_s)

    def _send_arrival(self, intended: float) -> None:
        """Open loop: latency counts from the intended send time, lag is reported apart."""
        sent = time.time()
        exception, response_length = self._call()
        latency_ms = (time.time() - intended) * 1000.0
        self._report(latency_ms, response_length, exception, (sent - intended) * 1000.0)

    def _call(self) -> tuple[BaseException | None, int]:
        try:
            return None, self.send()
        except Exception as exc:  # every client failure becomes a classified Locust failure
            return classify_exception(exc, self.target.address), 0

    def _report(
        self, latency_ms: float, response_length: int, exception: BaseException | None, send_lag_ms: float | None
    ) -> None:
        context: dict[str, Any] = {"target": self.target.name}
        if send_lag_ms is not None:
            context["send_lag_ms"] = send_lag_ms
        extra = self.call_context()
        if extra:
            context.update(extra)
        self.environment.events.request.fire(
            request_type=self.request_type,
            name=self.target.name,
            response_time=latency_ms,
            response_length=response_length,
            exception=exception,
            context=context,
        )

    def input_arrays(self) -> list[tuple[InputSpec, np.ndarray]]:
        """The first request's arrays, batch dimension included (unless the model does not batch).

        For protocols without ``encode_request``; the others take every request from ``request_pool()``.
        """
        return list(RequestSource(self.target, self.scenario_dir, model_batches=self.model_batches).data(0).arrays)

    def request_pool(self) -> RequestPool[Any]:
        """This process's requests of the target, encoded by ``encode_request`` (made on first use)."""
        cls = type(self)
        pool = cls.__dict__.get("request_pool_of_class")
        if pool is None:
            source = RequestSource(cls.target, cls.scenario_dir, model_batches=cls.model_batches)
            worker_index = int(getattr(self.environment.runner, "worker_index", 0) or 0)
            pool = RequestPool(source, cls.encode_request, worker_index=worker_index)
            cls.request_pool_of_class = pool
        return pool

    def next_request(self) -> tuple[int, Any]:
        """(request index, encoded request) for the next call: a pick, nothing is encoded."""
        return self.request_pool().next()

    @classmethod
    def encode_request(cls, data: RequestData) -> Any:
        """Protocol hook: one request encoded for the wire (called once per distinct request, up front)."""
        raise NotImplementedError

    def call_context(self) -> dict[str, Any] | None:
        """What the last call measured beyond its latency, for the request event's context (a
        streamed request's `StreamTiming`, see `inferload.users.triton_stream`); None: nothing."""
        return None

    # -- protocol hooks -------------------------------------------------------------------
    def connect(self) -> None:
        raise NotImplementedError

    def send(self) -> int:
        """Send one inference call; return the response size in bytes; raise on failure."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def expected_output_shapes(target: Target, metadata: dict[str, Any] | None, max_batch_size: int) -> dict[str, tuple[int, ...]]:
    """Output shapes a response must have, from Triton model metadata (batch dim filled in)."""
    if not metadata:
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    wanted = set(target.outputs) or {o["name"] for o in metadata.get("outputs", [])}
    for output in metadata.get("outputs", []):
        if output["name"] not in wanted:
            continue
        dims = tuple(int(d) for d in output.get("shape", []))
        if max_batch_size > 0 and dims and dims[0] == -1:
            dims = (target.batch_size, *dims[1:])
        shapes[output["name"]] = dims
    return shapes
