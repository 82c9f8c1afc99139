"""The native engine under the users: the Python face of ``inferload._native`` (docs/engine.md).

A transport is what a user hands its pre-encoded requests to. There are two, and a user class
never knows which one it has beyond asking ``native_target()`` once:

- the **native** transport (the default when the extension loads): one `NativeEngine` per Locust
  process owns the Rust engine (its own threads: tonic gRPC, hyper HTTP/1.1, rustls, a precise
  pacer, HDR recording). Each Locust user opens one *slot* (one connection) and hands it the
  whole closed loop (`run_closed`) or makes it one of its target's open-loop senders
  (`run_open`): the engine sends, times, paces and records every call without Python. Python
  takes what was measured in batches (`drain`, every quarter second and at every worker report
  and at the stop) and merges it exactly where per-request events would have gone: the run's
  `RunRecord` (the same wire format a worker report has), Locust's own request statistics (one
  `StatsEntry.extend` per target, as Locust's master merges a worker's), its error table, and
  the request log.
- the **Python** transport (the fallback): each user's own protocol client (`connect`/`send`/
  `close` of its class: tritonclient, geventhttpclient), one call per task, each reported
  through Locust's request event. Used when the extension cannot load (say once, at the first
  user), when ``INFERLOAD_TRANSPORT=python``, and for the few targets whose calls need their own
  client (`InferenceUser.python_only_reason` says which, and the run logs why). Triton's and
  TorchServe's sequence models, decoupled streams and traced requests run natively (the engine
  keeps the sequences, reads the streams and puts the trace ids on).

A target with ``response_check: expected`` takes a third way (`CheckedSlot`): the engine sends and
times each call and hands its answer back; Python compares it with the expected values after the
call is timed (`InferenceUser.check_expected`, the same rule the class's own client applies) and
reports the call as the Python transport does, pacing an open loop's arrivals itself.

No module-level state: the engine hangs off the Locust environment (`NativeEngine.of`).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import gevent
import gevent.event
from gevent.hub import Waiter, get_hub
from locust.stats import RequestStats, StatsEntry, StatsError

from inferload import errors
from inferload.users.expected import expected_check_of
from inferload.users.failures import classify_exception, timed_out

if TYPE_CHECKING:
    from inferload.measure.run_record import RunRecord
    from inferload.measure.trace_join import ClientTraceRecords
    from inferload.run.recorder import RequestLog

logger = logging.getLogger(__name__)

#: ``native`` (the default) or ``python``: which transport the users use
TRANSPORT_ENV = "INFERLOAD_TRANSPORT"
#: the engine's runtime threads per Locust process (default 1)
THREADS_ENV = "INFERLOAD_ENGINE_THREADS"
#: what the engine measured reaches the run this often (and at every report and at the stop)
DRAIN_EVERY_S = 0.25
#: the attribute of the Locust environment that holds its engine
_ENVIRONMENT_KEY = "_inferload_native_engine"

TransportName = Literal["native", "python"]
#: the Python transport's deadline for a whole call is the target's timeout and this (its client
#: library's own timeouts, on each wait, say it first when they can)
CALL_DEADLINE_GRACE_S = 1.0


# The test-only receive-time shift: the one place that names it (docs/calibration.md, "The test hook").
#
# ``INFERLOAD_TEST_RECEIVE_SHIFT_US`` (whole microseconds) makes the client wrong by a known amount:
# every receive time the client records is that much later, in the Python transport
# (`PythonTransport`, read once per user) and in the native engine (`receive_shift_ns` in
# ``native/src/engine/clock.rs``, read once per process). A calibration run with it must report
# every latency figure that much too high: the test that shows the calibration can see an error.
# Never set it outside tests.
RECEIVE_SHIFT_ENV = "INFERLOAD_TEST_RECEIVE_SHIFT_US"


def receive_shift_us(environ: Mapping[str, str] | None = None) -> int:
    """The shift in whole µs (0 when the variable is absent, empty, negative or not a whole number)."""
    text = (os.environ if environ is None else environ).get(RECEIVE_SHIFT_ENV, "").strip()
    return int(text) if text.isdigit() else 0


@dataclass(frozen=True)
class NativeTarget:
    """How a user class's target is given to the engine (built by the class, once per process)."""

    protocol: Literal["grpc", "http"]
    address: str  # grpc: host:port; http: http(s)://host:port
    requests: list[Any]  # grpc: bytes; http: (path, body, [(header, value)])
    check: dict[str, Any]
    headers: list[tuple[str, str]] = field(default_factory=list)
    tls: dict[str, Any] | None = None
    #: a sequence model: {"length", "concurrent", "string_ids"}, and "headers" for TorchServe's (the
    #: engine keeps the sequences: `users.sequence.native_sequence`)
    sequence: dict[str, Any] | None = None
    #: a decoupled model: every call on the slot's ModelStreamInfer stream
    stream: bool = False


