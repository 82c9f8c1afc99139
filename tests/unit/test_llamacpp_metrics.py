"""llama.cpp's /metrics as server-side figures (`inferload.servermetrics.openai`): its decode calls
are the executions, the busy slots summed over them the inferences, so the average batch is the
sequences decoded together per call; its deferred requests are the pending gauge, in summary.json and
in the collector's `server` points. The capture is the real server's page (the ``xllamacpp`` wheel)
after 3 concurrent requests of 40 tokens each.
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
from inferload.servermetrics.openai import LLAMACPP, NO_METRICS_URL, parse_llamacpp_metrics

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
    reading = parse_llamacpp_metrics(CAPTURE, "random-llama", taken_at=5.0)
    assert (reading.server, reading.model, reading.taken_at) == (LLAMACPP, "random-llama", 5.0)
    # 41 decode calls at 2.92683 busy slots on average: 120 slot-decodes, the 3 x 40 tokens generated
    assert reading.counters == {"executions": 41.0, "inferences": 120.0}
    assert reading.pending == 0.0 and reading.has_batch_stats is False


def test_a_window_s_average_batch_is_its_busy_slots_over_its_decodes_and_the_rest_is_said_unknown() -> None:
    before = parse_llamacpp_metrics(page(100, 1.5), "m", taken_at=10.0)  # 150 slot-decodes
    after = parse_llamacpp_metrics(page(300, 2.5, deferred=3), "m", taken_at=12.0)  # 750
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
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n",
            "it is vllm's, which inferload does not read yet",
        ),
        ("# TYPE up gauge\nup 1\n", "not llama.cpp's /metrics: it has no llamacpp:* metric"),
        ("<html>not found</html>", "not Prometheus text"),
    ],
)
def test_a_page_that_is_not_llama_cpp_s_is_a_scrape_error_that_says_whose_it_is(text: str, says: str) -> None:
    with pytest.raises(ScrapeError, match=re.escape(says)):
        parse_llamacpp_metrics(text, "m")


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
