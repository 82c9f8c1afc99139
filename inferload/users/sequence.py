"""Correlation IDs and START/END flags for each call to a Triton sequence (stateful) model.

Triton routes every request of a sequence to the same model state by its correlation ID and
starts and ends that state on the request's START and END flags. A user keeps ``concurrent``
sequences open and its calls take them in turn; each sequence is ``length`` calls long, START on
the first and END on the last, and the next one on that slot starts with a new ID.

IDs must never repeat while the server may still hold their state (Triton refuses a START for an
ID in use, or a model keeps it for good). Each user starts counting from a random 63-bit number,
so users, processes and machines never need to agree on anything: two users' runs of IDs overlap
with a probability of about (users² x sequences per user) / 2^63 (10,000 users of a million
sequences each: 1 in 100,000). A model whose ``CONTROL_SEQUENCE_CORRID`` control input is
``TYPE_STRING`` gets the same numbers as strings.

On the wire (Triton's sequence extension): gRPC ``ModelInferRequest.parameters`` ``sequence_id``
(``int64_param`` or ``string_param``), ``sequence_start`` and ``sequence_end`` (``bool_param``);
HTTP the request JSON's ``parameters`` with the same names (what tritonclient's ``infer(sequence_id=...,
sequence_start=..., sequence_end=...)`` sends; ``http_body_with_sequence`` puts them into a body built
up front, re-encoding only its small JSON header). For gRPC each step carries those map entries serialized
once per sequence: appended to the request serialized once per user, they are a valid protobuf
merge (a message's serialized fields may follow each other in any number of pieces), so a call
costs one concatenation instead of a new serialization.

A call that fails (no answer, or the server's error) abandons its sequence: the slot's next call
starts a new one with a new ID, and the server drops the old state after the model's
``max_sequence_idle_microseconds``.

TorchServe (``torchserve_sequence_headers``): the same steps, the ID as text in the request header
``ts_request_sequence_id`` (``inferload-<number>``), and ``ts_request_sequence_end: true`` on a
sequence's last call; TorchServe opens a sequence at its first request (there is no START flag).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import service_pb2

from inferload.scenario.kinds import TS_SEQUENCE_ID_HEADER
from inferload.scenario.targets import TS_SEQUENCE_END_HEADER, SequenceSpec

#: correlation IDs go in gRPC's ``int64_param``: 1 to 2^63 - 1 (0 means "no sequence" to Triton)
MAX_CORRELATION_ID = 2**63 - 1


def grpc_sequence_parameters(correlation_id: int | str, start: bool, end: bool) -> bytes:
    """The serialized ``parameters`` map entries of a ``ModelInferRequest`` for one step.

    Appended to a serialized request without parameters of these names, they set them; flags
    that are false are left out (Triton reads an absent flag as false).
    """
    request = service_pb2.ModelInferRequest()
    if isinstance(correlation_id, str):
        request.parameters["sequence_id"].string_param = correlation_id
    else:
        request.parameters["sequence_id"].int64_param = correlation_id
    if start:
        request.parameters["sequence_start"].bool_param = True
    if end:
        request.parameters["sequence_end"].bool_param = True
    return request.SerializeToString()


@dataclass(frozen=True)
class SequenceSettings:
    """How a target's users drive a sequence model (resolved at start from the scenario and the model)."""

    length: int
    concurrent: int
    #: the model takes its correlation ID as a string (``CONTROL_SEQUENCE_CORRID`` of ``TYPE_STRING``)
    string_ids: bool = False

    @classmethod
    def from_spec(cls, spec: SequenceSpec | None, string_ids: bool = False) -> SequenceSettings:
        """From the target's ``sequence`` key; its defaults when there is none."""
        spec = spec or SequenceSpec()
        return cls(spec.length, spec.concurrent, string_ids)


def native_sequence(settings: SequenceSettings | None, headers: bool = False) -> dict[str, Any] | None:
    """A sequence model's settings as the native engine takes them (None: not a sequence model);
    ``headers``: TorchServe's, whose ID and end flag go in its sequence headers
    (`torchserve_sequence_headers`), a refused opening tried again (`UserSequences.open_again`)."""
    if settings is None:
        return None
    native = {"length": settings.length, "concurrent": settings.concurrent, "string_ids": settings.string_ids}
    return {**native, "headers": True} if headers else native


@dataclass(frozen=True)
class SequenceStep:
    """What one call carries: its sequence's ID and flags, and the same encoded for each protocol."""

    correlation_id: int | str
    start: bool
    end: bool
    #: ``ModelInferRequest.parameters`` map entries, serialized (to append to a serialized request)
    grpc_parameters: bytes
    #: the members of an HTTP request's JSON ``parameters`` object, without the braces
    http_parameters: bytes


class CorrelationIds:
    """Correlation IDs for one user: counting up from a random start in 1 .. 2^63 - 1."""

    def __init__(self, first: int | None = None, string_ids: bool = False) -> None:
        self._next = first if first is not None else secrets.randbelow(MAX_CORRELATION_ID) + 1
        if not 1 <= self._next <= MAX_CORRELATION_ID:
            raise ValueError(f"a correlation ID is 1 to 2^63 - 1; got {self._next}")
        self._string_ids = string_ids

    def next(self) -> int | str:
        value = self._next
        self._next = value + 1 if value < MAX_CORRELATION_ID else 1
        return str(value) if self._string_ids else value


