"""What a scenario sends and where: targets, their input tensors and data, and their SLO thresholds.

Checks that span keys (an input's data against its dtype, the request's size, npy files, unique
names) report each problem at its own key through ``checks_error``. npy files are checked only
when the validation context holds a ``base_dir``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from inferload.scenario import bodies, datasets, tensors
from inferload.scenario.addresses import ManagementUrl, MetricsUrl, normalise_address
from inferload.scenario.expected import ExpectedField, ExpectedSpec, check_expected
from inferload.scenario.fields import FrozenModel, Name, Number, Seconds, Token, Version, repeats
from inferload.scenario.generation import DEFAULT_PROMPT, GenerationSpec, generative_problems
from inferload.scenario.generation_dataset import has_message_lists
from inferload.scenario.headers import EnvName, HeaderName, HeaderValue, check_headers, request_headers
from inferload.scenario.input_files import not_regular_problem, scenario_file
from inferload.scenario.inputs import DATASET_HINT, InputSpec
from inferload.scenario.kinds import (
    GENERATIVE_KINDS,
    SERVER_KINDS,
    TRITON_KINDS,
    BentoMLKind,
    GenerativeKind,
    KServeKind,
    Protocol,
    Server,
    ServerKind,
    TargetKind,
    TorchServeKind,
    TritonTensorKind,
    has_role,
)
from inferload.scenario.limits import (
    DEFAULT_MAX_ANSWER_BYTES,
    MAX_ANSWER_BYTES,
    MAX_BYTES_ELEMENTS,
    MAX_INPUT_BYTES,
    MAX_REQUEST_BYTES,
    MAX_SEQUENCE_LENGTH,
    MAX_SEQUENCES_PER_USER,
    MAX_SMALL_FILE_BYTES,
    mib,
)
from inferload.scenario.messages import Check, checks_error, custom_error
from inferload.scenario.tls import TlsSettings, check_tls, tls_from_scheme, tls_shorthand

# A target's ``sequence`` key: how a sequence (stateful) model is driven, on Triton or TorchServe.
#
# A Triton model with ``sequence_batching`` in its config keeps state per sequence: every request
# carries a correlation ID and START/END flags. ``length`` is the number of requests per sequence
# (START on the first, END on the last), ``concurrent`` the number of sequences each user keeps open
# at once, its calls taking them in turn (interleaved). The start checks read the model's config: a
# sequence model without the key is driven with these defaults (and the run says so); the key on a
# model that is not a sequence model is a start error (``inferload.startchecks.triton``).
#
# A TorchServe model with ``sequenceBatching`` (its model-config.yaml) keeps state per sequence id,
# the request header ``ts_request_sequence_id``; a request without one opens a sequence of its own.
# With the key, each user's sequences carry ids of their own in that header, ``length`` requests each
# (the last also carrying ``ts_request_sequence_end: true``, which closes it on TorchServe's
# continuous batching), ``concurrent`` of them per user in turn; TorchServe serves the requests of one
# sequence one at a time, so one id for every user (a static header) serialises the whole load.
#: requests per sequence when the key is not given (perf_analyzer's ``--sequence-length`` default)
DEFAULT_SEQUENCE_LENGTH = 20
#: TorchServe's request headers of a sequence (its defaults; config.properties ts_header_key_sequence_* rename them)
TS_SEQUENCE_END_HEADER = "ts_request_sequence_end"


class SequenceSpec(FrozenModel):
    """``sequence: {length: 8, concurrent: 2}``; ``sequence: {}`` takes both defaults."""

    length: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCE_LENGTH)] = DEFAULT_SEQUENCE_LENGTH
    concurrent: Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCES_PER_USER)] = 1


def static_sequence_id_note(name: str, kind: str, headers: Mapping[str, str] | None, spec: SequenceSpec | None) -> str | None:
    """A TorchServe target that sends one ``ts_request_sequence_id`` in its static headers (no ``sequence``
    key): what that does to the load, and the key that gives each user ids of its own; None otherwise."""
    header = SERVER_KINDS[kind].sequence_id_header if kind in SERVER_KINDS else None
    if header is None or spec is not None:
        return None
    value = next((v for k, v in (headers or {}).items() if k.lower() == header), None)
    if value is None:
        return None
    return (
        f"target {name!r}: every request of every user carries the one {header} {value!r} (its headers):"
        " TorchServe serves the requests of one sequence one at a time, so the whole load waits in one queue; remove the"
        " header and set the target's sequence: {length, concurrent} for sequence ids of each user's own"
    )


# A Triton target's ``trace`` key: the per-request join with Triton's trace API (the tail anatomy).
#
# ``trace: {rate: 0.01}`` turns Triton's tracing on for the target's model during the run (one
# request in ``1/rate`` traced, timestamps only) and restores the model's previous trace settings
# after; ``slowest: true`` traces every request so that the slowest ones are always among those
# joined (costs the server more: see docs/observability.md); ``file`` is Triton's trace file as the
# load generator sees it (default: the path Triton reports in its trace settings, readable when the
# server runs on this machine). ``trace: {}`` takes the defaults.
#
# ``source`` says where the run reads Triton's trace records: ``file`` (default) from the trace file
# on this machine; ``influxdb`` from the ``triton_traces`` points the collector sidecar next to a
# remote Triton writes (``python -m collectors --scenario ...``; the run must stream to InfluxDB with
# the collector's ``--run-id``). With ``influxdb``, ``file`` is the trace file as the collector sees
# it (default: the path Triton reports).
#: the share of requests traced when ``rate`` is not given (cost measured in docs/benchmarks-history.md)
DEFAULT_TRACE_RATE = 0.01
#: where a run reads the trace records: the trace file here, or the collector's points in InfluxDB
TraceSource = Literal["file", "influxdb"]


class TraceSpec(FrozenModel):
    """``trace: {rate: 0.01, slowest: false, file: /path/of/trace.json, source: file}``."""

    rate: Annotated[Number, Field(gt=0, le=1)] = DEFAULT_TRACE_RATE
    slowest: StrictBool = False
    file: StrictStr | None = None
    source: TraceSource = "file"

    @field_validator("file")
    @classmethod
    def _file_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise custom_error("expected the path of Triton's trace file (its --trace-config triton,file=...); got ''")
        return value

    @property
    def every_nth(self) -> int:
        """Triton's ``trace_rate``: one request in this many is traced (1 with ``slowest``)."""
        return 1 if self.slowest else max(1, round(1.0 / self.rate))


