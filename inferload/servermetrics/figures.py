"""The figures of what a server did between two readings: the one place they are computed.

summary.json's ``server_side`` (warm-up end → stop), windows.csv's ``server_request_ms`` (one
window) and the collector's ``server`` and ``batch_sizes`` points (one scrape interval) all come
from ``server_figures(before, after)``. The denominators, decided once (d = after − before):

    queue_ms          d(queue_us)   / d(queued)      queue time per request that was queued
    compute_ms        d(compute_us) / d(computed)    compute time per request the model computed
    request_ms        d(request_us) / d(requests)    server time per successful request
    avg_batch_size    items per model execution: the batch histogram's mean, sum(size x d(batches[size])) /
                      sum(d(batches[size])), when the server reports batch sizes; else d(inferences) /
                      d(executions)
    batch histogram   d(batches[size]) for each size that grew (executions of each batch size)
    *_per_s           d(inferences), d(executions), d(failures) / (after.taken_at − before.taken_at)
    pending, running  after.pending, after.running (gauges, as read)
    kv_cache_used_pct after.kv_cache_used x 100 (a gauge, as read)
    prefix_cache_hit_pct  d(cached_prompt_tokens) / d(prompt_tokens) x 100: the share of the prompt
                      tokens asked that the server's prefix cache held
    preemptions       d(preemptions)

(For Triton's statistics API queued, computed and requests are all per-request counts, equal
without the response cache; see ``snapshot.py`` for what each server's counters mean.) The average
batch comes from the histogram where there is one because Triton's ``inference_count`` counts
successful items only while ``execution_count`` and ``batch_stats`` count every execution: a
model whose requests fail in ``execute`` (a BLS step that fails) would show 0.5 for batches of one;
the response cache's hits count as inferences but run no execution.
Averages are rounded to 6 decimals (1 ns); a figure is None when the server does not report its
counters or nothing happened in between (a zero denominator). A counter that went down means
the server restarted between the readings: that is a ``ScrapeError``, never a negative figure.
``unknown`` names the summary figures the server does not report at all, with the reason
(``server_side.unknown``); a figure that is None only because nothing happened is not in it.
TorchServe's queue and request times over an interval in which no request succeeded are None too,
and in ``unknown`` with the reason: its request counter counts failed requests, its time counters
do not (0.0 ms would be no measurement, not a fast server).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferload.errors import ScrapeError
from inferload.servermetrics.bentoml import NOT_REPORTED as BENTOML_NOT_REPORTED
from inferload.servermetrics.kserve import NOT_REPORTED as KSERVE_NOT_REPORTED
from inferload.servermetrics.openai import LLAMACPP, SGLANG, SGLANG_NOT_REPORTED, VLLM, VLLM_NOT_REPORTED
from inferload.servermetrics.openai import NOT_REPORTED as LLAMACPP_NOT_REPORTED
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.servermetrics.torchserve import NO_SUCCESS_TIMED as TORCHSERVE_NO_SUCCESS_TIMED
from inferload.servermetrics.torchserve import NOT_REPORTED as TORCHSERVE_NOT_REPORTED

AVERAGE_DECIMALS = 6

#: summary.json figure -> the counters it is computed from
_INPUTS = {
    "queue_ms_avg": ("queue_us", "queued"),
    "compute_ms_avg": ("compute_us", "computed"),
    "request_ms_avg": ("request_us", "requests"),
    "avg_batch_size": ("inferences", "executions"),
}
_NOT_REPORTED = {
    "torchserve": TORCHSERVE_NOT_REPORTED,
    "bentoml": BENTOML_NOT_REPORTED,
    "kserve": KSERVE_NOT_REPORTED,
    LLAMACPP: LLAMACPP_NOT_REPORTED,
    VLLM: VLLM_NOT_REPORTED,
    SGLANG: SGLANG_NOT_REPORTED,
    "triton": {"batch_size_histogram": "Triton's metrics page has no batch sizes (its statistics API has)"},
}
#: servers whose time counters grow with successful requests only, while the request count grows with
#: every answered one: their time figures over an interval without a success are None (the reason)
_TIMES_SUCCESSES_ONLY = {"torchserve": (("queue_ms_avg", "request_ms_avg"), TORCHSERVE_NO_SUCCESS_TIMED)}


@dataclass(frozen=True)
class ServerFigures:
    """What the server did between two readings."""

    server: str
    model: str
    interval_s: float
    queue_ms: float | None
    compute_ms: float | None
    request_ms: float | None
    avg_batch_size: float | None
    batch_sizes: dict[int, int] | None  # executions per batch size in the interval; None: not reported
    inferences_per_s: float | None
    executions_per_s: float | None
    failures_per_s: float | None
    pending: float | None
    unknown: dict[str, str] = field(default_factory=dict)  # summary figure -> why the server does not report it
    #: requests the server counted in the interval (None: it does not count them)
    requests: int | None = None
    #: an LLM server's requests being generated (a gauge) and the share of its KV cache in use, %
    running: float | None = None
    kv_cache_used_pct: float | None = None
    #: the share of the prompt tokens asked that its prefix cache held, % (None: not reported, or no prompt)
    prefix_cache_hit_pct: float | None = None
    #: requests it preempted in the interval (None: not reported)
    preemptions: int | None = None

    def server_side(self) -> dict[str, Any]:
        """summary.json's ``server_side`` object (``unknown`` only when the server leaves figures out)."""
        side: dict[str, Any] = {
            "queue_ms_avg": self.queue_ms,
            "compute_ms_avg": self.compute_ms,
            "request_ms_avg": self.request_ms,
            "avg_batch_size": self.avg_batch_size,
            "batch_size_histogram": None if self.batch_sizes is None else {str(k): v for k, v in self.batch_sizes.items()},
        }
        if self.requests is not None:
            side["requests"] = self.requests
        if self.prefix_cache_hit_pct is not None:
            side["prefix_cache_hit_pct"] = self.prefix_cache_hit_pct
        if self.preemptions is not None:
            side["preemptions"] = self.preemptions
        if self.unknown:
            side["unknown"] = dict(self.unknown)
        return side


