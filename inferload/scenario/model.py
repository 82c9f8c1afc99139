"""The scenario: what to load, how hard, for how long; frozen pydantic models.

Every model is frozen and forbids unknown keys. Durations are float seconds stored under the YAML
key's own name. Checks that involve several keys are written as validators that raise
``PydanticCustomError``; a check that can find several problems at once raises one error of type
``inferload_checks`` whose context holds ``checks``: ``((sub_path, message), ...)`` relative to the
model (or field) being validated. ``scenario_loader`` turns all of it into ``Problem`` lines.

Build a scenario from a file with ``inferload.scenario.loader.load_scenario``, or from a dict with
``scenario_from_dict`` there; constructing these models directly works too (validation runs, but
npy files are only checked when a ``base_dir`` is given in the validation context).
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from inferload.scenario import tensors
from inferload.scenario.durations import DURATION_HINT, format_duration, parse_duration

DTYPES = ("FP32", "FP16", "INT32", "INT64", "BYTES")
TARGET_KINDS = ("triton-grpc", "triton-http", "torchserve-rest")
CONTENT_TYPES = ("octet-stream", "npy", "json")
GENERATORS = ("random", "zeros", "constant", "npy")
MAX_INPUT_BYTES = 64 * 1024 * 1024

CHECKS_ERROR = "inferload_checks"

DType = Literal["FP32", "FP16", "INT32", "INT64", "BYTES"]
TargetKind = Literal["triton-grpc", "triton-http", "torchserve-rest"]
ContentType = Literal["octet-stream", "npy", "json"]
Generator = Literal["random", "zeros", "constant", "npy"]

Check = tuple[tuple[str | int, ...], str]


def describe_value(value: object) -> str:
    """A short YAML-ish rendering of a value for messages: ``'FP64'``, ``12``, ``null``, ``a mapping``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return repr(text)
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        if len(value) <= 8 and all(_is_scalar(item) for item in value):
            return "[" + ", ".join(describe_value(item) for item in value) + "]"
        return "a list"
    return f"a {type(value).__name__}"


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def custom_error(message: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``message``."""
    return PydanticCustomError("inferload", message.replace("{", "(").replace("}", ")"))


def checks_error(checks: list[Check]) -> PydanticCustomError:
    """One validation error carrying several problems, each at its own sub-path."""
    summary = "; ".join(f"{'.'.join(str(p) for p in path) or '.'}: {msg}" for path, msg in checks)
    return PydanticCustomError(CHECKS_ERROR, summary.replace("{", "(").replace("}", ")"), {"checks": tuple(checks)})


def _fmt_seconds(seconds: float) -> str:
    text = format_duration(seconds)
    return text if isinstance(text, str) else f"{text}s"


# --- field types -------------------------------------------------------------------------------

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_VERSION_RE = re.compile(r"[A-Za-z0-9_.-]+")


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise custom_error(f"expected a name of letters, digits, '_', '.' or '-'; got {describe_value(value)}")
    return value


def _token(value: object) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise custom_error(f"expected a non-empty string; got {describe_value(value)}")
    return value


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except ValueError:
        raise custom_error(f"expected {DURATION_HINT}; got {describe_value(value)}") from None


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise custom_error(f"expected a number; got {describe_value(value)}")
    if not math.isfinite(value):
        raise custom_error(f"expected a finite number; got {describe_value(value)}")
    return float(value)


def _dtype(value: object) -> str:
    if isinstance(value, str) and value.upper() in DTYPES:
        return value.upper()
    raise custom_error(f"expected one of {', '.join(DTYPES)}; got {describe_value(value)}")


def _version(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _VERSION_RE.fullmatch(value):
        return value
    raise custom_error(f"expected a model version like 1 or '1.0'; got {describe_value(value)}")


Name = Annotated[str, BeforeValidator(_name)]
Token = Annotated[str, BeforeValidator(_token)]
Seconds = Annotated[float, BeforeValidator(_duration)]
Number = Annotated[float, BeforeValidator(_number)]
Version = Annotated[str | None, BeforeValidator(_version)]
DTypeField = Annotated[DType, BeforeValidator(_dtype)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- addresses ---------------------------------------------------------------------------------

_HOSTNAME_RE = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def _split_host_port(text: str, example: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) → (host as written, port); ValueError otherwise."""
    expected = f"expected host:port like {example!r}; got {text!r}"
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise ValueError(expected)
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"invalid IPv6 address {host!r} in {text!r}") from None
        host = f"[{host}]"
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon or not host:
            raise ValueError(expected)
        if not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"invalid host {host!r} in {text!r}")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"the port must be a number from 1 to 65535; got {port_text!r} in {text!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"the port must be a number from 1 to 65535; got {port} in {text!r}")
    return host, port