# The scenario keys of a ``bentoml-http`` target: which bodies it sends (``content_type``).
#
# A BentoML API takes its parameters by name: ``json`` (the default) sends a JSON object with one
# field per input, the input's array as nested lists (the batch dimension first, as a batchable API
# wants it); ``raw`` sends one file of a data set as ``multipart/form-data``, in the form field named
# after the input (what BentoML expects for a ``pathlib.Path`` or image parameter).
BENTOML_CONTENT_TYPES = ("json", "raw")


def bentoml_content_type(value: str | None, inputs: Sequence[Any], batch_size: int) -> str:
    """The target's content_type (default ``json``); a custom error naming what fits otherwise."""
    if value is None:
        return "json"
    if value not in BENTOML_CONTENT_TYPES:
        raise custom_error(
            "a bentoml-http target sends json (a JSON object, one field per input) or raw (a data set's file"
            f" as multipart/form-data); got {value!r}"
        )
    if value == "raw" and len(inputs) > 1:
        raise custom_error(f"raw bodies carry one file (one input); this target has {len(inputs)} (use json)")
    if value == "raw" and batch_size != 1:
        raise custom_error(f"raw bodies carry one file each: batch_size must be 1; got {batch_size}")
    return value


ContentType = Literal["octet-stream", "npy", "json", "raw", "text"]
Rotation = Literal["round-robin", "random"]
ResponseCheck = Literal["none", "status", "shape", "expected"]

_DECOUPLED_HINT = (
    "no key is needed for a decoupled model: the start check reads it from the model's config"
    " (model_transaction_policy {decoupled: true}) and every request goes on a gRPC stream"
)