def _sequence_steps(correlation_id: int | str, length: int) -> tuple[SequenceStep, SequenceStep, SequenceStep]:
    """(first, middle, last) steps of one sequence, built once when it starts."""

    def step(start: bool, end: bool) -> SequenceStep:
        members = json.dumps({"sequence_id": correlation_id, "sequence_start": start, "sequence_end": end})[1:-1]
        return SequenceStep(correlation_id, start, end, grpc_sequence_parameters(correlation_id, start, end), members.encode())

    if length == 1:
        only = step(True, True)
        return only, only, only
    return step(True, False), step(False, False), step(False, True)


@dataclass
class _Slot:
    """One open sequence of a user: its steps and the position of its next call."""

    position: int = 0
    steps: tuple[SequenceStep, SequenceStep, SequenceStep] | None = None
    #: the next call opens the same sequence again (its opening was refused)
    reopen: bool = False


@dataclass
class UserSequences:
    """One user's open sequences; ``next_step`` gives each call its ID and flags, taking them in turn."""

    settings: SequenceSettings
    ids: CorrelationIds | None = None
    _slots: list[_Slot] = field(init=False)
    _turn: int = field(default=0, init=False)
    _last: _Slot | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.ids is None:
            self.ids = CorrelationIds(string_ids=self.settings.string_ids)
        self._slots = [_Slot() for _ in range(self.settings.concurrent)]

    def next_step(self) -> SequenceStep:
        slot = self._slots[self._turn]
        self._turn = (self._turn + 1) % len(self._slots)
        length = self.settings.length
        if slot.reopen and slot.steps is not None:
            slot.reopen = False
        elif slot.position == 0 or slot.steps is None:
            assert self.ids is not None  # set in __post_init__
            slot.steps = _sequence_steps(self.ids.next(), length)
            slot.position = 0
        first, middle, last = slot.steps
        position = slot.position
        slot.position = (position + 1) % length
        self._last = slot
        if position == 0:
            return first
        return last if position == length - 1 else middle

    def abandon(self) -> None:
        """The last call failed: its slot starts a new sequence (new ID) at its next call."""
        if self._last is not None:
            self._last.position = 0

    @property
    def opened(self) -> bool:
        """Whether the last step given opened its sequence (a new ID's first call)."""
        return self._last is not None and self._last.position == 1 % self.settings.length

    def open_again(self) -> None:
        """The server refused the last call, which opened its sequence: the slot's next call opens the
        same sequence again (the same ID: no new one is opened while the server still holds its old ones)."""
        last = self._last
        if last is not None and last.steps is not None:
            last.position = 0
            last.reopen = True


def _header_with_sequence(header: bytes, step: SequenceStep) -> bytes:
    """The JSON header with the step's members in its ``parameters``.

    tritonclient writes the request's keys in the order ``id`` (text), ``inputs``, ``outputs``
    (lists), ``parameters`` (an object of plain values, only when it has some): a header ending in
    ``}}`` ends with its ``parameters``, one ending in ``]}`` has none. Those two are spliced as
    bytes (a few microseconds; tests/unit/test_sequence_steps.py holds them to tritonclient's own
    requests); anything else is parsed and written again.
    """
    if header.endswith(b"}}") and not header.endswith(b"{}}"):
        return b"".join((header[:-2], b",", step.http_parameters, b"}}"))
    if header.endswith(b"]}"):
        return b"".join((header[:-1], b',"parameters":{', step.http_parameters, b"}}"))
    parsed = json.loads(header)
    parsed.setdefault("parameters", {}).update(json.loads(b"{" + step.http_parameters + b"}"))
    return json.dumps(parsed).encode()


def http_body_with_sequence(body: bytes, json_size: int | None, step: SequenceStep) -> tuple[bytes, int | None]:
    """A pre-built HTTP inference body (JSON header, then binary tensors after ``json_size`` bytes; all
    JSON when None) with the step's ID and flags in the header's ``parameters``: (body, json_size)."""
    encoded = _header_with_sequence(body if json_size is None else body[:json_size], step)
    if json_size is None:
        return encoded, None
    return b"".join((encoded, memoryview(body)[json_size:])), len(encoded)  # the tensors copied once


#: the prefix of a TorchServe sequence id (the rest: the user's counter), so the server's log shows whose it is
TS_SEQUENCE_ID_PREFIX = "inferload-"


def torchserve_sequence_headers(step: SequenceStep) -> dict[str, str]:
    """A TorchServe call's sequence headers: its sequence's id, and the end flag on its last call."""
    headers = {TS_SEQUENCE_ID_HEADER: f"{TS_SEQUENCE_ID_PREFIX}{step.correlation_id}"}
    if step.end:
        headers[TS_SEQUENCE_END_HEADER] = "true"
    return headers


def torchserve_sequence_settings(spec: SequenceSpec | None) -> SequenceSettings | None:
    """A TorchServe target's sequence settings, as its ``sequence`` key says (None without one)."""
    return None if spec is None else SequenceSettings.from_spec(spec, string_ids=True)


def torchserve_user_sequences(spec: SequenceSpec | None) -> UserSequences | None:
    """A TorchServe user's sequences (the Python transport's), as the target's ``sequence`` key says."""
    settings = torchserve_sequence_settings(spec)
    return None if settings is None else UserSequences(settings)


def user_sequences(fitted: SequenceSettings | None, spec: SequenceSpec | None) -> UserSequences | None:
    """A user's sequences: as fitted to the model at start, else as the scenario's key says; None for neither."""
    settings = fitted if fitted is not None else (SequenceSettings.from_spec(spec) if spec is not None else None)
    return UserSequences(settings) if settings is not None else None
