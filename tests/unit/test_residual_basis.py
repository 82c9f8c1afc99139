"""summary.json's client − server residual is given only for the same requests: the server's own
request count says which requests its mean covers; a count far from the client's steady state means
the two means cover different requests (a residual from them can even be negative, which cannot be)."""

from __future__ import annotations

import pytest

from inferload.measure.hdr import LatencyStats
from inferload.results.schema import ServerSide
from inferload.results.summary import target_figures
from inferload.scenario.targets import Target
from tests.support.scenario_factory import bare_target

TARGET = Target.model_validate(bare_target("t", "triton-grpc", "127.0.0.1:8001"))


def client(requests: int, mean_ms: float) -> LatencyStats:
    stats = LatencyStats()
    for _ in range(requests):
        stats.record_success(mean_ms)
    return stats


def side(requests: int | None, request_ms: float, **extra: object) -> ServerSide:
    return ServerSide.model_validate(
        {
            "queue_ms_avg": 1.0,
            "compute_ms_avg": 8.0,
            "request_ms_avg": request_ms,
            "avg_batch_size": 2.0,
            "batch_size_histogram": {"2": 10},
            "requests": requests,
            **extra,
        }
    )


def test_the_residual_of_the_same_requests_is_the_client_mean_less_the_servers() -> None:
    figures = target_figures(TARGET, client(1000, 12.0), 10.0, side(1005, 10.0))
    assert figures["residual_ms"] == pytest.approx(2.0, abs=0.01)
    assert figures["server_side"].unknown is None


def test_counts_that_differ_give_no_residual_and_say_why() -> None:
    """A negative residual (client 13.41 ms, server 13.68 ms) came from means over different requests."""
    figures = target_figures(TARGET, client(1000, 13.41), 10.0, side(1200, 13.68))
    assert figures["residual_ms"] is None
    reason = figures["server_side"].unknown["residual_ms"]
    assert "1200 requests" in reason and "1000" in reason and "not the same requests" in reason


def test_a_server_without_a_count_or_a_shared_models_keeps_the_plain_difference() -> None:
    assert target_figures(TARGET, client(1000, 12.0), 10.0, side(None, 10.0))["residual_ms"] == pytest.approx(2.0, abs=0.01)
    shared = side(3000, 10.0, scope="model", shared_with=["other"])
    assert target_figures(TARGET, client(1000, 12.0), 10.0, shared)["residual_ms"] == pytest.approx(2.0, abs=0.01)


def test_a_streamed_triton_generate_target_gets_no_residual_and_says_why() -> None:
    """The LLM demo's Triton: 62.5 ms "client − server" from a 1.12 ms execute() that hands each request
    to llama.cpp's threads; Triton's request time never spans the stream."""
    keys = {"name": "g", "kind": "triton-generate", "address": "127.0.0.1:8000", "model": "llm"}
    figures = target_figures(Target.model_validate(keys), client(945, 63.6), 10.0, side(945, 1.12))
    assert figures["residual_ms"] is None
    assert "execute()" in figures["server_side"].unknown["residual_ms"]
    whole = Target.model_validate({**keys, "generation": {"stream": False}})  # /generate: Triton times it whole
    assert target_figures(whole, client(945, 63.6), 10.0, side(945, 62.0))["residual_ms"] == pytest.approx(1.6, abs=0.01)