#: unknown keys users write for something the scenario spells otherwise: model -> key -> what to write
OLD_SPELLINGS: dict[str, dict[str, str]] = {
    "Target": {
        "body_file": (
            "to send a file as each request's body (what curl -T sends), use content_type: raw with the file in a"
            " folder data set, inputs: [{name: ..., dtype: UINT8, shape: [-1], data: {dataset: FOLDER, pattern: NAME}}]"
        ),
        "body": (
            "a body of your own is content_type: json with body_template: JSON text in which $data becomes the"
            " request's data (body_template: '{\"instances\": $data}'); a body from a file is content_type: raw with a"
            " folder data set"
        ),
        "decoupled": _DECOUPLED_HINT,
        "streaming": _DECOUPLED_HINT,
    },
    "DataSpec": {key: DATASET_HINT for key in ("file", "files", "folder", "dir", "directory", "data_set")},
}

# --- targets -----------------------------------------------------------------------------------


class Slo(FrozenModel):
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
    # streams: the time to the first response (a generation's first token, a decoupled model's first response)
    ttft_p50_ms: Annotated[Number, Field(gt=0)] | None = None
    ttft_p99_ms: Annotated[Number, Field(gt=0)] | None = None
    # generations (the generative kinds): time per output token, inter-token latency, output tokens/s
    tpot_p99_ms: Annotated[Number, Field(gt=0)] | None = None
    itl_p99_ms: Annotated[Number, Field(gt=0)] | None = None
    min_output_tokens_per_s: Annotated[Number, Field(gt=0)] | None = None
    #: the least share of requests (%) meeting every `generation.goodput` threshold
    min_goodput_pct: Annotated[Number, Field(ge=0, le=100)] | None = None


#: the most `weight` of a target: shares finer than a millionth mean nothing, and Locust's float arithmetic
#: gave every user to the lightest of two targets weighted 10**30 and 1
MAX_WEIGHT = 1_000_000

#: the `slo` keys only a generative target measures
GENERATION_SLO_KEYS = ("tpot_p99_ms", "itl_p99_ms", "min_output_tokens_per_s", "min_goodput_pct")


