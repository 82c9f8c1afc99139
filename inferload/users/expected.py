"""``response_check: expected``: compare each answer with the expected values, briefly say how it differs.

The expected file is read once per process and target (``ExpectedCheck.for_target``, kept on the
generated user class); only a target with ``response_check: expected`` decodes its answers
(``grpc_outputs``, ``http_outputs``) and compares them. A mismatch raises ``UnexpectedOutput``
whose message says what came (dtype and shape, the first differing index, the value received and
the one expected, both truncated), never a whole tensor, so Locust groups equal failures; with a
data set it names the sample that differs as the data set does (``for sample 3 (3.png)``).
Numbers match when ``|got - want| <= atol + rtol * |want|`` (NaN matches NaN); text, bytes and
booleans must be equal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from inferload.errors import RequestError
from inferload.scenario.expected import ExpectedValues, read_expected
from inferload.scenario.targets import Target
from inferload.users.failures import describe_answer

#: characters of a value shown in a message
_VALUE_CHARS = 40


class UnexpectedOutput(RequestError):
    """An answer whose values are not the expected ones."""


def _short(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value))
    elif isinstance(value, (float, np.floating)):
        text = f"{float(value):.7g}"
    elif isinstance(value, np.generic):
        text = repr(value.item())
    else:
        text = json.dumps(value) if isinstance(value, (str, bool)) or value is None else repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def compare_arrays(name: str, got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> str | None:
    """Why ``got`` is not ``want`` (one line), or None when it is within the tolerance."""
    described = f"{name!r}: got {got.dtype} {list(got.shape)}"
    if got.shape != want.shape:
        return f"{described}; expected shape {list(want.shape)}"
    text_got, text_want = got.dtype.kind in "OSU", want.dtype.kind in "OSU"
    if not text_got and not text_want and np.array_equal(got, want):  # the common case, without isclose's cost
        return None
    if text_got != text_want:
        return f"{described}; expected {'text' if text_want else 'numbers'}"
    if text_got:
        flat_got, flat_want = got.reshape(-1), want.reshape(-1)
        same = np.fromiter((a == b for a, b in zip(flat_got, flat_want, strict=True)), dtype=bool, count=flat_got.size)
    else:
        left, right = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
        same = np.isclose(left, right, atol=atol, rtol=rtol, equal_nan=True)
        flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    if same.all():
        return None
    first = int(np.argmin(same))
    return (
        f"{described}; at {_index(first, got.shape)} got {_short(flat_got[first])}, expected {_short(flat_want[first])}"
        f" ({int(same.size - same.sum())} of {same.size} differ)"
    )


def compare_json(got: Any, want: Any, atol: float, rtol: float, where: str = "$") -> str | None:
    """The first place where a decoded JSON answer differs from the expected one, or None."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return None if got == want and type(got) is type(want) else f"at {where} got {_described(got)}, expected {_short(want)}"
    if isinstance(want, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"at {where} got {_described(got)}, expected {_short(want)}"
        if math.isnan(want) and math.isnan(got):
            return None
        if abs(got - want) <= atol + rtol * abs(want):
            return None
        return f"at {where} got {_short(got)}, expected {_short(want)}"
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"at {where} got {_described(got)}, expected {describe_answer(want)}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            found = compare_json(a, b, atol, rtol, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return f"at {where} got {_described(got)}, expected {describe_answer(want)}"
        for key in want:
            found = compare_json(got[key], want[key], atol, rtol, f"{where}.{key}")
            if found:
                return found
        return None
    return f"at {where}: cannot compare {type(want).__name__}"


def _described(value: Any) -> str:
    return describe_answer(value) if isinstance(value, (list, dict)) else _short(value)


class ExpectedCheck:
    """One target's expected answers and tolerance; ``arrays`` (Triton) or ``body`` (TorchServe) raise
    ``UnexpectedOutput`` on a mismatch."""

    def __init__(
        self,
        values: ExpectedValues,
        atol: float,
        rtol: float,
        model_batches: bool = True,
        sample_label: Callable[[int], str] | None = None,
    ) -> None:
        self.values = values
        self.atol = atol
        self.rtol = rtol
        self.model_batches = model_batches
        #: how a message names data-set sample i (``sample 3 (3.png)``); default ``sample 3``
        self.sample_label: Callable[[int], str] = sample_label or (lambda sample: f"sample {sample}")

    def _for_samples(self, samples: Sequence[int]) -> str:
        """`` for sample 3 (3.png)`` (or several, the first three); empty without a data set."""
        if not samples:
            return ""
        shown = ", ".join(self.sample_label(s) for s in samples[:3]) + (", ..." if len(samples) > 3 else "")
        return f" for {shown}"

    def _differing_sample(self, name: str, got: np.ndarray, want: np.ndarray, samples: Sequence[int]) -> Sequence[int]:
        """Of a batch's samples, the first whose row differs (all of them when that cannot be told)."""
        if not (self.model_batches and len(samples) > 1 and got.shape == want.shape and got.shape[:1] == (len(samples),)):
            return samples
        for row, sample in enumerate(samples):
            if compare_arrays(name, got[row], want[row], self.atol, self.rtol) is not None:
                return (sample,)
        return samples

    @classmethod
    def for_target(cls, target: Target, base_dir: Path, model_batches: bool = True) -> ExpectedCheck | None:
        """The check of a target with ``response_check: expected`` (its file read now); None otherwise."""
        spec = target.expected
        if target.response_check != "expected" or spec is None:
            return None
        try:
            values = read_expected(base_dir / spec.path, target.kind)
        except ValueError as exc:
            raise UnexpectedOutput(f"target {target.name!r}: expected: {exc}") from None
        return cls(values, spec.atol, spec.rtol, model_batches)

    def _want(self, name: str, samples: Sequence[int]) -> np.ndarray:
        array = self.values.arrays[name]
        if not samples:
            return array
        if max(samples) >= len(array):
            raise UnexpectedOutput(
                f"output {name!r}: the expected file has {len(array)} samples; this request sent sample {max(samples)}"
            )
        return array[list(samples)] if self.model_batches else array[samples[0]]

    def arrays(self, got: Mapping[str, np.ndarray], samples: Sequence[int] = ()) -> None:
        """Triton: every expected output is in ``got`` and within the tolerance."""
        for name in self.values.arrays:
            if name not in got:
                raise UnexpectedOutput(
                    f"unexpected output: no output {name!r} in the answer (got: {', '.join(sorted(got)) or 'none'})"
                )
            want = self._want(name, samples)
            problem = compare_arrays(name, got[name], want, self.atol, self.rtol)
            if problem:
                where = self._for_samples(self._differing_sample(name, got[name], want, samples))
                output, _, detail = problem.partition(": ")
                raise UnexpectedOutput(f"unexpected output {output}{where}: {detail}")

    def body(self, body: bytes, samples: Sequence[int] = ()) -> None:
        """TorchServe: the answer's bytes (raw) or its JSON (json, jsonl) are the expected ones."""
        values = self.values
        if values.format == "raw":
            if body != values.raw:
                first = next(
                    (i for i, (a, b) in enumerate(zip(body, values.raw, strict=False)) if a != b), min(len(body), len(values.raw))
                )
                raise UnexpectedOutput(
                    f"unexpected answer{self._for_samples(samples)}: got {len(body)} bytes, expected {len(values.raw)};"
                    f" first difference at byte {first}"
                )
            return
        try:
            answer = json.loads(body)
        except ValueError:
            raise UnexpectedOutput(f"unexpected answer: got a body that is not JSON ({len(body)} bytes)") from None
        problem = compare_json(answer, self._answer(samples), self.atol, self.rtol)
        if problem:
            raise UnexpectedOutput(f"unexpected answer{self._for_samples(samples)}: {problem}")

    def _answer(self, samples: Sequence[int]) -> Any:
        answers = self.values.answers
        if not samples:
            return answers[0]
        if max(samples) >= len(answers):
            raise UnexpectedOutput(
                f"unexpected answer: the expected file has {len(answers)} answers; this request sent sample {max(samples)}"
            )
        return answers[samples[0]] if len(samples) == 1 else [answers[s] for s in samples]


def grpc_outputs(response: Any) -> dict[str, np.ndarray]:
    """A ``ModelInferResponse``'s outputs decoded by their datatype (raw contents)."""
    decoded: dict[str, np.ndarray] = {}
    for output, raw in zip(response.outputs, response.raw_output_contents, strict=False):
        shape = tuple(int(d) for d in output.shape)
        if output.datatype == "BYTES":
            array = deserialize_bytes_tensor(raw)
        else:
            dtype = triton_to_np_dtype(output.datatype)
            if dtype is None:
                raise UnexpectedOutput(f"unexpected output {output.name!r}: cannot compare datatype {output.datatype}")
            array = np.frombuffer(raw, dtype=dtype)
        decoded[output.name] = array.reshape(shape)
    return decoded


def http_outputs(result: Any) -> dict[str, np.ndarray]:
    """A tritonclient.http ``InferResult``'s outputs as numpy arrays."""
    decoded: dict[str, np.ndarray] = {}
    for output in result.get_response().get("outputs", []):
        array = result.as_numpy(output["name"])
        if array is not None:
            decoded[output["name"]] = array
    return decoded


def expected_check_of(user: Any) -> ExpectedCheck | None:
    """The ``ExpectedCheck`` of the user's target (its file read once per process, kept in the run's
    `Wiring` of the user's class), or None."""
    wiring = user.wiring
    if not wiring.expected_read:
        cls = type(user)
        found = ExpectedCheck.for_target(cls.target, cls.scenario_dir, wiring.fit.model_batches)
        if found is not None:

            def label(sample: int) -> str:  # the request pool names its samples (read on a failure only)
                pool = wiring.request_pool
                return pool.sample_label(sample) if pool is not None else f"sample {sample}"

            found.sample_label = label
        wiring.expected_check, wiring.expected_read = found, True
    check: ExpectedCheck | None = wiring.expected_check
    return check
