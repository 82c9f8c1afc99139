"""The one shape every inferload user class has.

A user class sends one target's inference calls: a scenario's (`user_class_for(target)` makes one
per target) or one written in a locustfile (a subclass of a protocol's class with a ``target``).
Each simulated user builds its protocol client in `on_start` (the target's requests are encoded
once per process, by its first user: `request_pool()`) and has ``self.client``, an
`InferenceClient` whose `infer()` sends one call (the next pre-encoded request), times it and
reports it through Locust's request event (below). The default task,
`inference_task`, is a closed loop of those calls, or the sender of a scenario's open-loop
arrivals; a class that declares tasks of its own runs only those (Locust's ``@task`` methods or
``tasks``; `__init_subclass__` drops the inherited default). Protocol modules implement three
methods: `connect()`, `send() -> response bytes`, `close()`, the class method
`encode_request(data)` (one request encoded for the wire, called up front for every distinct
request), and name the target kinds they speak (``target_kinds``).

A class's ``target`` is checked when the class is made: a `Target`, or a mapping of its keys
(validated then, every problem at its key path); its kind must be one the class speaks (a
mapping may leave ``kind`` out when the class speaks one). A target written without an
``address`` takes the user's ``host`` (the class attribute, or Locust's ``--host``, which Locust
puts on every user class at the start) when the first user is made; without a host that stops
the test with a message saying what to set.

A refused connection (the server is down) is answered in microseconds, so the default closed
loop backs off before its next call: 10 ms after the first refusal, doubling up to 1 s, back to
none at the first call that reaches the server. Every attempt is still reported, so the failures
count attempts, and a dead server costs a few attempts per user-second rather than the client's
CPU. Open loop does not back off: its arrivals already bound the attempts to the configured rate,
and a refused arrival is counted failed while the next one is taken at its intended time.

``self.client`` of every inferload user, and the default task that uses it.

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

Both are built on the user's ``transport``, made in `on_start` (`inferload.users.engine.open_transport`):
a slot of the native engine when the run's `Wiring` of the class has one (the default task hands it
the user's whole loop; `infer()` is one call the engine sends and times), else the Python
transport (the protocol's own ``connect``/``send``/``close``). Neither the client nor the task
asks which it is.

`ArrivalQueue` is where an open-loop target's arrivals wait for a free sender: the run's scheduler
(`inferload.run.traffic`) offers them, the senders take them.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from gevent.queue import Queue
from locust import User, constant
from locust.exception import StopTest

from inferload.errors import ConnectionRefused, ScenarioError, SequenceRefused
from inferload.measure.trace_join import ClientTraceRecords
from inferload.scenario.inputs import InputSpec
from inferload.scenario.kinds import SERVER_KINDS, TARGET_KINDS
from inferload.scenario.targets import Target, sequence_of, trace_of
from inferload.traffic.arrivals import Arrival
from inferload.users.request_pool import RequestData, RequestPool, RequestSource
from inferload.users.sequence import SequenceSettings

if TYPE_CHECKING:
    from inferload.users.engine import NativeEngine, NativeTarget, Transport
    from inferload.users.expected import ExpectedCheck

__all__ = [
    "ArrivalQueue",
    "InferResult",
    "InferenceClient",
    "InferenceUser",
    "ModelFit",
    "RefusedBackoff",
    "Wiring",
    "batched_output_names",
    "expected_output_shapes",
    "inference_task",
    "wiring_of",
]

#: the exit code of a test stopped for a configuration error (inferload's rule: 2 for usage errors)
EXIT_USAGE = 2
#: an address every kind accepts: a target written without one is validated with it at class creation
_PLACEHOLDER_ADDRESS = "127.0.0.1:1"


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


@dataclass(frozen=True)
class ModelFit:
    """What a target's model is, as its start check read it (the model's metadata and config): the
    target's requests and the checks of its answers follow it. The default: nothing was read (a
    batch dimension is sent, an answer's batch is checked, no shapes)."""

    #: False for a Triton model with max_batch_size 0: the scenario's shape is then the model's
    #: full shape and the tensor is sent without a batch dimension
    model_batches: bool = True
    #: output shapes an answer must have, batch dimension included (name -> shape; -1 matches any
    #: size); empty: batch check only
    expected_outputs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: the outputs of `expected_outputs` whose first dimension is the batch (a request of another
    #: batch size, a replay row's, must answer with its own there)
    batched_outputs: frozenset[str] = frozenset()
    #: a Triton sequence model's correlation IDs and flags (None: the target's ``sequence`` key, if
    #: any, decides; see `inferload.users.sequence`)
    sequence_settings: SequenceSettings | None = None
    #: a Triton model's decoupled policy (None: not read; a class's own ``decoupled`` stands)
    decoupled: bool | None = None


@dataclass
class Wiring:
    """What one run gives a user class's users in this process, beside the class's target: the
    model's fit as the run's start check read it, the engine that sends and times their calls (None: the Python transport), the open-loop arrivals
    they send (None: a closed loop), a traced target's request ids and client times, whether a replay
    gives its requests batch sizes of their own, and the process's pre-encoded requests of the target.
    A run's parts fill it in as the run is wired (`wiring_of`); it lives on the Locust environment, so
    a user class is the same in every run and writes nothing of a run's onto itself."""

    #: the target's model as this run's start check read it (the class's own `fit` until then)
    fit: ModelFit = field(default_factory=ModelFit)
    engine: NativeEngine | None = None
    arrivals: ArrivalQueue | None = None
    trace_records: ClientTraceRecords | None = None
    replay_batches: bool = False
    request_pool: RequestPool[Any] | None = None
    #: ``response_check: expected``: the target's expected answers (read once per process: `expected_read`)
    expected_check: ExpectedCheck | None = None
    expected_read: bool = False


#: the attribute of the Locust environment that holds each user class's `Wiring`
_WIRING_KEY = "_inferload_wiring"


def wiring_of(environment: Any, user_class: type) -> Wiring:
    """The class's `Wiring` in this environment's run (made empty on first ask)."""
    table: dict[type, Wiring] | None = getattr(environment, _WIRING_KEY, None)
    if table is None:
        table = {}
        setattr(environment, _WIRING_KEY, table)
    wiring = table.get(user_class)
    if wiring is None:
        wiring = table[user_class] = Wiring(fit=getattr(user_class, "fit", ModelFit()))
    return wiring


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

    def infer(self, request_index: int | None = None) -> InferResult:
        """Send the target's next request (or request ``request_index``), report it, return what was measured.

        ``request_index``: one of the target's distinct requests, 0 to ``request_count - 1`` (the
        data-set samples or generated tensors it was encoded from: docs/scenarios.md); None takes
        the next in the target's rotation. A failed call is returned, not raised. The user's
        transport (`inferload.users.engine`) sends and times it."""
        if request_index is not None:
            self._check_index(request_index)
        transport = self.user.transport
        if transport is None:
            raise RuntimeError(f"{type(self.user).__name__}: a user's calls start with its on_start (its transport)")
        called = transport.call(request_index)
        self.report(called.latency_ms, called.response_length, called.error, None)
        return InferResult(called.latency_ms, called.response_length, called.error, called.request_index)

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

    def report(self, latency_ms: float, response_length: int, exception: BaseException | None, send_lag_ms: float | None) -> None:
        """One call through Locust's request event (``send_lag_ms``: an open-loop arrival's)."""
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
    """The default task of every inferload user (a function, so that it can go in a class's ``tasks``):
    the user's transport's turn (`Transport.run`). A native slot: the engine runs the user's whole
    loop (or makes it an open-loop sender) until the user stops. The Python transport: the next queued
    arrival, sent and timed from its intended time (open loop), or one `InferenceClient.infer()`,
    then a pause when the connection was refused (closed loop)."""
    transport = user.transport
    if transport is None:
        raise RuntimeError(f"{type(user).__name__}: the default task runs after on_start (the user's transport)")
    transport.run()


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


class InferenceUser(User):
    """Abstract base: one target, one protocol client and one `InferenceClient` per simulated user."""

    abstract = True
    wait_time = constant(0)
    #: the default task (`inference_task`, above); a subclass with tasks of its own runs only those
    tasks = [inference_task]  # noqa: RUF012  (Locust reads it as a class attribute, as it declares it)

    #: the target this class sends to: a `Target`, or a mapping of its keys (checked when the class is made)
    target: ClassVar[Target]
    #: the target kinds this class speaks (a subclass's target must have one of them)
    target_kinds: ClassVar[tuple[str, ...]] = TARGET_KINDS
    #: a target written without an address: its keys, completed with the user's host when the first user is made
    target_keys_without_address: ClassVar[dict[str, Any] | None] = None
    #: label in Locust's "Type" column
    request_type: ClassVar[str] = "infer"
    #: the target's model as the class declares it (`ModelFit`; the default: nothing known); a run's
    #: start check reads it from the server into the run's `Wiring`
    fit: ClassVar[ModelFit] = ModelFit()
    #: folder that relative payload paths (.npy files) are resolved against
    scenario_dir: ClassVar[Path] = Path(".")
    #: the engine keeps this protocol's sequences itself (Triton's sequence parameters, TorchServe's sequence
    #: headers; see docs/engine.md)
    native_sequences: ClassVar[bool] = False
    #: the request index the next `next_request()` picks (set by the client for one call; None: the next in turn)
    wanted_request_index: int | None = None
    #: the request index `next_request()` last picked (the client's `InferResult.request_index`)
    sent_request_index: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_task_names(cls)
        _drop_inherited_default_task(cls)
        declared = cls.__dict__.get("target")
        if declared is not None:
            _set_target(cls, declared)
        shapes = cls.__dict__.get("expected_outputs")
        if shapes is not None:  # a locustfile's class declares the shapes its answers must have
            cls.fit = replace(cls.fit, expected_outputs={str(name): tuple(dims) for name, dims in dict(shapes).items()})

    def __init__(self, environment: Any) -> None:
        cls = type(self)
        if cls.target_keys_without_address is not None:
            cls.target_for_host(cls.host, stop_test=environment)
        super().__init__(environment)
        self.refused_backoff = RefusedBackoff()
        #: what this run gives the class's users (the engine, the arrivals, the trace records ...)
        self.wiring = wiring_of(environment, cls)
        #: this user's client: ``self.client.infer()`` sends, times and reports one inference call
        self.client = InferenceClient(self)
        #: how this user's calls are sent (`inferload.users.engine.open_transport`, in on_start)
        self.transport: Transport | None = None

    @classmethod
    def wiring_in(cls, environment: Any) -> Wiring:
        """What the run of ``environment`` gives this class's users (`wiring_of`)."""
        return wiring_of(environment, cls)

    def on_start(self) -> None:
        from inferload.users.engine import open_transport

        self.transport = open_transport(self)

    def on_stop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def stop(self, force: bool = False) -> bool:
        stopped: bool = super().stop(force)
        if self.transport is not None:  # a graceful stop: a native loop's task returns, then on_stop
            self.transport.release()
        return stopped

    @classmethod
    def target_for_host(cls, host: str | None, stop_test: Any = None) -> Target:
        """The class's target, its address the ``host`` when it was written without one (made once per host).

        A missing or unusable host raises ``TypeError``; with ``stop_test`` (a Locust environment) it
        sets the environment's exit code to 2 and raises Locust's ``StopTest`` instead, which stops
        the test with the message (a user that cannot be made)."""
        found = inspect.getattr_static(cls, "target", None)
        if not isinstance(found, TargetAtHost):
            return cls.target
        try:
            return found.at(cls, host)
        except TypeError as error:
            if stop_test is None:
                raise
            stop_test.process_exit_code = EXIT_USAGE
            raise StopTest(f"inferload: {error}") from None

    def next_request(self) -> tuple[int, Any]:
        """(request index, encoded request) for the next call: a pick, nothing is encoded (the index
        the client asked for, else the next in the target's rotation)."""
        pool = self.request_pool()
        wanted = self.wanted_request_index
        if wanted is not None:
            picked: tuple[int, Any] = (wanted, pool.encoded(wanted))
        else:
            picked = pool.next()
        self.sent_request_index = picked[0]
        return picked

    def request_batch(self) -> int:
        """The batch size of the request `next_request()` last picked (the target's, or a replay row's)."""
        index = self.sent_request_index
        return self.target.batch_size if index is None else self.request_pool().batch_of(index)

    def expected_outputs_now(self) -> Mapping[str, tuple[int, ...]]:
        """The fit's `expected_outputs` for the request last picked: its batch dimension is that request's."""
        fit = self.wiring.fit
        if not fit.batched_outputs:
            return fit.expected_outputs
        batch = self.request_batch()
        if batch == self.target.batch_size:
            return fit.expected_outputs
        return {name: (batch, *dims[1:]) if name in fit.batched_outputs else dims for name, dims in fit.expected_outputs.items()}

    def input_arrays(self) -> list[tuple[InputSpec, np.ndarray]]:
        """The first request's arrays, batch dimension included (unless the model does not batch).

        For protocols without ``encode_request``; the others take every request from ``request_pool()``.
        """
        return list(RequestSource(self.target, self.scenario_dir, model_batches=self.wiring.fit.model_batches).data(0).arrays)

    def request_pool(self) -> RequestPool[Any]:
        """This process's requests of the target, encoded by ``encode_request`` (made on first use)."""
        pool = self.wiring.request_pool
        return pool if pool is not None else type(self).pool_for(self.environment)

    @classmethod
    def pool_for(cls, environment: Any) -> RequestPool[Any]:
        """This process's requests of the class's target (made on first use, by a user or the engine)."""
        wiring = wiring_of(environment, cls)
        if wiring.request_pool is None:
            source = RequestSource(cls.target, cls.scenario_dir, model_batches=wiring.fit.model_batches)
            worker_index = int(getattr(environment.runner, "worker_index", 0) or 0)
            wiring.request_pool = RequestPool(source, cls.encode_request, worker_index=worker_index)
        return wiring.request_pool

    # -- the native transport (inferload.users.engine) --------------------------------------------
    @classmethod
    def python_only_reason(cls, wiring: Wiring | None = None) -> str | None:
        """Why this class's calls need Python per request in the run ``wiring`` is of (None: the
        engine can make them all)."""
        target = cls.target
        fit = wiring.fit if wiring is not None else cls.fit
        if target.response_check == "expected":
            reason = cls.expected_python_only_reason(wiring, fit)
            if reason is not None:
                return reason
        if (sequence_of(target) is not None or fit.sequence_settings is not None) and not cls.native_sequences:
            return "a sequence model's requests carry per-request correlation IDs"
        if wiring is not None and wiring.replay_batches:
            return "its replay's batch column gives requests batch sizes of their own, made when first asked for"
        if cls.native_target.__func__ is InferenceUser.native_target.__func__:  # type: ignore[attr-defined]
            return f"the {target.kind} kind has no native path yet"
        return None

    @classmethod
    def expected_python_only_reason(cls, wiring: Wiring | None, fit: ModelFit) -> str | None:
        """Why this class's ``response_check: expected`` calls need the protocol's own client (None:
        the engine sends and times them and `check_expected` judges each answer it hands back)."""
        if cls.check_expected.__func__ is InferenceUser.check_expected.__func__:  # type: ignore[attr-defined]
            return f"the {cls.target.kind} kind compares answers with expected values only in its own client"
        if sequence_of(cls.target) is not None or fit.sequence_settings is not None:
            return "a sequence model's expected answers are compared per call of its sequence, in Python"
        if trace_of(cls.target) is not None or (wiring is not None and wiring.trace_records is not None):
            return "a traced target's expected answers are compared in Python"
        return None

    @classmethod
    def check_expected(cls, check: ExpectedCheck, answer: bytes, samples: Sequence[int]) -> None:
        """Protocol hook: ``response_check: expected`` on an answer as the wire carried it (the HTTP
        body, or the gRPC response message) for a request of ``samples``: `UnexpectedOutput` unless
        it is the expected one. The engine's calls of the class are checked with it, off their
        timed path; a class without it keeps those calls on its own client."""
        raise NotImplementedError

    @classmethod
    def native_target(cls, pool: RequestPool[Any], fit: ModelFit) -> NativeTarget | None:
        """Protocol hook: the target as the engine takes it, its requests ``pool``'s, its answers
        checked as the model's ``fit`` says (None: this protocol has no native path)."""
        return None

    @classmethod
    def native_target_id(cls, engine: NativeEngine, environment: Any) -> int:
        """The engine's id of this class's target (registered once per process, its requests encoded first)."""
        pool = cls.pool_for(environment)
        wiring = wiring_of(environment, cls)

        def make() -> NativeTarget:
            spec = cls.native_target(pool, wiring.fit)
            if spec is None:  # the run's wiring only gives the class an engine when it has a native path
                raise TypeError(f"{cls.__name__} has no native path")
            return spec

        arrivals = wiring.arrivals
        max_queue = arrivals.max_queue if arrivals is not None else None
        return engine.target_id(cls, make, max_queue, pool.start_cursor, wiring.trace_records)

    @classmethod
    def encode_request(cls, data: RequestData) -> Any:
        """Protocol hook: one request encoded for the wire (called once per distinct request, up front)."""
        raise NotImplementedError

    def conversation(self) -> Any | None:
        """Protocol hook: this user's conversations (`inferload.users.engine.Turns`) when its target
        holds them (each turn carries the last answer); None: one request per call."""
        return None

    @classmethod
    def engine_only_reason(cls) -> str | None:
        """Protocol hook: why this class's users need the native engine (None: either transport sends them)."""
        return None

    def call_context(self) -> dict[str, Any] | None:
        """What the last call measured beyond its latency, for the request event's context (a
        streamed request's `StreamTiming`, see `inferload.users.triton`); None: nothing."""
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


def batched_output_names(metadata: Mapping[str, Any] | None, batches: bool) -> frozenset[str]:
    """The outputs whose first dimension is the batch: the metadata's leading -1 on a model that batches."""
    if not metadata or not batches:
        return frozenset()
    names = set()
    for output in metadata.get("outputs", ()) or ():
        dims = list(output.get("shape", ()) or ()) if isinstance(output, Mapping) else []
        if dims and int(dims[0]) == -1:
            names.add(str(output.get("name")))
    return frozenset(names)


# -- checks when a user class is made ---------------------------------------------------------------


def _drop_inherited_default_task(cls: type[InferenceUser]) -> None:
    """Locust's rule, for the default task: a class that declares tasks of its own runs only those.

    Locust gives a class its bases' tasks followed by its own (``@task`` methods, ``tasks``); the
    inherited `inference_task` goes when the class declares any (one it lists itself stays)."""
    inherited = [t for base in cls.__bases__ for t in (getattr(base, "tasks", None) or [])]
    own = cls.tasks[len(inherited) :]
    if own:
        cls.tasks = [t for t in inherited if t is not inference_task] + own


def _check_task_names(cls: type[InferenceUser]) -> None:
    """A task may not take the name of a method the user's calls need (``send``, ``next_request`` ...):
    Python would replace the method with the task."""
    for name, value in cls.__dict__.items():
        if not hasattr(value, "locust_task_weight"):
            continue
        for base in cls.__mro__[1:]:
            if not issubclass(base, InferenceUser):
                break
            known = base.__dict__.get(name)
            if known is not None and not hasattr(known, "locust_task_weight"):
                raise TypeError(
                    f"{_defined_in(cls)}: {cls.__name__}.{name}: a task of this name would replace "
                    f"{base.__name__}.{name}, which the user's calls need; give the task another name"
                )


def _set_target(cls: type[InferenceUser], declared: object) -> None:
    """Check the class's ``target`` (a Target, or a mapping of its keys) and set it as a Target."""
    where = f"{cls.__name__}.target"
    if isinstance(declared, Target):
        _check_kind(cls, declared.kind)
        cls.target_keys_without_address = None  # a base's target without an address is not this class's
        return
    if not isinstance(declared, Mapping):
        raise TypeError(
            f"{_defined_in(cls)}: {where}: expected an inferload.Target or a mapping of target keys; "
            f"got {type(declared).__name__}"
        )
    keys = {str(key): value for key, value in declared.items()}
    if "kind" not in keys and len(cls.target_kinds) == 1:
        keys["kind"] = cls.target_kinds[0]  # the class says it
    if keys.get("address") is None:  # the user's host, when the first user is made
        keys.pop("address", None)
        target_from_keys(cls, {**keys, "address": _PLACEHOLDER_ADDRESS}, where)  # every other key checked now
        cls.target = TargetAtHost(keys)  # type: ignore[assignment]  # a Target once the host is known
        cls.target_keys_without_address = keys
        return
    cls.target = target_from_keys(cls, keys, where)
    cls.target_keys_without_address = None


class TargetAtHost:
    """A class's ``target`` written without an address: read on the class (or a user), it is the target
    at the class's ``host`` (the class's own, or what Locust puts there at each start: ``--host``, the
    web UI's host), made once per class and host. No host: AttributeError naming what to set."""

    def __init__(self, keys: Mapping[str, Any]) -> None:
        self.keys = dict(keys)
        self._made: dict[tuple[type, str], Target] = {}

    def __get__(self, instance: object, owner: type[InferenceUser]) -> Target:
        try:
            return self.at(owner, owner.host)
        except TypeError as error:
            raise AttributeError(str(error)) from None

    def at(self, owner: type[InferenceUser], host: str | None) -> Target:
        """The target at ``host``; TypeError when there is none, or the kind cannot use it."""
        if not host:
            raise TypeError(
                f"{_defined_in(owner)}: {owner.__name__}.target has no address: give the target an address, "
                f"set host on {owner.__name__} (host = {_example_address(str(self.keys.get('kind', '')))!r}), "
                "or run Locust with --host"
            )
        made = self._made.get((owner, host))
        if made is None:
            where = f"{owner.__name__}.target (address: the host {host!r})"
            try:
                made = self._made[(owner, host)] = target_from_keys(owner, {**self.keys, "address": host}, where)
            except ScenarioError as error:
                raise TypeError(str(error)) from None
        return made


def target_from_keys(cls: type[InferenceUser], keys: Mapping[str, Any], where: str) -> Target:
    """A Target from a mapping of its keys, checked against the class (ScenarioError: every problem
    at its key path under ``where``; TypeError: a kind the class does not speak)."""
    from inferload.scenario.loader import target_from_dict

    kind = keys.get("kind")
    if isinstance(kind, str) and kind in TARGET_KINDS:
        _check_kind(cls, kind)
    return target_from_dict(keys, file_label=_defined_in(cls), key_path=where, base_dir=None)


def _check_kind(cls: type[InferenceUser], kind: str) -> None:
    if kind in cls.target_kinds:
        return
    speaker = next(base for base in cls.__mro__ if "target_kinds" in base.__dict__)
    raise TypeError(
        f"{_defined_in(cls)}: {cls.__name__}.target.kind: {cls.__name__} is a {speaker.__name__}, which speaks "
        f"{' or '.join(repr(k) for k in cls.target_kinds)}; got {kind!r} (a {kind} target's class is "
        f"inferload.{SERVER_KINDS[kind].user_class})"
    )


def _defined_in(cls: type) -> str:
    """The file a class was written in, for messages (its module's name when it has no file)."""
    module = sys.modules.get(cls.__module__)
    return str(getattr(module, "__file__", None) or cls.__module__)


def _example_address(kind: str) -> str:
    return "127.0.0.1:8001" if kind.endswith("grpc") else "http://127.0.0.1:8000"