def _split_url(text: str, schemes: tuple[str, ...], example: str) -> tuple[str, str]:
    """``scheme://host:port[/path]`` → (scheme, rest); no scheme → (schemes[0], text)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return schemes[0], text
    if scheme.lower() not in schemes:
        allowed = " or ".join(f"{s}://" for s in schemes)
        raise ValueError(f"expected {allowed} like {example!r}; got {text!r}")
    return scheme.lower(), rest


def normalise_address(kind: str, address: str) -> str:
    """The canonical address of a target, or ValueError saying what was expected.

    triton-grpc → ``host:port``; triton-http → ``host:port`` (tritonclient's form; an
    ``http://`` prefix is accepted and dropped); torchserve-rest → ``http://host:port``.
    """
    text = address.strip()
    if kind == "triton-grpc":
        if "://" in text:
            raise ValueError(f"expected host:port without a scheme like '127.0.0.1:8001'; got {text!r}")
        host, port = _split_host_port(text, "127.0.0.1:8001")
        return f"{host}:{port}"
    if kind == "triton-http":
        _, rest = _split_url(text, ("http",), "http://127.0.0.1:8000")
        host, port = _split_host_port(rest.rstrip("/"), "127.0.0.1:8000")
        return f"{host}:{port}"
    scheme, rest = _split_url(text, ("http", "https"), "http://127.0.0.1:8080")
    hostport = rest.rstrip("/")
    if "/" in hostport:
        raise ValueError(f"expected http://host:port without a path; got {text!r}")
    host, port = _split_host_port(hostport, "http://127.0.0.1:8080")
    return f"{scheme}://{host}:{port}"


def _metrics_url(value: object) -> str | None:
    if value is None:
        return None
    example = "http://127.0.0.1:8002/metrics"
    if not isinstance(value, str) or "://" not in value:
        raise custom_error(f"expected a URL like {example!r}; got {describe_value(value)}")
    scheme, rest = value.strip().split("://", 1)
    if scheme.lower() not in ("http", "https"):
        raise custom_error(f"expected an http:// or https:// URL like {example!r}; got {value!r}")
    hostport, slash, path = rest.partition("/")
    try:
        host, port = _split_host_port(hostport, "127.0.0.1:8002")
    except ValueError as error:
        raise custom_error(str(error)) from None
    return f"{scheme.lower()}://{host}:{port}/{path}" if slash else f"{scheme.lower()}://{host}:{port}/metrics"


MetricsUrl = Annotated[str | None, BeforeValidator(_metrics_url)]


# --- tensors -----------------------------------------------------------------------------------

_GENERATOR_KEYS = {
    "random": ("seed", "low", "high", "length"),
    "zeros": (),
    "constant": ("value",),
    "npy": ("path",),
}
_REQUIRED_KEYS = {"constant": ("value",), "npy": ("path",)}


def _data_shorthand(value: object) -> object:
    return {"generator": value} if isinstance(value, str) else value


class DataSpec(_Model):
    """How an input's values are made. ``data: zeros`` is short for ``data: {generator: zeros}``.

    random: ``seed`` (default 0), ``low``/``high`` (default 0..1 for floats, 0..100 for integers,
    high exclusive for integers), ``length`` (BYTES only: characters per element, default 16).
    zeros: no keys (BYTES: empty byte strings). constant: ``value``. npy: ``path`` (relative to
    the scenario file).
    """

    generator: Generator = "random"
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(default=None, validate_default=True)
    value: float | int | str | None = None
    path: StrictStr | None = None
    low: Number | None = None
    high: Number | None = None
    length: Annotated[StrictInt, Field(ge=1, le=1000000)] | None = None

    @field_validator("seed", mode="before")
    @classmethod
    def _default_seed(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.data.get("generator") == "random":
            return 0
        if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
            raise custom_error(f"expected a non-negative integer; got {describe_value(value)}")
        return value

    @field_validator("value", mode="before")
    @classmethod
    def _check_value(cls, value: object) -> object:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise custom_error(f"expected a number or a string; got {describe_value(value)}")
        return value

    @model_validator(mode="after")
    def _check_keys(self) -> DataSpec:
        allowed = _GENERATOR_KEYS[self.generator]
        checks: list[Check] = []
        for key in sorted(self.model_fields_set - {"generator"}):
            if getattr(self, key) is not None and key not in allowed:
                takes = ", ".join(allowed) if allowed else "no other keys"
                checks.append(((key,), f"does not apply to generator '{self.generator}' (it takes {takes})"))
        for key in _REQUIRED_KEYS.get(self.generator, ()):
            if getattr(self, key) is None:
                checks.append(((key,), f"required key is missing (generator '{self.generator}' needs it)"))
        if self.low is not None and self.high is not None and self.high <= self.low:
            checks.append((("high",), f"must be greater than low ({self.low:g}); got {self.high:g}"))
        if checks:
            raise checks_error(checks)
        return self


class InputSpec(_Model):
    """One input tensor: ``shape`` is per item, without the batch dimension."""

    name: Token
    shape: tuple[Annotated[StrictInt, Field(gt=0)], ...] = Field(min_length=1)
    dtype: DTypeField
    data: Annotated[DataSpec, BeforeValidator(_data_shorthand)] = Field(
        default_factory=lambda: DataSpec(generator="random", seed=0)
    )

    @model_validator(mode="after")
    def _check_data_fits_dtype(self) -> InputSpec:
        checks = tensors.data_dtype_problems(self.data, self.dtype)
        if checks:
            raise checks_error([(("data", *path), message) for path, message in checks])
        return self


# --- targets -----------------------------------------------------------------------------------


class Slo(_Model):
    """Thresholds checked at the end of a run; every one is optional."""

    p50_ms: Annotated[Number, Field(gt=0)] | None = None
    p90_ms: Annotated[Number, Field(gt=0)] | None = None
    p95_ms: Annotated[Number, Field(gt=0)] | None = None
    p99_ms: Annotated[Number, Field(gt=0)] | None = None
    p999_ms: Annotated[Number, Field(gt=0)] | None = None
    mean_ms: Annotated[Number, Field(gt=0)] | None = None
    error_rate: Annotated[Number, Field(ge=0, le=1)] | None = None
    min_throughput_rps: Annotated[Number, Field(gt=0)] | None = None
    # server-side figures (read from the server itself)
    min_avg_batch_size: Annotated[Number, Field(gt=0)] | None = None
    max_queue_ms: Annotated[Number, Field(ge=0)] | None = None
    max_compute_ms: Annotated[Number, Field(gt=0)] | None = None
    max_residual_ms: Annotated[Number, Field(ge=0)] | None = None
    # open loop
    max_send_lag_p99_ms: Annotated[Number, Field(ge=0)] | None = None
    max_unsent: Annotated[StrictInt, Field(ge=0)] | None = None


class Target(_Model):
    """One server endpoint serving one model, and the request sent to it."""

    name: Name
    kind: TargetKind
    address: StrictStr
    model: Token
    version: Version = None
    batch_size: Annotated[StrictInt, Field(ge=1)] = 1
    inputs: tuple[InputSpec, ...] = Field(min_length=1)
    outputs: tuple[Token, ...] = ()
    timeout: Annotated[Seconds, Field(gt=0)] = 10.0
    weight: Annotated[StrictInt, Field(ge=1)] = 1
    content_type: ContentType | None = Field(default=None, validate_default=True)
    metrics_url: MetricsUrl = None
    slo: Slo | None = None

    @property
    def server(self) -> Literal["triton", "torchserve"]:
        return "torchserve" if self.kind == "torchserve-rest" else "triton"

    @property
    def protocol(self) -> Literal["grpc", "http"]:
        return "grpc" if self.kind == "triton-grpc" else "http"

    @field_validator("address")
    @classmethod
    def _normalise_address(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind is None:
            return value
        try:
            return normalise_address(kind, value)
        except ValueError as error:
            raise custom_error(f"{error} (for a {kind} target)") from None

    @field_validator("version")
    @classmethod
    def _triton_version_is_a_number(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if value is not None and kind in ("triton-grpc", "triton-http") and not value.isdigit():
            raise custom_error(f"expected a Triton model version number like 1; got {value!r}")
        return value

    @field_validator("inputs")
    @classmethod
    def _check_inputs(cls, inputs: tuple[InputSpec, ...], info: ValidationInfo) -> tuple[InputSpec, ...]:
        batch_size = info.data.get("batch_size", 1)
        base_dir = (info.context or {}).get("base_dir")
        checks: list[Check] = []
        first_index: dict[str, int] = {}
        for index, spec in enumerate(inputs):
            if spec.name in first_index:
                checks.append(((index, "name"), f"duplicate input name {spec.name!r} (also inputs[{first_index[spec.name]}])"))
            first_index.setdefault(spec.name, index)
            size = tensors.request_nbytes(spec, batch_size)
            if size > MAX_INPUT_BYTES:
                checks.append(
                    (
                        (index, "shape"),
                        f"{batch_size} x {list(spec.shape)} {spec.dtype} is {size:,} bytes per request;"
                        f" at most {MAX_INPUT_BYTES:,} (64 MiB) are allowed",
                    )
                )
            elif spec.data.generator == "npy" and base_dir is not None:
                try:
                    tensors.load_npy(spec, batch_size, Path(base_dir))
                except ValueError as error:
                    checks.append(((index, "data", "path"), str(error)))
        if checks:
            raise checks_error(checks)
        return inputs

    @field_validator("outputs")
    @classmethod
    def _unique_outputs(cls, outputs: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[str] = set()
        checks: list[Check] = []
        for index, name in enumerate(outputs):
            if name in seen:
                checks.append(((index,), f"duplicate output name {name!r}"))
            seen.add(name)
        if checks:
            raise checks_error(checks)
        return outputs

    @field_validator("content_type")
    @classmethod
    def _content_type_for_torchserve(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind == "torchserve-rest":
            inputs = info.data.get("inputs", ())
            if value in ("npy", "json") and len(inputs) > 1:
                raise custom_error(f"{value} bodies carry one input; this target has {len(inputs)} (use octet-stream)")
            return value or "octet-stream"
        if value is not None and kind is not None:
            raise custom_error(f"only applies to torchserve-rest targets; this target is {kind}")
        return value


# --- load shapes -------------------------------------------------------------------------------


class SteadyShape(_Model):
    """A constant number of users; ``spawn_rate`` defaults to ``users`` (all started within 1 s)."""

    kind: Literal["steady"]
    users: Annotated[StrictInt, Field(ge=1)]
    spawn_rate: Annotated[Number, Field(gt=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]

    @field_validator("spawn_rate", mode="before")
    @classmethod
    def _default_spawn_rate(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return float(info.data.get("users", 1))
        return value


class RampShape(_Model):
    """From ``from_users`` to ``to_users`` in ``steps`` equal steps over ``over``, then hold.

    ``spawn_rate`` defaults to one step's change per second (each step completes within 1 s).
    """

    kind: Literal["ramp"]
    from_users: Annotated[StrictInt, Field(ge=0)]
    to_users: Annotated[StrictInt, Field(ge=0)]
    over: Annotated[Seconds, Field(gt=0)]
    steps: Annotated[StrictInt, Field(ge=1)] = 5
    spawn_rate: Annotated[Number, Field(gt=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]

    @field_validator("to_users")
    @classmethod
    def _must_change(cls, value: int, info: ValidationInfo) -> int:
        start = info.data.get("from_users")
        if start is not None and value == start:
            raise custom_error(f"must differ from from_users ({start}); for a constant load use kind: steady")
        return value

    @field_validator("spawn_rate", mode="before")
    @classmethod
    def _default_spawn_rate(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            change = abs(info.data.get("to_users", 1) - info.data.get("from_users", 0))
            return max(change / info.data.get("steps", 1), 1.0)
        return value


class BurstShape(_Model):
    """``base_users`` with bursts to ``burst_users`` lasting ``burst_length`` every ``period``.

    ``first_burst_at`` defaults to ``period - burst_length`` (each period ends with its burst);
    ``spawn_rate`` defaults to ``burst_users`` (a burst is fully up within 1 s).
    """

    kind: Literal["burst"]
    base_users: Annotated[StrictInt, Field(ge=0)]
    burst_users: Annotated[StrictInt, Field(ge=1)]
    burst_length: Annotated[Seconds, Field(gt=0)]
    period: Annotated[Seconds, Field(gt=0)]
    first_burst_at: Annotated[Seconds, Field(ge=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]
    spawn_rate: Annotated[Number, Field(gt=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]

    @field_validator("burst_users")
    @classmethod
    def _above_base(cls, value: int, info: ValidationInfo) -> int:
        base = info.data.get("base_users")
        if base is not None and value <= base:
            raise custom_error(f"must be greater than base_users ({base}); got {value}")
        return value

    @field_validator("period")
    @classmethod
    def _longer_than_burst(cls, value: float, info: ValidationInfo) -> float:
        length = info.data.get("burst_length")
        if length is not None and value <= length:
            raise custom_error(f"must be longer than burst_length ({_fmt_seconds(length)}); got {_fmt_seconds(value)}")
        return value

    @field_validator("first_burst_at", mode="before")
    @classmethod
    def _default_first_burst(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return max(info.data.get("period", 0.0) - info.data.get("burst_length", 0.0), 0.0)
        return value

    @field_validator("spawn_rate", mode="before")
    @classmethod
    def _default_spawn_rate(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return float(info.data.get("burst_users", 1))
        return value


class Stage(_Model):
    """Hold ``users`` for ``duration``; ``spawn_rate`` is filled in by ``StagesShape``."""

    duration: Annotated[Seconds, Field(gt=0)]
    users: Annotated[StrictInt, Field(ge=0)]
    spawn_rate: Annotated[Number, Field(gt=0)] | None = None


class StagesShape(_Model):
    """Stages one after another; after the last, its user count holds until the scenario ends.

    A stage's ``spawn_rate`` defaults to its change in users per second (done within 1 s).
    """

    kind: Literal["stages"]
    stages: tuple[Stage, ...] = Field(min_length=1)

    @field_validator("stages")
    @classmethod
    def _default_spawn_rates(cls, stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
        filled = []
        previous = 0
        for stage in stages:
            if stage.spawn_rate is None:
                stage = stage.model_copy(update={"spawn_rate": float(max(abs(stage.users - previous), 1))})
            filled.append(stage)
            previous = stage.users
        return tuple(filled)


# --- open-loop (arrival-rate) shapes -----------------------------------------------------------

Rate = Annotated[Number, Field(ge=0)]
PositiveRate = Annotated[Number, Field(gt=0)]


class _OpenLoopShape(_Model):
    """Requests arrive on the clock (requests/s for the whole run, split across workers).

    ``max_in_flight`` senders (Locust users) send the arrivals; an arrival that finds every
    sender busy waits in a queue of at most ``max_queue`` (default: ``max_in_flight``), and one
    that finds the queue full is counted as unsent. Latency is measured from the intended send
    time. ``seed`` makes Poisson arrivals repeatable.
    """

    max_in_flight: Annotated[StrictInt, Field(ge=1, le=100_000)] = 64
    max_queue: Annotated[StrictInt, Field(ge=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]
    seed: Annotated[StrictInt, Field(ge=0)] | None = None

    @field_validator("max_queue", mode="before")
    @classmethod
    def _default_queue(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return info.data.get("max_in_flight", 64)
        return value


class ConstantRateShape(_OpenLoopShape):
    """``rate`` requests/s, evenly spaced."""

    kind: Literal["constant-rate"]
    rate: PositiveRate


class PoissonShape(_OpenLoopShape):
    """``rate`` requests/s on average, exponential gaps (a Poisson process)."""

    kind: Literal["poisson"]
    rate: PositiveRate


class RampingRateShape(_OpenLoopShape):
    """From ``from_rate`` to ``to_rate`` requests/s in ``steps`` equal steps over ``over``, then hold."""

    kind: Literal["ramping-rate"]
    from_rate: Rate
    to_rate: Rate
    over: Annotated[Seconds, Field(gt=0)]
    steps: Annotated[StrictInt, Field(ge=1)] = 10
    arrivals: Literal["poisson", "constant"] = "poisson"

    @field_validator("to_rate")
    @classmethod
    def _must_change(cls, value: float, info: ValidationInfo) -> float:
        start = info.data.get("from_rate")
        if start is not None and value == start:
            raise custom_error(f"must differ from from_rate ({start}); for a constant rate use kind: poisson or constant-rate")
        return value


class RateBurstsShape(_OpenLoopShape):
    """``base_rate`` requests/s with bursts of ``burst_rate`` for ``burst_length`` every ``period``."""

    kind: Literal["rate-bursts"]
    base_rate: Rate
    burst_rate: PositiveRate
    burst_length: Annotated[Seconds, Field(gt=0)]
    period: Annotated[Seconds, Field(gt=0)]
    first_burst_at: Annotated[Seconds, Field(ge=0)] = Field(default=None, validate_default=True)  # type: ignore[assignment]
    arrivals: Literal["poisson", "constant"] = "poisson"

    _above_base = field_validator("burst_rate")(classmethod(lambda cls, v, info: _greater_than(v, info, "base_rate")))
    _longer_than_burst = field_validator("period")(classmethod(lambda cls, v, info: _longer_than(v, info, "burst_length")))

    @field_validator("first_burst_at", mode="before")
    @classmethod
    def _default_first_burst(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return max(info.data.get("period", 0.0) - info.data.get("burst_length", 0.0), 0.0)
        return value


def _greater_than(value: float, info: ValidationInfo, other: str) -> float:
    base = info.data.get(other)
    if base is not None and value <= base:
        raise custom_error(f"must be greater than {other} ({base}); got {value}")
    return value


def _longer_than(value: float, info: ValidationInfo, other: str) -> float:
    length = info.data.get(other)
    if length is not None and value <= length:
        raise custom_error(f"must be longer than {other} ({_fmt_seconds(length)}); got {_fmt_seconds(value)}")
    return value


OpenLoopShape = ConstantRateShape | PoissonShape | RampingRateShape | RateBurstsShape
Shape = Annotated[
    SteadyShape | RampShape | BurstShape | StagesShape | ConstantRateShape | PoissonShape | RampingRateShape | RateBurstsShape,
    Field(discriminator="kind"),
]
SHAPE_KINDS = ("steady", "ramp", "burst", "stages", "constant-rate", "poisson", "ramping-rate", "rate-bursts")
OPEN_LOOP_KINDS = ("constant-rate", "poisson", "ramping-rate", "rate-bursts")


def is_open_loop(shape: object) -> bool:
    """True for arrival-rate shapes (requests arrive on the clock, not when a user is free)."""
    return isinstance(shape, _OpenLoopShape)


# --- the scenario ------------------------------------------------------------------------------


class Scenario(_Model):
    """A whole scenario. ``source_path`` is the file it came from (None when built in code)."""

    name: Name
    description: StrictStr | None = None
    duration: Annotated[Seconds, Field(gt=0)]
    warmup: Annotated[Seconds, Field(ge=0)] = 0.0
    window: Annotated[Seconds, Field(gt=0)] = 1.0
    targets: tuple[Target, ...] = Field(min_length=1)
    shape: Shape
    source_path: Path | None = Field(default=None, exclude=True)

    @property
    def base_dir(self) -> Path:
        """Where relative paths (npy data) are resolved: the scenario file's folder, or the cwd."""
        return self.source_path.parent if self.source_path is not None else Path.cwd()

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.name == name:
                return target
        raise KeyError(name)

    @field_validator("warmup")
    @classmethod
    def _warmup_shorter(cls, value: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration")
        if duration is not None and value >= duration:
            raise custom_error(f"must be shorter than duration ({_fmt_seconds(duration)}); got {_fmt_seconds(value)}")
        return value

    @field_validator("window")
    @classmethod
    def _window_fits(cls, value: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration")
        if duration is not None and value > duration:
            raise custom_error(f"must not be longer than duration ({_fmt_seconds(duration)}); got {_fmt_seconds(value)}")
        return value

    @field_validator("targets")
    @classmethod
    def _unique_target_names(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        first_index: dict[str, int] = {}
        checks: list[Check] = []
        for index, target in enumerate(targets):
            if target.name in first_index:
                checks.append(
                    ((index, "name"), f"duplicate target name {target.name!r} (also targets[{first_index[target.name]}])")
                )
            first_index.setdefault(target.name, index)
        if checks:
            raise checks_error(checks)
        return targets

    @field_validator("shape")
    @classmethod
    def _shape_fits_duration(cls, shape: Any, info: ValidationInfo) -> Any:
        duration = info.data.get("duration")
        if duration is None:
            return shape
        limit = _fmt_seconds(duration)
        if isinstance(shape, (RampShape, RampingRateShape)) and shape.over > duration:
            raise checks_error([(("over",), f"must not be longer than duration ({limit}); got {_fmt_seconds(shape.over)}")])
        if isinstance(shape, (BurstShape, RateBurstsShape)) and shape.first_burst_at >= duration:
            raise checks_error(
                [(("first_burst_at",), f"must be before the end of the run ({limit}); got {_fmt_seconds(shape.first_burst_at)}")]
            )
        if isinstance(shape, StagesShape):
            total = sum(stage.duration for stage in shape.stages)
            if total > duration + 1e-9:
                raise checks_error(
                    [(("stages",), f"the stages last {_fmt_seconds(total)} in total, longer than duration ({limit})")]
                )
        return shape
