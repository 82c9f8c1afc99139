"""OpenAI-compatible servers' /metrics as server-side figures (`inferload.servermetrics.openai`).

llama.cpp: its decode calls are the executions, the busy slots summed over them the inferences, so
the average batch is the sequences decoded together per call; its deferred and processing requests
are the pending and running gauges, its cached prompt tokens the prefix cache's hits, in summary.json
and in the collector's `server` points. The capture is the real server's page (the ``xllamacpp``
wheel) after 3 concurrent requests of 40 tokens each.

vLLM and SGLang: their waiting and running requests, KV cache use, prefix cache hits and
preemptions. Their pages here are written from the servers' documented metric names and labels
(``model_name``, an ``engine`` per data-parallel engine): neither server runs on this machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferload.errors import ScrapeError
from inferload.observe.collector import OpenAISourceConfig, build_source
from inferload.observe.sources import OpenAISource
from inferload.run.server_side import unreadable_reason
from inferload.scenario.targets import Target
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.openai import LLAMACPP, NO_METRICS_URL, SGLANG, VLLM, parse_openai_metrics

CAPTURE = (Path(__file__).resolve().parents[1] / "captures" / "llamacpp_metrics.txt").read_text()


def page(decodes: int, busy_per_decode: float, deferred: int = 0) -> str:
    return (
        "# TYPE llamacpp:n_decode_total counter\n"
        f"llamacpp:n_decode_total {decodes}\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        f"llamacpp:requests_deferred {deferred}\n"
        "# TYPE llamacpp:n_busy_slots_per_decode gauge\n"
        f"llamacpp:n_busy_slots_per_decode {busy_per_decode}\n"
    )


def test_the_real_page_gives_decodes_busy_slots_and_the_deferred_requests() -> None:
    reading = parse_openai_metrics(CAPTURE, "random-llama", taken_at=5.0)
    assert (reading.server, reading.model, reading.taken_at) == (LLAMACPP, "random-llama", 5.0)
    # 41 decode calls at 2.92683 busy slots on average: 120 slot-decodes, the 3 x 40 tokens generated
    assert reading.counters == {"executions": 41.0, "inferences": 120.0, "prompt_tokens": 108.0, "cached_prompt_tokens": 0.0}
    assert reading.pending == 0.0 and reading.running == 0.0 and reading.has_batch_stats is False


def test_a_window_s_average_batch_is_its_busy_slots_over_its_decodes_and_the_rest_is_said_unknown() -> None:
    before = parse_openai_metrics(page(100, 1.5), "m", taken_at=10.0)  # 150 slot-decodes
    after = parse_openai_metrics(page(300, 2.5, deferred=3), "m", taken_at=12.0)  # 750
    figures = server_figures(before, after)
    assert figures.avg_batch_size == 3.0  # (750 - 150) / (300 - 100)
    assert figures.executions_per_s == 100.0 and figures.pending == 3.0
    side = figures.server_side()
    assert (side["queue_ms_avg"], side["compute_ms_avg"], side["request_ms_avg"]) == (None, None, None)
    assert set(side["unknown"]) == {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "batch_size_histogram"}
    assert "requests_deferred" in side["unknown"]["queue_ms_avg"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "# TYPE up gauge\nup 1\n",
            "not llama.cpp's, vLLM's or SGLang's /metrics: it has no llamacpp:*, vllm:* or sglang:* metric",
        ),
        ("<html>not found</html>", "not Prometheus text"),
    ],
)
def test_a_page_of_no_server_read_is_a_scrape_error_that_says_so(text: str, says: str) -> None:
    with pytest.raises(ScrapeError, match=re.escape(says)):
        parse_openai_metrics(text, "m")


def llama_page(computed: int, cached: int, processing: int) -> str:
    return (
        page(100, 1.5)
        + f"llamacpp:prompt_tokens_total {computed}\nllamacpp:prompt_tokens_cached_total {cached}\n"
        + f"llamacpp:requests_processing {processing}\n"
    )


def test_llama_cpp_s_cached_prompt_tokens_are_its_prefix_cache_hits() -> None:
    before = parse_openai_metrics(llama_page(100, 0, 0), "m", taken_at=1.0)
    after = parse_openai_metrics(llama_page(160, 240, 2), "m", taken_at=2.0)  # 300 tokens asked, 240 held
    figures = server_figures(before, after)
    assert (figures.prefix_cache_hit_pct, figures.running, figures.preemptions) == (80.0, 2.0, None)
    assert figures.server_side()["prefix_cache_hit_pct"] == 80.0 and "preemptions" not in figures.server_side()


def vllm_page(
    waiting: tuple[int, int], running: tuple[int, int], kv: tuple[float, float], queries: int, hits: int, preempted: int
) -> str:
    """Two engines of one model (data parallel), and another model's samples, in vLLM's names."""
    lines = [
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        *(f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} {waiting[e]}.0' for e in (0, 1)),
        'vllm:num_requests_waiting{engine="0",model_name="other"} 50.0',
        "# TYPE vllm:num_requests_waiting_by_reason gauge",
        f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} {waiting[0]}.0',
        "# TYPE vllm:num_requests_running gauge",
        *(f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {running[e]}.0' for e in (0, 1)),
        "# TYPE vllm:kv_cache_usage_perc gauge",
        *(f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} {kv[e]}' for e in (0, 1)),
        "# TYPE vllm:prefix_cache_queries counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}.0',
        "# TYPE vllm:prefix_cache_hits counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}.0',
        "# TYPE vllm:num_preemptions counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempted}.0',
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} {queries // 10}.0',
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {queries // 10}.0',
    ]
    return "\n".join(lines) + "\n"


def test_vllm_s_page_gives_the_model_s_queue_running_requests_kv_cache_prefix_hits_and_preemptions() -> None:
    before = parse_openai_metrics(vllm_page((0, 0), (0, 0), (0.0, 0.0), 1000, 0, 0), "m", taken_at=10.0)
    after = parse_openai_metrics(vllm_page((3, 4), (8, 8), (0.9, 0.7), 3000, 1500, 2), "m", taken_at=12.0)
    assert (after.server, after.pending, after.running, after.kv_cache_used) == (VLLM, 7.0, 16.0, 0.8)
    figures = server_figures(before, after)
    assert (figures.kv_cache_used_pct, figures.prefix_cache_hit_pct, figures.preemptions) == (80.0, 75.0, 2)
    side = figures.server_side()
    assert (side["requests"], side["prefix_cache_hit_pct"], side["preemptions"]) == (400, 75.0, 2)
    assert set(side["unknown"]) == {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram"}
    assert "vLLM's queue time is a histogram" in side["unknown"]["queue_ms_avg"]
    # a model the page does not serve reads as nothing of it, not as another model's figures
    assert parse_openai_metrics(vllm_page((3, 4), (8, 8), (0.9, 0.7), 3000, 1500, 2), "absent").pending is None


def test_sglang_s_page_gives_the_waiting_and_running_requests_and_the_kv_cache_in_use() -> None:
    text = (
        "# TYPE sglang:num_queue_reqs gauge\n"
        'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 5.0\n'
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 12.0\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{model_name="m",tp_rank="0"} 0.55\n'
    )
    reading = parse_openai_metrics(text, "m", taken_at=1.0)
    assert (reading.server, reading.pending, reading.running, reading.kv_cache_used) == (SGLANG, 5.0, 12.0, 0.55)
    assert server_figures(reading, reading).kv_cache_used_pct == 55.0


def test_an_openai_target_reads_the_page_it_names_and_none_without_one() -> None:
    keys = {"name": "chat", "kind": "openai-chat", "address": "127.0.0.1:8085", "model": "m"}
    assert unreadable_reason(Target.model_validate(keys)) == NO_METRICS_URL
    named = Target.model_validate({**keys, "metrics_url": "http://127.0.0.1:8085/metrics"})
    assert unreadable_reason(named) is None and named.metrics_url == "http://127.0.0.1:8085/metrics"


class Pages:
    """A `PageClient` that answers each read with the next page (a fake: the real page is the capture's)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)

    def text(self, url: str) -> str:
        return self.texts.pop(0)

    def close(self) -> None:
        pass


def test_the_collector_s_source_writes_a_server_point_per_scrape_from_the_page() -> None:
    config = OpenAISourceConfig.for_target(
        Target.model_validate(
            {
                "name": "chat",
                "kind": "openai-chat",
                "address": "127.0.0.1:8085",
                "model": "m",
                "metrics_url": "http://h:1/metrics",
            }
        ),
        "http://h:1/metrics",
    )
    assert isinstance(build_source(config, 1.0), OpenAISource)
    source = OpenAISource("chat", "m", "http://h:1/metrics", http=Pages(page(100, 1.5), page(300, 2.5, deferred=3)))
    assert source.scrape(10.0) == []  # the first reading is the baseline
    (point,) = source.scrape(12.0)
    assert (point.measurement, point.tags) == ("server", {"target": "chat", "server": LLAMACPP, "model": "m"})
    assert point.fields["avg_batch_size"] == 3.0 and point.fields["pending"] == 3.0
    assert point.fields["executions_per_s"] == 100.0 and point.fields["request_ms"] is None
    assert "running" not in point.fields and "kv_cache_used_pct" not in point.fields  # not on this page
    vllm = OpenAISource(
        "chat",
        "m",
        "http://h:1/metrics",
        http=Pages(vllm_page((0, 0), (0, 0), (0.0, 0.0), 10, 0, 0), vllm_page((1, 1), (2, 2), (0.5, 0.5), 20, 5, 1)),
    )
    assert vllm.scrape(10.0) == []
    (point,) = vllm.scrape(11.0)
    assert point.tags["server"] == VLLM
    fields = {
        name: point.fields[name] for name in ("pending", "running", "kv_cache_used_pct", "prefix_cache_hit_pct", "preemptions")
    }
    assert fields == {"pending": 2.0, "running": 4.0, "kv_cache_used_pct": 50.0, "prefix_cache_hit_pct": 50.0, "preemptions": 1}
