"""summary.json as typed models (contract: docs/results.md).

`RunSummary` is what a run (or the demo) writes and what `inferload report`, `inferload compare`
and the demo read back; `inferload.results.files` holds the one writer and the one reader.

- Numbers keep their JSON type: an int stays an int and a float a float (`Number`), so a file
  written, read and written again is the same bytes.
- Keys that inferload writes as ``null`` (``cold_start_s``, ``server_side``, ``residual_ms``, a
  latency figure with no success) are always written; keys that only some runs have
  (``open_loop``, ``workers_lost``, ``worker_losses``, ``decoupled``, the demo's ``phases`` ...) are left out when
  absent (`omit_when_none`).
- Reading is strict about types (no "5" for 5, no true for 1) and tolerant about age: keys added
  after the first release (``steady_s``, ``kind``, ``residual_ms`` ...) may be missing, unknown
  keys are ignored. Per-target counts and rates accept ``null`` (shown as n/a), as they always
  have; inferload itself never writes null there.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainValidator, SerializerFunctionWrapHandler, model_serializer
from pydantic_core import PydanticCustomError

#: the summary.json contract's version that inferload writes (``RunSummary.schema_version``)
SCHEMA_VERSION = 2


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("number", "expected a number")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError("count", "expected a whole number")
    return value


#: a JSON number, kept as the int or float it was
Number = Annotated[int | float, PlainValidator(_number)]
#: a JSON whole number
Count = Annotated[int, PlainValidator(_count)]


class Section(BaseModel):
    """A part of summary.json: frozen, strict, unknown keys ignored; `omit_when_none` keys are
    left out of the JSON when None (all others are written, null included)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")
    omit_when_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.omit_when_none:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class LatencyMs(Section):
    """Client-side latency of successful requests, exact over all workers; None when none succeeded."""

    mean: Number | None
    p50: Number | None
    p90: Number | None
    p95: Number | None
    p99: Number | None
    p999: Number | None
    max: Number | None


class ServerSide(Section):
    """The server's own statistics between the end of the warm-up and the end of the run."""

    model_config = ConfigDict(extra="allow")  # a server reader may report more than these
    omit_when_none = frozenset({"scope", "shared_with", "unknown", "requests", "prefix_cache_hit_pct", "preemptions"})

    queue_ms_avg: Number | None
    compute_ms_avg: Number | None
    request_ms_avg: Number | None
    avg_batch_size: Number | None
    batch_size_histogram: dict[str, Count] | None  # batch size -> executions
    # other targets of the run on the same model of the same server: these figures are the model's,
    # for all of them together (scope "model"); absent when the target is the only one
    scope: str | None = None
    shared_with: list[str] | None = None
    unknown: dict[str, str] | None = None  # figure -> why this server does not report it (null above)
    #: the requests the server counted between the two readings (absent: it does not count them)
    requests: Count | None = None
    #: an LLM server's: the share of the prompt tokens asked that its prefix cache held, % (absent: not reported)
    prefix_cache_hit_pct: Number | None = None
    #: an LLM server's: the requests it preempted (its KV cache full) (absent: not reported)
    preemptions: Count | None = None


class SendLag(Section):
    """Open loop: intended send time -> actual send time, ms."""

    p50: Number | None
    p99: Number | None
    max: Number | None


class Burstiness(Section):
    """Open loop: the coefficient of variation (sd / mean) of the gaps between arrivals over the
    steady state (Poisson 1, evenly spaced 0, bursty above 1)."""

    #: between the requests' actual send times, all workers merged (None: fewer than 3 sent)
    sent_cv: Number | None
    #: between the intended times of the whole run's schedule, as the arrival law drew it
    scheduled_cv: Number | None
    #: gaps measured between sent requests
    sent_gaps: Count
    #: send times that reached the master after their window was folded (left out of sent_cv)
    late: Count = 0


class OpenLoop(Section):
    """Open-loop figures of one target over the steady state."""

    omit_when_none = frozenset({"burstiness"})

    configured_rps: Number
    arrivals: Count
    unsent: Count
    achieved_rps: Number
    achieved_ratio: Number | None
    send_lag_ms: SendLag
    burstiness: Burstiness | None = None  # older summaries have none