def not_reported(after: ServerSnapshot) -> dict[str, str]:
    """The summary figures this reading's server does not report, and why. Empty while the server
    has not shown the model at all (no counters: nothing to tell yet)."""
    if not after.counters:
        return {}
    missing = [name for name, inputs in _INPUTS.items() if not set(inputs) <= set(after.counters)]
    missing += [] if after.has_batch_stats else ["batch_size_histogram"]
    reasons = _NOT_REPORTED.get(after.server, {})
    return {name: reasons.get(name, f"{after.server} does not report it") for name in missing}


def counter_deltas(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, float]:
    """after − before for every counter either reading has (a missing one counts as 0);
    ScrapeError when a counter or a batch-size count went down (a restart)."""
    if (before.server, before.model) != (after.server, after.model):
        raise ValueError(f"readings of different targets: {before.server}/{before.model} vs {after.server}/{after.model}")
    names = set(before.counters) | set(after.counters)
    deltas = {name: after.counters.get(name, 0.0) - before.counters.get(name, 0.0) for name in names}
    went_back = sorted(name for name, value in deltas.items() if value < 0)
    went_back += [
        f"batches[{size}]"
        for size in sorted(set(before.batches) | set(after.batches))
        if after.batches.get(size, 0) < before.batches.get(size, 0)
    ]
    if went_back:
        raise ScrapeError(
            f"{after.server} counters went backwards ({', '.join(went_back)}) for {after.model!r}: "
            "the server restarted between the readings"
        )
    return deltas


def batch_size_counts(before: ServerSnapshot, after: ServerSnapshot) -> dict[int, int] | None:
    """Executions per batch size between the readings (sizes that grew only, ascending); None when
    the server does not report batch sizes."""
    if not (before.has_batch_stats or after.has_batch_stats):
        return None
    sizes = sorted(set(before.batches) | set(after.batches))
    grown = {size: after.batches.get(size, 0) - before.batches.get(size, 0) for size in sizes}
    return {size: count for size, count in grown.items() if count > 0}


def average_batch(batches: dict[int, int]) -> float | None:
    """Items per execution from executions per batch size; None when nothing ran."""
    executions = sum(batches.values())
    if executions <= 0:
        return None
    return round(sum(size * count for size, count in batches.items()) / executions, AVERAGE_DECIMALS)


def server_figures(before: ServerSnapshot, after: ServerSnapshot) -> ServerFigures:
    """Every figure of the interval between two readings of the same model on the same server."""
    d = counter_deltas(before, after)
    reported = set(after.counters)

    def average(numerator: str, denominator: str, scale: float = 1.0) -> float | None:
        if numerator not in reported or denominator not in reported or d[denominator] <= 0:
            return None
        return round(d[numerator] / d[denominator] * scale, AVERAGE_DECIMALS)

    interval_s = after.taken_at - before.taken_at
    batches = batch_size_counts(before, after)
    unknown = not_reported(after)
    untimed: tuple[str, ...] = ()
    if after.server in _TIMES_SUCCESSES_ONLY and d.get("requests", 0) > 0 and d.get("request_us", 0) <= 0:
        untimed, reason = _TIMES_SUCCESSES_ONLY[after.server]
        unknown.update(dict.fromkeys(untimed, reason))

    def rate(name: str) -> float | None:
        return d[name] / interval_s if name in reported and interval_s > 0 else None

    return ServerFigures(
        server=after.server,
        model=after.model,
        interval_s=interval_s,
        queue_ms=None if "queue_ms_avg" in untimed else average("queue_us", "queued", 1e-3),
        compute_ms=average("compute_us", "computed", 1e-3),
        request_ms=None if "request_ms_avg" in untimed else average("request_us", "requests", 1e-3),
        avg_batch_size=average_batch(batches) if batches is not None else average("inferences", "executions"),
        batch_sizes=batches,
        inferences_per_s=rate("inferences"),
        executions_per_s=rate("executions"),
        failures_per_s=rate("failures"),
        pending=after.pending,
        unknown=unknown,
        requests=round(d["requests"]) if "requests" in reported else None,
        running=after.running,
        kv_cache_used_pct=None if after.kv_cache_used is None else round(after.kv_cache_used * 100.0, 3),
        prefix_cache_hit_pct=average("cached_prompt_tokens", "prompt_tokens", 100.0),
        preemptions=round(d["preemptions"]) if "preemptions" in reported else None,
    )