@functools.cache
def native_module() -> Any | None:
    """``inferload._native``, or None when it cannot be used (the reason is logged once)."""
    wanted = os.environ.get(TRANSPORT_ENV, "native").strip().lower() or "native"
    if wanted not in ("native", "python"):
        logger.warning("%s=%r: expected 'native' or 'python'; using the native engine if it loads", TRANSPORT_ENV, wanted)
    if wanted == "python":
        logger.info("%s=python: the users send through the Python transport", TRANSPORT_ENV)
        return None
    try:
        from inferload import _native
    except ImportError as exc:
        logger.warning(
            "inferload's native engine is not built (%s): the users send through the Python transport; "
            "`make build` with cargo installed builds it (docs/engine.md)",
            exc,
        )
        return None
    if not hasattr(_native, "Engine"):
        logger.warning("inferload's native module has no engine (an old build?): the users send through the Python transport")
        return None
    return _native


def transport_in_use() -> TransportName:
    """Which transport users get when their target can go native."""
    return "native" if native_module() is not None else "python"


def _threads() -> int:
    raw = os.environ.get(THREADS_ENV, "1")
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if not 1 <= threads <= 64:
        logger.warning("%s=%r: expected a number of threads from 1 to 64; using 1", THREADS_ENV, raw)
        return 1
    return threads


#: inferload's request errors by class name, for failures the engine reports as (class name, message)
_ERROR_CLASSES: dict[str, type[errors.RequestError]] = {
    cls.__name__: cls
    for cls in (
        errors.RequestError,
        errors.ConnectionRefused,
        errors.RequestTimeout,
        errors.BadOutputShape,
    )
}


def request_error(class_name: str, message: str) -> errors.RequestError:
    """The exception the Python path would have raised for this failure (same class, same message)."""
    if class_name == "HttpStatusError":
        error: errors.RequestError = errors.HttpStatusError(0)
    elif class_name == "SequenceRefused":
        error = errors.SequenceRefused(0)
    elif class_name == "GrpcStatusError":
        error = errors.GrpcStatusError("")
    else:
        return _ERROR_CLASSES.get(class_name, errors.RequestError)(message)
    error.args = (message,)  # the engine's message is already the full one
    return error


@dataclass(frozen=True)
class CallOutcome:
    """One per-call completion (``NativeEngine.call``)."""

    error: errors.RequestError | None
    latency_ms: float
    sent_ns: int
    received_ns: int
    response_length: int
    answer: bytes | None
    #: a successful generation's (time to first token ms | None, prompt tokens | None, output tokens)
    generation: tuple[float | None, int | None, int] | None = None