class Outage(Section):
    """A streak of refused connections to a target (the server was down or not listening)."""

    start: str  # ISO-8601, the streak's first refusal
    end: str  # ISO-8601, its last refusal
    failures: Count  # refused attempts in the streak (each one is also counted in `failures`)


class StreamFigures(Section):
    """A streamed target's own figures (Triton decoupled model over the gRPC stream), over the
    steady state, successful requests only; percentiles exact over all workers. The request's
    complete latency is the target's `latency_ms`."""

    requests: Count  # streamed requests that ended without error
    responses: Count  # responses that carried outputs (Triton's empty final response not counted)
    responses_per_s: Number
    responses_per_request: Number | None  # mean; None when no request succeeded
    max_responses_per_request: Count
    first_response_ms: LatencyMs  # send -> first response (requests with at least one response)
    inter_response_ms: LatencyMs  # between consecutive responses of one request


class GoodputSummary(Section):
    """The requests that met every per-request threshold of the target's ``generation.goodput``,
    over the steady state: the thresholds (ms; null: not set), the good requests, per second, and
    their share of every request the target completed, failures included (the attainment)."""

    ttft_ms: Number | None
    tpot_ms: Number | None
    e2e_ms: Number | None
    good: Count
    per_s: Number
    attainment_pct: Number | None  # None when no request completed


class TokenCountSummary(Section):
    """The generations counted both by the server's ``usage`` and by the target's tokenizer
    (``generation.tokenizer``): how many, on how many the two counts differ, the tokens each counted,
    and the tokenizer's count less usage's, in % of usage's (null: usage counted none)."""

    compared: Count
    differing: Count
    tokenizer_tokens: Count
    usage_tokens: Count
    difference_pct: Number | None


class GenerationServerSummary(Section):
    """What the server said it spent (llama.cpp's per-request ``timings``), joined to the client's
    figures request by request: of the ``generations`` it sent its times for, its prefill, its
    decode time per token, and the client's time to first token minus the server's prefill."""

    generations: Count
    prefill_ms: LatencyMs
    decode_ms_per_token: LatencyMs
    ttft_residual_ms: LatencyMs  # client TTFT - server prefill, per request (floored at 0)


class LengthFigures(Section):
    mean: Number
    min: Count
    max: Count


class GenerationLengthsSummary(Section):
    """A target's ``generation.lengths`` or ``generation.dataset`` over its distinct requests (its
    users send each in turn): the prompts' lengths as written (a data set's: its message contents) (``input_counted_in``: ``tokens``, counted with the target's
    tokenizer, or ``words``) and the output tokens asked (each request's ``max_tokens``); and the
    steady generations' mean output tokens as a share of the asked mean (100: the server generated
    what was asked; below: it stopped early, an end of sequence or its own limit)."""

    requests: Count
    input_tokens: LengthFigures | None
    input_counted_in: str | None
    output_tokens_asked: LengthFigures | None
    output_tokens_achieved_pct: Number | None


class TurnSummary(Section):
    """One turn position of a target's conversations (``generation.conversation``), over its steady
    successful generations: the time to the first token (the history's prefill shows in it, and a
    prefix cache's hits), and the prompt tokens the server counted (null: it sent no ``usage``)."""

    turn: Count
    generations: Count
    ttft_ms: LatencyMs
    prompt_tokens: LengthFigures | None