class Target(FrozenModel):
    """What every target has: one server endpoint serving one model, and the request sent to it.

    The keys of one kind are its class's: `TritonTarget`, `TorchServeTarget`, `KServeTarget`,
    `BentoMLTarget`, `GenerativeTarget` (`AnyTarget`, told apart by ``kind``); a key of another
    kind's class is refused where it is written. ``Target(...)`` and ``Target.model_validate(...)``
    make the class of the kind given."""

    name: Name
    kind: TargetKind
    address: StrictStr
    #: TLS for this target's connections (CA, client certificate, server name); an https:// address implies it
    tls: Annotated[TlsSettings | None, BeforeValidator(tls_shorthand)] = None
    model: Token
    version: Version = None
    batch_size: Annotated[StrictInt, Field(ge=1)] = 1
    #: the request's tensors (a generative kind: none, or one BYTES input that gives the prompts)
    inputs: tuple[InputSpec, ...] = Field(default=None, validate_default=True)
    outputs: tuple[Token, ...] = ()
    timeout: Annotated[Seconds, Field(gt=0)] = 10.0
    #: the most bytes of one answer the client buffers; a longer answer fails its request
    max_answer_bytes: Annotated[StrictInt, Field(ge=1024, le=MAX_ANSWER_BYTES)] = DEFAULT_MAX_ANSWER_BYTES
    #: the target's share of the users (closed loop: whole users) or arrivals (open loop): weight / all weights
    weight: Annotated[StrictInt, Field(ge=1, le=MAX_WEIGHT)] = 1
    #: the order data-set samples are sent in: ``round-robin`` (file order) or ``random`` (seeded shuffle)
    rotation: Rotation = "round-robin"
    rotation_seed: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] | None = None
    #: what makes an answer a success: ``none`` (any 2xx/OK answer), ``status`` (HTTP 200, body not read;
    #: TorchServe's default), ``shape`` (output shapes; Triton's default; TorchServe: a JSON list of batch_size items)
    #: ``response_check: expected``: the answers' expected values (a file) and the tolerance
    expected: ExpectedField = None
    response_check: ResponseCheck | None = Field(default=None, validate_default=True)
    metrics_url: MetricsUrl = None
    #: static request headers (gRPC metadata for triton-grpc targets)
    headers: dict[HeaderName, HeaderValue] | None = None
    #: request headers whose values each user reads from an environment variable (the name is kept, never the value)
    headers_from_env: dict[HeaderName, EnvName] | None = None
    slo: Slo | None = None

    def __new__(cls, *args: Any, **data: Any) -> Target:
        """``Target(**keys)`` makes the kind's class (whose ``__init__`` then validates the keys as its own)."""
        if cls is Target and data:
            kind = data.get("kind")
            if not isinstance(kind, str) or kind not in TARGET_CLASSES:
                _ANY_TARGET.validate_python(data)  # raises the ValidationError that names the kinds
            made: Target = super().__new__(TARGET_CLASSES[str(kind)])
            return made
        return super().__new__(cls)

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Any:
        """``Target.model_validate(keys)`` is the kind's class; a kind's class validates as its own."""
        kind = obj.get("kind") if isinstance(obj, Mapping) else None
        if cls is Target and isinstance(kind, str) and kind in TARGET_CLASSES:
            cls = TARGET_CLASSES[kind]
        elif cls is Target:  # not a kind: the error names the kinds there are
            return _ANY_TARGET.validate_python(obj, strict=strict, from_attributes=from_attributes, context=context)
        return super().model_validate(
            obj, strict=strict, extra=extra, from_attributes=from_attributes, context=context, by_alias=by_alias, by_name=by_name
        )

    @property
    def server(self) -> Server:
        """The server family the kind speaks to ('kserve': any Open Inference Protocol / KServe v1 server)."""
        return SERVER_KINDS[self.kind].server

    @property
    def protocol(self) -> Protocol:
        return SERVER_KINDS[self.kind].protocol

    @property
    def record(self) -> ServerKind:
        """The kind's record: its server, wire and user classes."""
        return SERVER_KINDS[self.kind]

    def request_headers(self, base_dir: Path) -> dict[str, str]:
        """The headers its requests carry, secrets read now (``HeadersError`` naming the target otherwise);
        files named relative to ``base_dir``."""
        return request_headers(self.name, self.headers, self.headers_from_env, None, base_dir)

    _tls_from_scheme = model_validator(mode="before")(tls_from_scheme)

    @model_validator(mode="before")
    @classmethod
    def _keys_of_another_kind(cls, data: Any) -> Any:
        """A key that another kind's class has is refused where it is written, naming the kinds that take it."""
        if not isinstance(data, Mapping) or cls is Target:
            return data
        checks: list[Check] = []
        for key in data:
            takers = key_taken_by(key) if isinstance(key, str) and key not in cls.model_fields else ()
            if takers:
                named = f"{', '.join(takers[:-1])} and {takers[-1]}" if len(takers) > 1 else takers[0]
                checks.append(((key,), f"only applies to {named} targets; this target is {data.get('kind')}"))
        if checks:
            raise checks_error(checks)
        return data

    @field_validator("address")
    @classmethod
    def _normalise_address(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind is None:
            return value
        try:
            return normalise_address(kind, value)
        except ValueError as error:
            article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
            raise custom_error(f"{error} (for {article} {kind} target)") from None

    @field_validator("version")
    @classmethod
    def _triton_version_is_a_number(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if value is not None and kind in TRITON_KINDS and not value.isdigit():
            raise custom_error(f"expected a Triton model version number like 1; got {value!r}")
        if value is not None and kind in SERVER_KINDS and not SERVER_KINDS[kind].versions:
            raise custom_error("KServe's v1 protocol has no model versions (POST /v1/models/<name>:predict); remove version")
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_given(cls, value: object, info: ValidationInfo) -> object:
        """A tensor kind's inputs are required and not empty; a generative kind's may be left out (as
        they may where the kind itself is wrong: its own error says so, not one about inputs)."""
        generative = info.data.get("kind") in GENERATIVE_KINDS
        if value is None:
            if generative or "kind" not in info.data:
                return ()
            raise custom_error("required key is missing")
        if not generative and isinstance(value, (list, tuple)) and not value:
            raise custom_error("must not be empty (a request sends one input at least)")
        return value

    @field_validator("inputs")
    @classmethod
    def _check_inputs(cls, inputs: tuple[InputSpec, ...], info: ValidationInfo) -> tuple[InputSpec, ...]:
        fits: list[Check] = [
            ((index, "data", *path), message)
            for index, spec in enumerate(inputs)
            for path, message in tensors.data_dtype_problems(spec.data, spec.dtype)
        ]
        if fits:  # the data a dtype cannot hold: the sizes and files below would not mean anything
            raise checks_error(fits)
        batch_size = info.data.get("batch_size", 1)
        base_dir = (info.context or {}).get("base_dir")
        checks: list[Check] = [
            ((index, "name"), f"duplicate input name {name!r} (also inputs[{first}])")
            for index, name, first in repeats(spec.name for spec in inputs)
        ]
        sizes = [tensors.request_nbytes(spec, batch_size) for spec in inputs]
        for index, (spec, size) in enumerate(zip(inputs, sizes, strict=True)):
            elements = batch_size * math.prod(spec.shape) if all(dim >= 0 for dim in spec.shape) else 0
            if spec.dtype == "BYTES" and elements > MAX_BYTES_ELEMENTS:
                checks.append(
                    (
                        (index, "shape"),
                        f"{batch_size} x {list(spec.shape)} BYTES is {elements:,} elements per request; at most"
                        f" {MAX_BYTES_ELEMENTS:,} (each is a Python object of about 100 bytes in the client besides its"
                        " length)",
                    )
                )
            elif size > MAX_INPUT_BYTES:
                checks.append(
                    (
                        (index, "shape"),
                        f"{batch_size} x {list(spec.shape)} {spec.dtype} is {size:,} bytes per request;"
                        f" at most {MAX_INPUT_BYTES:,} ({mib(MAX_INPUT_BYTES)}) are allowed",
                    )
                )
            elif spec.data.generator == "npy" and spec.data.dataset is None and base_dir is not None:
                try:
                    tensors.load_npy(spec, batch_size, Path(base_dir))
                except ValueError as error:
                    checks.append(((index, "data", "path"), str(error)))
        if base_dir is not None and not checks and any(spec.data.dataset is not None for spec in inputs):
            checks.extend(datasets.read_target_datasets(inputs, batch_size, Path(base_dir), info.data.get("name", "?"))[1])
        if sum(sizes) > MAX_REQUEST_BYTES and max(sizes) <= MAX_INPUT_BYTES:
            checks.append(
                (
                    (),
                    f"the {len(inputs)} inputs add up to {sum(sizes):,} bytes per request (batch_size {batch_size});"
                    f" at most {MAX_REQUEST_BYTES:,} ({mib(MAX_REQUEST_BYTES)}) are allowed in all",
                )
            )
        if checks:
            raise checks_error(checks)
        return inputs

    @model_validator(mode="after")
    def _generation_slo_keys(self) -> Target:
        """The generation figures' thresholds: only a generative target measures them."""
        if self.record.generative or self.slo is None:
            return self
        refused: list[Check] = [
            (("slo", key), f"only a generative target measures it ({', '.join(GENERATIVE_KINDS)}); this target is {self.kind}")
            for key in GENERATION_SLO_KEYS
            if getattr(self.slo, key) is not None
        ]
        if refused:
            raise checks_error(refused)
        return self

    @field_validator("rotation_seed")
    @classmethod
    def _seed_for_random(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("rotation") != "random":
            raise custom_error(f"only applies to rotation: random; this target's rotation is {info.data.get('rotation')}")
        return value

    @field_validator("outputs")
    @classmethod
    def _unique_outputs(cls, outputs: tuple[str, ...]) -> tuple[str, ...]:
        checks: list[Check] = [((index,), f"duplicate output name {name!r}") for index, name, _ in repeats(outputs)]
        if checks:
            raise checks_error(checks)
        return outputs

    @field_validator("expected")
    @classmethod
    def _expected_file(cls, value: ExpectedSpec | None, info: ValidationInfo) -> ExpectedSpec | None:
        """Relative to the scenario file; read and checked against the target when its folder is known."""
        base_dir = (info.context or {}).get("base_dir")
        if value is None or base_dir is None or "kind" not in info.data:
            return value
        checks = check_expected(value, info.data["kind"], info.data.get("outputs", ()), info.data.get("inputs"), Path(base_dir))
        if checks:
            raise checks_error(checks)
        return value.model_copy(update={"path": str((Path(base_dir) / value.path).resolve())})

    @model_validator(mode="after")
    def _check_headers(self) -> Target:
        checks = check_headers(self.kind, self.headers or {}, self.headers_from_env or {})
        checks += check_tls(self.kind, self.tls)
        if self.response_check == "expected" and self.expected is None:
            checks.append((("expected",), "required with response_check: expected (a file of the expected answers)"))
        if self.expected is not None and self.response_check != "expected":
            checks.append((("response_check",), f"is {self.response_check!r}, but an expected file is given: use expected"))
        if self.metrics_url is not None and not has_role(self.server, "counters"):
            checks.append((("metrics_url",), f"inferload reads no metrics page of a {self.kind} target's server; remove it"))
        if checks:
            raise checks_error(checks)
        return self

    @field_validator("response_check")
    @classmethod
    def _default_response_check(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            return value
        kind = info.data.get("kind")
        if kind is None:
            return None
        if info.data.get("expected") is not None:
            return "expected"
        # a generative kind's "shape": its answer read as the server's format has it (a stream to its end)
        return SERVER_KINDS[kind].default_check


def _check_body_data(target: TorchServeTarget | BentoMLTarget, info: ValidationInfo) -> Any:
    """raw and text bodies need a data source that gives files or text (bodies.body_problems)."""
    if target.content_type in ("raw", "text") and len(target.inputs) == 1:
        base_dir = (info.context or {}).get("base_dir")
        checks = bodies.body_problems(target.content_type, target.inputs[0], Path(base_dir) if base_dir else None)
        if checks:
            raise checks_error([(("inputs", 0, *path), message) for path, message in checks])
    return target


class TritonTarget(Target):
    """A Triton model over gRPC or HTTP (KServe v2 tensors): sequence models and the trace join too."""

    kind: TritonTensorKind
    #: a sequence (stateful) model: requests per sequence and sequences open per user
    sequence: SequenceSpec | None = None
    #: trace a share of requests and join them with the client's times (the tail anatomy)
    trace: TraceSpec | None = None


class TorchServeTarget(Target):
    """A TorchServe model over its REST inference API: the bodies it sends, its management API, its
    key file, and sequence models (their ids in TorchServe's headers)."""

    kind: TorchServeKind
    content_type: ContentType = "octet-stream"
    #: content_type json: JSON text in which each ``$data`` becomes the request's data
    body_template: StrictStr | None = None
    #: the Content-Type header (default per content_type; raw: from the files' suffixes)
    media_type: StrictStr | None = None
    #: TorchServe's management API (``http://host:8081``): the start check lists the served models from it
    management_url: ManagementUrl = None
    #: TorchServe's key_file.json; requests carry ``Authorization: Bearer <inference key>``
    token_file: StrictStr | None = None
    #: a sequence (stateful) model: requests per sequence and sequences open per user
    sequence: SequenceSpec | None = None

    def request_headers(self, base_dir: Path) -> dict[str, str]:
        """Its headers, and ``Authorization`` with the inference key of its ``token_file``."""
        return request_headers(self.name, self.headers, self.headers_from_env, self.token_file, base_dir)

    @field_validator("content_type", mode="before")
    @classmethod
    def _content_type_default(cls, value: object) -> object:
        return "octet-stream" if value is None else value  # ``content_type:`` left empty: the default

    @field_validator("content_type")
    @classmethod
    def _content_type_fits(cls, value: str, info: ValidationInfo) -> str:
        inputs = info.data.get("inputs", ())
        if value in ("npy", "json", "raw", "text") and len(inputs) > 1:
            raise custom_error(f"{value} bodies carry one input; this target has {len(inputs)} (use octet-stream)")
        if value == "raw" and info.data.get("batch_size", 1) != 1:
            raise custom_error(f"raw bodies carry one file each: batch_size must be 1; got {info.data['batch_size']}")
        return value

    @field_validator("body_template")
    @classmethod
    def _check_body_template(cls, value: str | None, info: ValidationInfo) -> str | None:
        problem = bodies.template_key_problem(value, info.data.get("content_type"))
        if problem:
            raise custom_error(problem)
        return value

    @field_validator("media_type")
    @classmethod
    def _check_media_type(cls, value: str | None) -> str | None:
        problem = None if value is None else bodies.media_type_problem(value)
        if problem:
            raise custom_error(problem)
        return None if value is None else value.strip()

    @field_validator("token_file")
    @classmethod
    def _token_file_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario file; when it is there (TorchServe writes it when it starts: it may
        not be there yet), a regular file of a few hundred bytes."""

        def problem(path: Path) -> str | None:
            if not path.exists():
                return None
            found = not_regular_problem(path)
            if found is None and path.stat().st_size > MAX_SMALL_FILE_BYTES:
                found = f"{path} is {path.stat().st_size:,} bytes; TorchServe's key_file.json is a few hundred"
            return found

        return scenario_file(value, info, "TorchServe's key_file.json", problem)

    @model_validator(mode="after")
    def _headers_the_keys_set(self) -> TorchServeTarget:
        """``token_file`` sends Authorization and ``sequence`` sets ``ts_request_sequence_id`` per
        sequence: a header of either name too would be overwritten, so it is refused where it is written."""
        checks: list[Check] = []
        written = (("headers", self.headers), ("headers_from_env", self.headers_from_env))
        if self.token_file is not None:
            checks += [
                ((key, name), "token_file already sends Authorization; give one or the other")
                for key, headers in written
                for name in headers or {}
                if name.lower() == "authorization"
            ]
        header = self.record.sequence_id_header
        if self.sequence is not None and header is not None:
            checks += [
                (
                    (key, name),
                    f"is set per sequence by this target's sequence key (a new id every {self.sequence.length} requests); remove it",
                )
                for key, headers in written
                for name in headers or {}
                if name.lower() == header
            ]
        if checks:
            raise checks_error(checks)
        return self

    @model_validator(mode="after")
    def _check_template_size(self) -> TorchServeTarget:
        """A ``body_template`` that repeats ``$data`` repeats the request's data: the body stays within the bound."""
        if self.body_template is None or not self.inputs:
            return self
        copies = self.body_template.count(bodies.DATA_PLACEHOLDER)
        size = copies * bodies.json_body_estimate(self.inputs[0], self.batch_size)
        if copies > 1 and size > MAX_REQUEST_BYTES:
            raise checks_error(
                [
                    (
                        ("body_template",),
                        f"{bodies.DATA_PLACEHOLDER} appears {copies:,} times: each request's body would be about"
                        f" {size:,} bytes of JSON; at most {MAX_REQUEST_BYTES:,} ({mib(MAX_REQUEST_BYTES)})",
                    )
                ]
            )
        return self

    _body_data = model_validator(mode="after")(_check_body_data)


class KServeTarget(Target):
    """A model on a KServe (or any Open Inference Protocol) server: v2 over HTTP or gRPC, or v1."""

    kind: KServeKind


class BentoMLTarget(Target):
    """A BentoML service's API: its parameters by name, as JSON or as a file."""

    kind: BentoMLKind
    content_type: Literal["json", "raw"] = Field(default=None, validate_default=True)

    @field_validator("content_type", mode="before")
    @classmethod
    def _bentoml_content_type(cls, value: str | None, info: ValidationInfo) -> str:
        return bentoml_content_type(value, info.data.get("inputs", ()), info.data.get("batch_size", 1))

    _body_data = model_validator(mode="after")(_check_body_data)


class GenerativeTarget(Target):
    """A model that generates text: a prompt per request (``generation``), its answer a stream of
    tokens (OpenAI chat or completions, Triton's generate)."""

    kind: GenerativeKind
    #: the prompt and what is asked of the answer (scenario.generation)
    generation: GenerationSpec = GenerationSpec()

    @field_validator("generation", mode="before")
    @classmethod
    def _generation_default(cls, value: object) -> object:
        return {} if value is None else value  # ``generation:`` left empty: every default

    @model_validator(mode="after")
    def _generative_keys(self) -> GenerativeTarget:
        """Its inputs give its prompts, and it takes none of the tensor keys."""
        generation = self.generation
        # a prompt other than the default (a target written out carries the default: not given)
        prompt_given = generation.prompt != DEFAULT_PROMPT
        tensor_keys: dict[str, object] = {"outputs": self.outputs, "expected": self.expected}
        if self.server != "triton":  # Triton's generate takes a model version
            tensor_keys["version"] = self.version
        made_prompts = None
        if generation.asks_prompts():
            made_prompts = "dataset" if generation.dataset is not None else "lengths"
        checks = generative_problems(self.inputs, prompt_given, self.batch_size, tensor_keys, self.kind, made_prompts)
        dataset = generation.dataset
        if dataset is not None and not self.record.chat and Path(dataset).is_file() and has_message_lists(dataset):
            checks.append(
                (
                    ("generation", "dataset"),
                    f"a messages line is a chat's: only an openai-chat target sends it; this target is {self.kind}",
                )
            )
        if generation.conversation is not None and not self.record.chat:
            checks.append(
                (
                    ("generation", "conversation"),
                    f"a conversation is a chat's messages: only an openai-chat target holds one; this target is {self.kind}",
                )
            )
        if self.response_check != "shape":
            read_by_event = {
                "goodput": generation.goodput,
                "tokenizer": generation.tokenizer,
                "conversation": generation.conversation,
            }
            checks.extend(
                (
                    ("generation", key),
                    f"needs response_check: shape (the stream read event by event); it is {self.response_check!r}",
                )
                for key, value in read_by_event.items()
                if value is not None
            )
        if self.slo is not None and self.slo.min_goodput_pct is not None and generation.goodput is None:
            checks.append(
                (
                    ("slo", "min_goodput_pct"),
                    "needs generation.goodput: the per-request thresholds (ttft_ms, tpot_ms, e2e_ms) a good request meets",
                )
            )
        if checks:
            raise checks_error(checks)
        return self


#: a target of any kind, its class chosen by ``kind`` (what a scenario's ``targets:`` entry is)
AnyTarget = Annotated[
    TritonTarget | TorchServeTarget | KServeTarget | BentoMLTarget | GenerativeTarget, Field(discriminator="kind")
]
_ANY_TARGET: TypeAdapter[Any] = TypeAdapter(AnyTarget)
#: each target class, by kind
TARGET_CLASSES: dict[str, type[Target]] = {
    kind: model
    for model in (TritonTarget, TorchServeTarget, KServeTarget, BentoMLTarget, GenerativeTarget)
    for kind in get_args(model.model_fields["kind"].annotation)
}


def key_taken_by(key: str) -> tuple[str, ...]:
    """The kinds whose class has ``key`` (every kind for a key of `Target`'s own)."""
    return tuple(kind for kind, model in TARGET_CLASSES.items() if key in model.model_fields)


def sequence_of(target: Target) -> SequenceSpec | None:
    """The target's ``sequence`` key (a Triton or TorchServe target's; None for the kinds without one)."""
    return target.sequence if isinstance(target, (TritonTarget, TorchServeTarget)) else None


def trace_of(target: Target) -> TraceSpec | None:
    """The target's ``trace`` key (a Triton target's; None for the kinds without one)."""
    return target.trace if isinstance(target, TritonTarget) else None
