"""OpenAI-compatible servers' metrics: llama.cpp's, vLLM's and SGLang's Prometheus ``/metrics``
parsed into a ``ServerSnapshot`` (the page tells whose it is by its metric names' prefix).

An OpenAI-compatible target reads a page only when it names one (``metrics_url``: llama.cpp serves
``/metrics`` on its own port when started with metrics on, as `inferload servers up` starts it;
vLLM and SGLang (``--enable-metrics``) on their API port).

llama.cpp (``llamacpp:*``; one model per server, so its counters are the model's), checked on the
``xllamacpp`` wheel's server here:
    executions   llamacpp:n_decode_total (llama_decode() calls: the batches it ran)
    inferences   the busy slots summed over those calls: llamacpp:n_busy_slots_per_decode (a running
                 average since the start) x n_decode_total, rounded to whole slots
    prompt_tokens         llamacpp:prompt_tokens_total (computed, cached ones excluded) +
                          llamacpp:prompt_tokens_cached_total
    cached_prompt_tokens  llamacpp:prompt_tokens_cached_total
    pending      llamacpp:requests_deferred (requests waiting for a free slot)
    running      llamacpp:requests_processing
so a window's average batch is the sequences decoded together per call (continuous batching over
its slots). llama.cpp counts no requests and times no queue: ``NOT_REPORTED`` says why for
summary.json's ``server_side.unknown``.

vLLM (``vllm:*``) and SGLang (``sglang:*``) label their samples with ``model_name`` (and an engine
or data-parallel rank): the target's model's samples are summed over the rest of their labels (a
page whose samples name other models only reads as nothing of this one). vLLM:
    pending      vllm:num_requests_waiting (not its ``_by_reason`` split, which sums to the same)
    running      vllm:num_requests_running
    kv_cache_used  vllm:kv_cache_usage_perc (vLLM < 0.10: vllm:gpu_cache_usage_perc), 0 to 1
    prompt_tokens, cached_prompt_tokens  vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total
    preemptions  vllm:num_preemptions_total
    requests     vllm:request_success_total
SGLang: pending sglang:num_queue_reqs, running sglang:num_running_reqs, kv_cache_used
sglang:token_usage. Written from the servers' documented metric names (neither runs here); a page
with none of the three prefixes is a ScrapeError that says so.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.snapshot import MetricsPageReader, ModelCounters, ServerSnapshot

#: the server names the readings of each page carry
LLAMACPP = "llamacpp"
VLLM = "vllm"
SGLANG = "sglang"

#: why an OpenAI-compatible target that names no page has no server-side figures
NO_METRICS_URL = (
    "an OpenAI-compatible server's figures are read from the page metrics_url names (llama.cpp's, vLLM's or"
    " SGLang's /metrics); none is set"
)
#: summary.json figures llama.cpp's metrics cannot give, and why
NOT_REPORTED = {
    "queue_ms_avg": "llama.cpp's metrics have no queue time (requests_deferred counts the requests waiting, as pending)",
    "compute_ms_avg": "llama.cpp's metrics time prompts and tokens, not requests (it counts no requests)",
    "request_ms_avg": "llama.cpp's metrics count no requests",
    "batch_size_histogram": "llama.cpp's metrics give the average busy slots per decode, not one count per batch size",
}
#: summary.json figures vLLM's and SGLang's metrics give as histograms of their own, not as inferload reads them
_LLM_NOT_REPORTED = {
    "queue_ms_avg": "{name}'s queue time is a histogram of its own; its waiting requests are read as pending",
    "compute_ms_avg": "{name} times prefill and decode, not a request's compute",
    "request_ms_avg": "{name}'s request times are histograms of their own",
    "avg_batch_size": "{name}'s metrics count no model executions (its running requests are read as running)",
    "batch_size_histogram": "{name}'s metrics count no batch sizes",
}
VLLM_NOT_REPORTED = {figure: reason.format(name="vLLM") for figure, reason in _LLM_NOT_REPORTED.items()}
SGLANG_NOT_REPORTED = {figure: reason.format(name="SGLang") for figure, reason in _LLM_NOT_REPORTED.items()}


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        return [
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None


def parse_openai_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """The reading of an OpenAI-compatible server's page: llama.cpp's, vLLM's or SGLang's."""
    samples = _samples(text)
    prefixes = {name.split(":", 1)[0] for name, _, _ in samples if ":" in name}
    now = time.time() if taken_at is None else taken_at
    if LLAMACPP in prefixes:
        return _llamacpp(samples, model, now)
    for server in (VLLM, SGLANG):
        if server in prefixes:
            return _labelled(server, samples, model, now)
    raise ScrapeError("not llama.cpp's, vLLM's or SGLang's /metrics: it has no llamacpp:*, vllm:* or sglang:* metric")


def _llamacpp(samples: list[tuple[str, dict[str, str], float]], model: str, taken_at: float) -> ServerSnapshot:
    values = {name: value for name, _, value in samples}
    counters: dict[str, float] = {}
    decodes = values.get("llamacpp:n_decode_total")
    busy_per_decode = values.get("llamacpp:n_busy_slots_per_decode")
    if decodes is not None and busy_per_decode is not None:
        counters["executions"] = decodes
        counters["inferences"] = float(round(busy_per_decode * decodes))
    computed, cached = values.get("llamacpp:prompt_tokens_total"), values.get("llamacpp:prompt_tokens_cached_total")
    if computed is not None and cached is not None:
        counters["prompt_tokens"] = computed + cached
        counters["cached_prompt_tokens"] = cached
    return ServerSnapshot(
        LLAMACPP,
        model,
        taken_at,
        counters,
        {},
        has_batch_stats=False,
        pending=values.get("llamacpp:requests_deferred"),
        running=values.get("llamacpp:requests_processing"),
    )


@dataclass(frozen=True)
class _PageNames:
    """Where a labelled page (vLLM's, SGLang's) keeps what a reading takes."""

    waiting: str
    running: str
    #: the KV cache's share in use, 0 to 1, one sample per engine (the first name the page has)
    kv_cache: tuple[str, ...]
    #: their counter -> ours
    counters: dict[str, str] = field(default_factory=dict)


_PAGE_NAMES = {
    VLLM: _PageNames(
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        {
            "vllm:prefix_cache_queries_total": "prompt_tokens",
            "vllm:prefix_cache_hits_total": "cached_prompt_tokens",
            "vllm:num_preemptions_total": "preemptions",
            "vllm:request_success_total": "requests",
        },
    ),
    SGLANG: _PageNames("sglang:num_queue_reqs", "sglang:num_running_reqs", ("sglang:token_usage",)),
}


def _labelled(server: str, samples: list[tuple[str, dict[str, str], float]], model: str, taken_at: float) -> ServerSnapshot:
    """vLLM's or SGLang's page: the model's samples (``model_name``), summed over their other labels
    (an engine's, a rank's); the KV cache's share is the mean of its engines'."""
    names = _PAGE_NAMES[server]
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for name, labels, value in samples:
        if labels.get("model_name", model) == model and not math.isnan(value):
            sums[name] += value
            counts[name] += 1
    kv = next((name for name in names.kv_cache if name in sums), None)
    return ServerSnapshot(
        server,
        model,
        taken_at,
        {ours: sums[theirs] for theirs, ours in names.counters.items() if theirs in sums},
        {},
        has_batch_stats=False,
        pending=sums.get(names.waiting),
        running=sums.get(names.running),
        kv_cache_used=None if kv is None else sums[kv] / counts[kv],
    )


def metrics_page(target: Target) -> str | None:
    """The page the target names (``metrics_url``); None: nothing is read."""
    return target.metrics_url


def open_counters(
    kind: str, address: str, model: str, version: str | None, metrics_url: str | None, timeout_s: float, tls: TlsSettings | None
) -> ModelCounters:
    """The server's counters on the page the target names; a ScrapeError when it names none."""
    if metrics_url is None:
        raise ScrapeError(NO_METRICS_URL)
    return MetricsPageReader(metrics_url, parse_openai_metrics, timeout_s).counters(model)