class GenerationSummary(Section):
    """A generative target's token figures (the engine's, from each generation's content events),
    over the steady state, successful generations only; percentiles exact over all workers. The
    time to the first token and the gaps between events are its `decoupled` block."""

    omit_when_none = frozenset({"goodput", "server", "ttft_from_intended_ms", "token_count", "lengths", "turns"})

    generations: Count
    output_tokens: Count
    output_tokens_per_s: Number
    output_tokens_per_request: Number | None  # mean; None when no generation succeeded
    max_output_tokens: Count
    #: how N was counted: usage (the server's), tokenizer, events (one per content event), mixed
    token_source: str | None
    #: present when the target's tokenizer counted generations the server's usage counted too
    token_count: TokenCountSummary | None = None
    ttst_ms: LatencyMs  # send -> the second token
    tpot_ms: LatencyMs  # per generation: (last content - first content) / (N - 1)
    itl_ms: LatencyMs  # between tokens, each gap shared by the tokens of its event
    #: present when the target sets ``generation.goodput``
    goodput: GoodputSummary | None = None
    #: present when the server sent its own times with its answers (llama.cpp's ``timings``)
    server: GenerationServerSummary | None = None
    #: open loop: the time to the first token from each arrival's intended send (TTFT + send lag)
    ttft_from_intended_ms: LatencyMs | None = None
    #: present when the target sets ``generation.lengths`` or ``generation.dataset``
    lengths: GenerationLengthsSummary | None = None
    #: present when the target holds conversations (``generation.conversation``): by turn, from 1
    turns: list[TurnSummary] | None = None


class BurstRecovery(Section):
    """One burst of a burst/rate-bursts shape: the tail's peak and the time back to the pre-burst p99
    (`inferload.results.summary`; null: not measured, or not back before the next burst)."""

    start_s: Number
    end_s: Number
    pre_burst_p99_ms: Number | None
    peak_p99_ms: Number | None
    recovery_s: Number | None
    server_recovery_s: Number | None
    failures: Count
    unsent: Count


class TargetSummary(Section):
    """One target's steady-state figures."""

    omit_when_none = frozenset({"kind", "open_loop", "outages", "decoupled", "generation", "bursts", "tail"})

    server: str  # "triton" | "torchserve"
    protocol: str  # "grpc" | "http"
    kind: str | None = None  # "triton-grpc" | "triton-http" | "torchserve-rest"
    model: str
    requests: Count | None
    failures: Count | None
    error_rate: Number | None
    throughput_rps: Number | None
    latency_ms: LatencyMs
    server_side: ServerSide | None
    cold_start_s: Number | None
    residual_ms: Number | None = None  # client mean - server request_ms_avg
    open_loop: OpenLoop | None = None
    outages: list[Outage] | None = None  # present when connections to the target were refused
    #: present for a target driven over the gRPC stream (a decoupled model); files of schema 1 called it ``streaming``
    decoupled: StreamFigures | None = Field(default=None, validation_alias=AliasChoices("decoupled", "streaming"))
    #: present for a generative target whose answers the engine read (openai-chat, openai-completions)
    generation: GenerationSummary | None = None
    bursts: list[BurstRecovery] | None = None  # present for burst and rate-bursts shapes: per burst, peak and recovery
    #: present for traced Triton targets (``trace``) and TorchServe targets: the tail anatomy, or why there is none
    #: (kept as the dict `inferload.results.tail` wrote; what readers index into is checked on reading: `TailView`)
    tail: dict[str, Any] | None = None


class _View(BaseModel):
    """A part of summary.json checked on reading only: the keys readers index into, each optional;
    other keys allowed. The summary keeps the value as it was written."""

    model_config = ConfigDict(strict=True, extra="allow")


class TailGroupView(_View):
    """``tail.above_p99`` or ``tail.around_p50``: each part's median ms and median share."""

    median_ms: dict[str, Number] = {}
    median_share: dict[str, Number] = {}


class ResidualHistogramView(_View):
    """``tail.residual_ms.histogram``: bin edges (ms), the count per bin and the count above the last edge."""

    edges_ms: list[Number] = []
    counts: list[Count] = []
    above: Count = 0


class ResidualView(_View):
    """``tail.residual_ms``: the per-request residual's figures and histogram."""

    histogram: ResidualHistogramView | None = None


class TailView(_View):
    """What report.html reads of ``targets.<t>.tail`` (`inferload.results.report.tail_html`)."""

    above_p99: TailGroupView | None = None
    around_p50: TailGroupView | None = None
    residual_ms: ResidualView | None = None


class SloCheck(Section):
    """One SLO threshold: its limit, the measured value (None: not measured, fails) and the verdict."""

    omit_when_none = frozenset({"note"})

    target: str
    metric: str  # the scenario's slo key: p99_ms, error_rate, min_throughput_rps, ...
    limit: Number
    value: Number | None
    passed: bool
    note: str | None = None  # e.g. a server figure shared by several targets of one model


