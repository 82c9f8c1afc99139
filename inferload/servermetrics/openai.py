"""OpenAI-compatible servers' metrics: llama.cpp's Prometheus ``/metrics`` parsed into a ``ServerSnapshot``.

An OpenAI-compatible target reads a page only when it names one (``metrics_url``: llama.cpp serves
``/metrics`` on its own port when started with metrics on, as `inferload servers up` starts it).
llama.cpp's counters are the server's, for the one model it serves, checked on the ``xllamacpp``
wheel's server here:
    executions   llamacpp:n_decode_total (llama_decode() calls: the batches it ran)
    inferences   the busy slots summed over those calls: llamacpp:n_busy_slots_per_decode (a running
                 average since the start) x n_decode_total, rounded to whole slots
    pending      llamacpp:requests_deferred (a gauge: requests waiting for a free slot)
so a window's average batch is the sequences decoded together per call (continuous batching over
its slots). llama.cpp counts no requests and times no queue: ``NOT_REPORTED`` says why for
summary.json's ``server_side.unknown``. vLLM's and SGLang's pages are not read yet: a page without
llamacpp:* metrics is a ScrapeError that says so.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError
from inferload.scenario.targets import Target
from inferload.scenario.tls import TlsSettings
from inferload.servermetrics.snapshot import MetricsPageReader, ModelCounters, ServerSnapshot

#: the server name llama.cpp's readings carry
LLAMACPP = "llamacpp"

#: why an OpenAI-compatible target that names no page has no server-side figures
NO_METRICS_URL = (
    "an OpenAI-compatible server's figures are read from the page metrics_url names (llama.cpp's /metrics); none is set"
)
#: summary.json figures llama.cpp's metrics cannot give, and why
NOT_REPORTED = {
    "queue_ms_avg": "llama.cpp's metrics have no queue time (requests_deferred counts the requests waiting, as pending)",
    "compute_ms_avg": "llama.cpp's metrics time prompts and tokens, not requests (it counts no requests)",
    "request_ms_avg": "llama.cpp's metrics count no requests",
    "batch_size_histogram": "llama.cpp's metrics give the average busy slots per decode, not one count per batch size",
}


def parse_llamacpp_metrics(text: str, model: str, taken_at: float | None = None) -> ServerSnapshot:
    """The reading of llama.cpp's page (its counters are the whole server's: it serves one model)."""
    try:
        values = {
            sample.name: float(sample.value) for family in text_string_to_metric_families(text) for sample in family.samples
        }
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None
    if not any(name.startswith("llamacpp:") for name in values):
        other = next((name.split(":")[0] for name in values if name.startswith(("vllm:", "sglang:"))), None)
        detail = f" (it is {other}'s, which inferload does not read yet)" if other else ""
        raise ScrapeError(f"not llama.cpp's /metrics: it has no llamacpp:* metric{detail}")
    counters: dict[str, float] = {}
    decodes = values.get("llamacpp:n_decode_total")
    busy_per_decode = values.get("llamacpp:n_busy_slots_per_decode")
    if decodes is not None and busy_per_decode is not None:
        counters["executions"] = decodes
        counters["inferences"] = float(round(busy_per_decode * decodes))
    return ServerSnapshot(
        LLAMACPP,
        model,
        time.time() if taken_at is None else taken_at,
        counters,
        {},
        has_batch_stats=False,
        pending=values.get("llamacpp:requests_deferred"),
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
    return MetricsPageReader(metrics_url, parse_llamacpp_metrics, timeout_s).counters(model)