class NativeEngine:
    """One Locust process's engine: targets, slots, the drain into the run's figures."""

    def __init__(self, environment: Any, module: Any, window_s: float = 1.0) -> None:
        self.environment = environment
        self.engine = module.Engine(threads=_threads(), window_s=window_s)
        #: where recorded requests go besides Locust's statistics (set by the run's wiring)
        self.record: RunRecord | None = None
        self.request_log: RequestLog | None = None
        self.warmup_s = 0.0
        #: when this process's warm-up ends (wall clock; None: the run has not started)
        self.warmup_ends_at: float | None = None
        self._target_ids: dict[type, int] = {}
        self._method_of: dict[str, str] = {}
        #: traced targets' records by target name: the engine puts an id on each of their calls
        self._traced: dict[str, ClientTraceRecords] = {}
        self._waiters: dict[int, Waiter] = {}
        self._drainer: gevent.Greenlet | None = None
        self._closed = False
        hub = get_hub()
        self._watcher = hub.loop.io(self.engine.notify_fd(), 1)
        self._watcher.start(self._on_calls_ready)
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.report_to_master.add_listener(self._on_report_to_master)
        events.test_stop.add_listener(self._on_test_stop)
        events.quitting.add_listener(self._on_quitting)

    @classmethod
    def of(cls, environment: Any, window_s: float = 1.0) -> NativeEngine | None:
        """The environment's engine (made on first use); None when the native transport is not in use."""
        found = getattr(environment, _ENVIRONMENT_KEY, None)
        if found is not None:
            return found
        module = native_module()
        if module is None:
            return None
        made = cls(environment, module, window_s)
        setattr(environment, _ENVIRONMENT_KEY, made)
        return made

    def attach(self, record: RunRecord | None, request_log: RequestLog | None, warmup_s: float) -> None:
        """Recorded requests go into this run's record and request log too (not only Locust's statistics)."""
        self.record = record
        self.request_log = request_log
        self.warmup_s = warmup_s

    # -- targets and slots ---------------------------------------------------------------------
    def target_id(
        self,
        user_class: type,
        make: Callable[[], NativeTarget],
        open_loop_max_queue: int | None,
        start_index: int,
        trace_records: ClientTraceRecords | None = None,
    ) -> int:
        """The engine's id of a user class's target (registered by its first user, or the open-loop feed);
        ``trace_records``: a traced target's (the engine puts an id with their prefix on each call of
        its loops and senders, and hands back what the successful ones took: `drain`)."""
        found = self._target_ids.get(user_class)
        if found is not None:
            return found
        target = user_class.target  # type: ignore[attr-defined]
        spec = make()
        made = self.engine.add_target(
            name=target.name,
            request_type=user_class.request_type,  # type: ignore[attr-defined]
            protocol=spec.protocol,
            address=spec.address,
            display_address=target.address,
            timeout_s=float(target.timeout),
            max_answer_bytes=target.max_answer_bytes,
            headers=spec.headers,
            requests=spec.requests,
            check=spec.check,
            rotation=target.rotation,
            # the pool's random order is seeded with the worker's index too: workers never move in lockstep
            rotation_seed=int(target.rotation_seed or 0) * 1_000_003
            + int(getattr(self.environment.runner, "worker_index", 0) or 0),
            start_index=start_index,
            tls=spec.tls,
            open_loop_max_queue=open_loop_max_queue,
            sequence=spec.sequence,
            stream=spec.stream,
            trace=trace_records.prefix if trace_records is not None else None,
        )
        if trace_records is not None:
            self._traced[target.name] = trace_records
        self._target_ids[user_class] = made
        self._method_of[target.name] = user_class.request_type  # type: ignore[attr-defined]
        return int(made)

    def open_slot(self, target_id: int) -> int:
        return int(self.engine.open_slot(target_id))

    def stop_slot(self, slot: int) -> None:
        if not self._closed:
            self.engine.stop_slot(slot)

    def call(
        self,
        slot: int,
        request_index: int,
        *,
        append: bytes = b"",
        body: bytes | None = None,
        headers: list[tuple[str, str]] | None = None,
        want_answer: bool = False,
        record: bool = False,
        turn: int | None = None,
    ) -> CallOutcome:
        """One call on an idle slot; blocks this greenlet (not the hub) until it is answered.
        ``record``: the engine records it as its loops do (the caller reports nothing of it);
        ``turn``: a recorded call that is a conversation's turn (from 1), counted by turn with it."""
        ticket = self.engine.call(
            slot,
            request_index,
            append=append,
            body=body,
            headers=headers,
            want_answer=want_answer,
            record=record,
            turn=turn,
        )
        waiter: Waiter = Waiter()
        self._waiters[int(ticket)] = waiter
        try:
            outcome: CallOutcome = waiter.get()
        finally:
            self._waiters.pop(int(ticket), None)
        return outcome

    def _on_calls_ready(self) -> None:
        for (
            ticket,
            error,
            _refused,
            latency_ms,
            sent_ns,
            received_ns,
            length,
            answer,
            _status,
            generation,
        ) in self.engine.take_calls():
            waiter = self._waiters.pop(int(ticket), None)
            if waiter is None:  # its greenlet was killed meanwhile
                continue
            outcome = CallOutcome(
                error=None if error is None else request_error(*error),
                latency_ms=float(latency_ms),
                sent_ns=int(sent_ns),
                received_ns=int(received_ns),
                response_length=int(length),
                answer=answer,
                generation=generation,
            )
            waiter.switch(outcome)

    # -- open loop -----------------------------------------------------------------------------
    def feed(self, target_id: int, intended: list[float], request_indices: list[int | None] | None = None) -> None:
        if intended and not self._closed:
            self.engine.feed(target_id, intended, request_indices)

    def end_arrivals(self, target_id: int) -> None:
        if not self._closed:
            self.engine.end_arrivals(target_id)

    # -- what was measured ---------------------------------------------------------------------
    def drain(self) -> None:
        """Everything the engine recorded since the last drain, into the run's figures."""
        if self._closed:
            return
        wire = self.engine.drain()
        if self.record is not None:
            self.record.merge_wire(wire["record"])
        stats = getattr(self.environment, "stats", None)
        if stats is not None:
            for entry in wire["locust"]:
                apply_to_locust_stats(stats, entry)
        rows = wire.get("rows")
        if rows and self.request_log is not None:
            self.request_log.add_rows(rows)
        for name, number, sent_ns, received_ns in wire.get("traced", ()):  # the trace join's client times
            self._traced[name].add(number, sent_ns, received_ns)
        for name, dropped in wire.get("traced_dropped", {}).items():
            self._traced[name].dropped += dropped

    def _drain_forever(self) -> None:
        while True:
            gevent.sleep(DRAIN_EVERY_S)
            self.drain()

    def _on_test_start(self, **_: Any) -> None:
        self.engine.set_request_rows(self.request_log is not None and self.request_log.enabled)
        self.warmup_ends_at = time.time() + self.warmup_s
        self.engine.set_warmup_end(self.warmup_ends_at)
        if self._drainer is None:
            self._drainer = gevent.spawn(self._drain_forever)

    def run_starts_at(self, started_at: float) -> None:
        """The run counts from this instant (a worker's open loop: the master's start): the warm-up
        ends `warmup_s` after it, as the run's record has it."""
        self.warmup_ends_at = started_at + self.warmup_s
        self.engine.set_warmup_end(self.warmup_ends_at)

    def _on_report_to_master(self, **_: Any) -> None:
        self.drain()  # registered before the run's recorder: its report carries these figures

    def _on_test_stop(self, **_: Any) -> None:
        if self._drainer is not None:
            self._drainer.kill(block=False)
            self._drainer = None
        self.drain()

    def _on_quitting(self, **_: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self.drain()
        self._closed = True
        self._watcher.stop()
        self.engine.close()


def apply_to_locust_stats(stats: RequestStats, entry: Mapping[str, Any]) -> None:
    """One target's recorded requests into Locust's statistics, as Locust merges a worker's."""
    name, method = entry["name"], entry["method"]
    if not entry["num_requests"]:
        return
    batch = StatsEntry(stats, name, method)
    batch.num_requests = int(entry["num_requests"])
    batch.num_failures = int(entry["num_failures"])
    batch.total_response_time = entry["total_response_time"]
    batch.min_response_time = entry["min_response_time"]
    batch.max_response_time = entry["max_response_time"]
    batch.total_content_length = int(entry["total_content_length"])
    batch.response_times.update({int(k): int(v) for k, v in entry["response_times"].items()})
    batch.num_reqs_per_sec.update({int(k): int(v) for k, v in entry["num_reqs_per_sec"].items()})
    batch.num_fail_per_sec.update({int(k): int(v) for k, v in entry["num_fail_per_sec"].items()})
    batch.last_request_timestamp = entry["last_request_timestamp"]
    batch.start_time = min(stats.entries[(name, method)].start_time, batch.last_request_timestamp or time.time())
    stats.entries[(name, method)].extend(batch)
    stats.total.extend(batch)
    now = entry["last_request_timestamp"] or time.time()
    for class_name, message, count in entry["errors"]:
        error = request_error(class_name, message)
        key = StatsError.create_key(method, name, error)
        known = stats.errors.get(key)
        if known is None:
            known = stats.errors[key] = StatsError(method, name, error, 0, now, now)
        known.occurrences += int(count)
        known.last_seen = now


@dataclass(frozen=True)
class Called:
    """One call as a transport made it: its latency (ms, from its send), the answer's length (0 for a
    failed call), the failure (an `inferload.errors.RequestError`; None: a success) and the request
    index sent (None: a protocol without pre-encoded requests)."""

    latency_ms: float
    response_length: int
    error: BaseException | None
    request_index: int | None


class Transport(Protocol):
    """How one user's calls are sent: what the user and its client ask of either transport, never
    which one it is (`open_transport` picks it)."""

    def call(self, request_index: int | None) -> Called:
        """One call of the request ``request_index`` (None: the next in the target's rotation)."""
        ...

    def run(self) -> None:
        """The default task's turn (`inferload.users.base.inference_task`)."""
        ...

    def release(self) -> None:
        """The user is told to stop (a graceful stop): a loop the transport runs ends."""
        ...

    def close(self) -> None:
        """The user stops: its connection goes."""
        ...


def open_transport(user: Any) -> Transport:
    """The user's transport in this run: a slot of the engine its class's `Wiring` has (a
    `ConversationSlot` for a target that holds conversations), or else its own protocol client
    (`PythonTransport`, connected now)."""
    engine = user.wiring.engine
    conversation = user.conversation()
    if engine is None:
        if conversation is not None:
            raise RuntimeError(engine_needed_problem(type(user)))
        return PythonTransport(user)
    target_id = type(user).native_target_id(engine, user.environment)
    pick = lambda: int(user.request_pool().next()[0])  # noqa: E731
    if conversation is not None:
        return ConversationSlot(engine, target_id, conversation, user.refused_backoff, pick)
    if answers_checked_in_python(type(user)):
        return CheckedSlot(engine, target_id, user, pick)
    return NativeSlot(engine, target_id, pick, user.wiring.arrivals is not None)


def answers_checked_in_python(user_class: Any) -> bool:
    """Whether the class's calls on the engine hand their answers back to be checked (``response_check:
    expected``): Python then paces them (`CheckedSlot`), the engine sends and times each."""
    return bool(user_class.target.response_check == "expected")


def engine_needed_problem(user_class: Any) -> str:
    """Why the class's users cannot run on the Python transport (its `engine_only_reason`)."""
    return (
        f"target {user_class.target.name!r}: {user_class.engine_only_reason()}; this process sends through the Python"
        f" transport ({TRANSPORT_ENV}=python, or the engine not built: make build)"
    )


def engine_needed(environment: Any, user_classes: list[Any]) -> list[str]:
    """For each class whose users need the engine and did not get it in this run, why (`engine_needed_problem`)."""
    return [
        engine_needed_problem(cls)
        for cls in user_classes
        if cls.engine_only_reason() is not None and cls.wiring_in(environment).engine is None
    ]


class Turns(Protocol):
    """One user's conversations, one at a time (`inferload.users.generation.Conversation`)."""

    def next_turn(self) -> tuple[int, bytes]:
        """(the turn's number from 1, its body)."""
        ...

    def answered(self, text: str | None) -> float:
        """The turn's answer (None: it failed); the pause before the next turn, s."""
        ...


class NativeSlot:
    """One user's connection in the engine: its closed loop or open-loop sender, or its calls."""

    def __init__(self, engine: NativeEngine, target_id: int, pick: Callable[[], int], open_loop: bool) -> None:
        self.engine = engine
        self.slot = engine.open_slot(target_id)
        self._pick = pick
        self._open_loop = open_loop
        self._released = gevent.event.Event()
        self._closed = False

    def call(self, request_index: int | None) -> Called:
        """One call on the idle slot (`NativeEngine.call`): the engine sends and times it."""
        index = request_index if request_index is not None else self._pick()
        outcome = self.engine.call(self.slot, index)
        return Called(outcome.latency_ms, outcome.response_length, outcome.error, index)

    def run(self) -> None:
        """Hand the slot its loop (or make it a sender) and wait until the user is told to stop."""
        if self._open_loop:
            self.engine.engine.run_open(self.slot)
        else:
            self.engine.engine.run_closed(self.slot)
        self._released.wait()

    def release(self) -> None:
        """The user stops: its task returns (a graceful stop) and the loop ends."""
        self._released.set()
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.stop_slot(self.slot)


class ConversationSlot(NativeSlot):
    """One user's conversations on an engine slot: each turn one call the engine sends, times and
    records as its loops do, its answer's text handed back to make the next turn; the engine counts
    each successful turn's generation by its position too (its time to the first token and prompt
    tokens), with the generation itself, so the turns add up to the generations."""

    def __init__(self, engine: NativeEngine, target_id: int, turns: Turns, backoff: Any, pick: Callable[[], int]) -> None:
        super().__init__(engine, target_id, pick, open_loop=False)
        self.turns = turns
        self.backoff = backoff

    def run(self) -> None:
        """One turn, then the pause after it (think time, or a refused connection's backoff)."""
        turn, body = self.turns.next_turn()
        outcome = self.engine.call(self.slot, 0, body=body, want_answer=True, record=True, turn=turn)
        text = None
        if outcome.error is None and outcome.answer is not None:
            text = outcome.answer.decode("utf-8", "replace")
        pause_s = max(self.turns.answered(text), self.backoff.after(outcome.error))
        if pause_s > 0:
            self._released.wait(pause_s)

    def release(self) -> None:
        """The user is told to stop: the turn in flight ends, no pause after it."""
        self._released.set()


class PacedInPython:
    """A transport whose calls Python paces, one per task (its ``call`` sends one): the next queued
    arrival of an open loop, its latency counted from its intended send time (the send lag reported
    apart), or one `InferenceClient.infer()` of a closed loop, then a pause when the connection was
    refused."""

    user: Any

    def call(self, request_index: int | None) -> Called:
        raise NotImplementedError

    def run(self) -> None:
        user = self.user
        arrivals = user.wiring.arrivals
        if arrivals is not None:
            intended, arrival = arrivals.take_arrival()
            index = None if arrival is None else user.request_pool().index_for(arrival.sample, arrival.batch)
            lag_ms = (time.time() - intended) * 1000.0
            called = self.call(index)
            user.client.report(lag_ms + called.latency_ms, called.response_length, called.error, lag_ms)
            return
        result = user.client.infer()
        pause_s = user.refused_backoff.after(result.error)
        if pause_s > 0:
            gevent.sleep(pause_s)


class CheckedSlot(PacedInPython, NativeSlot):
    """One user's calls on an engine slot whose answers Python checks (``response_check: expected``):
    the engine sends and times each call and hands its answer back; `InferenceUser.check_expected`
    then judges it, off the timed path, and the call is reported as the Python transport's are."""

    def __init__(self, engine: NativeEngine, target_id: int, user: Any, pick: Callable[[], int]) -> None:
        super().__init__(engine, target_id, pick, open_loop=False)
        self.user = user

    def call(self, request_index: int | None) -> Called:
        index = request_index if request_index is not None else self._pick()
        outcome = self.engine.call(self.slot, index, want_answer=True)
        error: BaseException | None = outcome.error
        if error is None and outcome.answer is not None:
            error = self._checked(outcome.answer, index)
        return Called(outcome.latency_ms, outcome.response_length, error, index)

    def _checked(self, answer: bytes, index: int) -> BaseException | None:
        """The failure of an answer that is not the expected one (None: it is)."""
        user = self.user
        check = expected_check_of(user)
        if check is None:
            return None
        try:
            type(user).check_expected(check, answer, user.request_pool().samples(index))
        except Exception as exc:  # an answer that cannot be decoded fails as the client's would
            error = classify_exception(exc, user.target.address)
            error.__traceback__ = None
            return error
        return None


class PythonTransport(PacedInPython):
    """The Python transport: the user's own protocol client (its ``connect``, ``send`` and
    ``close``), one call per task, each within one deadline (the target's timeout and
    `CALL_DEADLINE_GRACE_S`: a client library's timeouts bound each wait on the socket, not an
    answer that never ends; the engine has the same deadline)."""

    def __init__(self, user: Any) -> None:
        self.user = user
        #: test-only (`RECEIVE_SHIFT_ENV`): ms added to every receive time; 0 in real runs
        self.receive_shift_ms = receive_shift_us() / 1000.0
        #: the failure of a call past its deadline (made once)
        self._overdue = timed_out(user.target.address)
        user.connect()

    def call(self, request_index: int | None) -> Called:
        started = time.perf_counter()
        error, length, index = self._send(request_index)
        return Called((time.perf_counter() - started) * 1000.0 + self.receive_shift_ms, length, error, index)

    def release(self) -> None:
        """Nothing runs beyond the task: Locust ends its loop."""

    def close(self) -> None:
        self.user.close()

    def _send(self, request_index: int | None) -> tuple[BaseException | None, int, int | None]:
        """(the failure or None, the answer's length, the request index sent) of one call."""
        user = self.user
        user.wanted_request_index = request_index
        user.sent_request_index = None
        try:
            with gevent.Timeout(user.target.timeout + CALL_DEADLINE_GRACE_S, self._overdue):
                return None, user.send(), user.sent_request_index
        except Exception as exc:  # every client failure becomes a classified Locust failure
            error = classify_exception(exc, user.target.address)
            # reported by its class and message: its frames (and the answer they read, up to
            # max_answer_bytes) would live as long as anything keeps the error
            error.__traceback__ = None
            return error, 0, user.sent_request_index
        finally:
            user.wanted_request_index = None


class EngineFeed:
    """A user class's open-loop arrivals, handed to the engine (``run.traffic.ArrivalFeed``)."""

    def __init__(self, engine: NativeEngine, user_class: Any, environment: Any) -> None:
        self.engine = engine
        self.user_class = user_class
        self.environment = environment

    def _target_id(self) -> int:
        return int(self.user_class.native_target_id(self.engine, self.environment))

    def feed(self, intended: list[float], samples: list[int | None] | None = None) -> None:
        target_id = self._target_id()  # registers the target first: its pool is encoded
        indices = None
        if samples is not None:
            pool = self.user_class.pool_for(self.environment)
            indices = [None if sample is None else pool.index_of_sample(sample) for sample in samples]
        self.engine.feed(target_id, intended, indices)

    def end(self) -> None:
        self.engine.end_arrivals(self._target_id())

    def starts(self, started_at: float) -> None:
        self.engine.run_starts_at(started_at)


def arrival_feed(environment: Any, user_class: Any) -> EngineFeed | None:
    """How the class's users take an open-loop run's arrivals: fed ahead to the engine, which paces
    them (an `EngineFeed`), or None: its users take them from the run's arrival queue (the Python
    transport, or the engine's calls whose answers Python checks: `CheckedSlot`)."""
    engine = user_class.wiring_in(environment).engine
    if engine is None or answers_checked_in_python(user_class):  # those Python paces (`CheckedSlot`)
        return None
    return EngineFeed(engine, user_class, environment)


def attach_engine(environment: Any, record: RunRecord | None, request_log: RequestLog | None, warmup_s: float) -> None:
    """The requests the environment's engine records go into this run's record and request log too
    (nothing to do where this process has no engine: a master, or the Python transport)."""
    engine: NativeEngine | None = getattr(environment, _ENVIRONMENT_KEY, None)
    if engine is not None:
        engine.attach(record, request_log, warmup_s)


def assign_engine(environment: Any, user_classes: list[Any], window_s: float) -> NativeEngine | None:
    """Give every user class that can go native this process's engine (its run's `Wiring`); say once
    per class why one stays on the Python transport. None when no class goes native."""
    engine = NativeEngine.of(environment, window_s)
    if engine is None:
        return None
    native = 0
    for cls in user_classes:
        wiring = cls.wiring_in(environment)
        reason = cls.python_only_reason(wiring)
        if reason is None:
            wiring.engine = engine
            native += 1
            if answers_checked_in_python(cls):
                logger.info(
                    "target %r: sent by the engine, its answers compared with the expected ones in Python", cls.target.name
                )
        else:
            wiring.engine = None
            logger.info("target %r: sent through the Python transport: %s", cls.target.name, reason)
    return engine if native else None