class SloSection(Section):
    passed: bool
    checks: list[SloCheck]


class StreamingStats(Section):
    """What the InfluxDB stream wrote (with --influx-url)."""

    model_config = ConfigDict(extra="allow")

    points_written: Count
    points_dropped: Count
    points_pending: Count
    write_errors: Count
    last_error: str | None


class WorkerLoss(Section):
    """A worker of a distributed run that went missing, and how long its load was not carried."""

    omit_when_none: ClassVar[frozenset[str]] = frozenset({"returned_after_s"})

    worker: str
    lost_at: str  # ISO-8601, when the master declared it missing (about 4-5 s after its last heartbeat)
    respread_after_s: Number | None  # until the live workers carried its users (and arrival share); null: never
    #: it came back this long after it was declared missing (a stall, not a death) and was told to quit:
    #: its users were already on the live workers (left out: it did not come back)
    returned_after_s: Number | None = None


class CapacityPoint(Section):
    """One rate of a capacity search: its p99 with the 95 % interval (high None: open), the fitted curve
    there, and the rate's verdict (pass, fail, unsure)."""

    rate: Number
    p99_ms: Number | None
    p99_low_ms: Number | None
    p99_high_ms: Number | None
    fitted_p99_ms: Number | None
    verdict: str


class DemoCapacity(Section):
    """The demo's capacity pass for one server: the highest open-loop rate that met its bound (p99 <=
    ``p99_ms``; for the LLM demo ``bound`` in words: goodput under TTFT and TPOT thresholds, p99_ms
    null), the first over it, and the server's settings as read back from it; then the capacity's
    estimate and 95 % interval (high None: open), the binding constraint and the verification in words,
    and the curve (every rate measured)."""

    omit_when_none = frozenset({"bound", "estimate_rps", "interval_rps", "binding", "verification", "curve", "precision_reached"})

    p99_ms: Number | None
    bound: str | None = None
    max_rps: Number | None
    first_failing_rps: Number | None
    config: str
    estimate_rps: Number | None = None
    interval_rps: list[Number | None] | None = None
    binding: str | None = None
    verification: str | None = None
    curve: list[CapacityPoint] | None = None
    #: the search's interval within the demo's precision (±10 %); the line says "at least" otherwise
    precision_reached: bool | None = None


class RunSummary(Section):
    """summary.json: one run (or the demo's phases together)."""

    omit_when_none = frozenset(
        {
            "schema_version",
            "steady_s",
            "model",
            "users",
            "cold_start_s",
            "phases",
            "workers_lost",
            "worker_losses",
            "rejected_reports",
            "streaming",
            "capacity",
            "calibration",
        }
    )

    #: the contract's version (docs/results.md): 2 since a target's ``streaming`` became ``decoupled``;
    #: a file without it is of version 1 (and is written again without it)
    schema_version: Count | None = None
    run_id: str
    scenario: str
    started_at: str  # ISO-8601
    duration_s: Number
    warmup_s: Number
    steady_s: Number | None = None
    workers: Count
    # the demo only: its model, users, each server's cold start, and each phase's run id
    model: str | None = None
    users: Count | None = None
    cold_start_s: dict[str, Number | None] | None = None
    phases: dict[str, str] | None = None
    capacity: dict[str, DemoCapacity] | None = None  # the demo's closing pass: each server's capacity under a p99
    targets: dict[str, TargetSummary]
    slo: SloSection
    workers_lost: list[str] | None = None  # distributed runs: workers that went missing
    worker_losses: list[WorkerLoss] | None = None  # distributed runs: each loss, when, and the gap until re-spread
    rejected_reports: Count | None = None  # distributed runs: worker reports refused (not signed with the run key)
    streaming: StreamingStats | None = None
    interrupted: bool = False  # stopped early by SIGINT/SIGTERM: figures cover the part that ran
    #: the calibration certificate that applied (`inferload.results.calibration`); absent: none did
    calibration: dict[str, Any] | None = None
