"""servermetrics on captures of the real endpoints (tests/captures/): Triton's statistics API and
metrics page, TorchServe's /metrics with our handler's counters, and the one module of figures."""

from __future__ import annotations

import dataclasses
import errno
import json
import socket
from pathlib import Path

import pytest

from inferload.errors import ScrapeError
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.http_client import HttpClient, connection_problem, parse_families
from inferload.servermetrics.readers import ServerReader, server_side, torchserve_metrics_url
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.servermetrics.torchserve import parse_torchserve_metrics
from inferload.servermetrics.triton import parse_triton_metrics, parse_triton_statistics

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
SERVER_SIDE_KEYS = {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram", "requests"}


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def zero_like(snap: ServerSnapshot) -> ServerSnapshot:
    """The same counters, all zero, ten seconds earlier: a fresh server."""
    counters = dict.fromkeys(snap.counters, 0.0)
    return ServerSnapshot(snap.server, snap.model, snap.taken_at - 10.0, counters, {}, snap.has_batch_stats, snap.pending)


def triton_stats(name: str = "triton_stats_cnn_http.json", version: str | None = None) -> ServerSnapshot:
    return parse_triton_statistics(json.loads(capture(name)), "cnn", version, taken_at=10.0)


# --- the _total rule --------------------------------------------------------------------------------


def test_families_are_keyed_by_name_without_total_whatever_the_endpoint_writes() -> None:
    triton = parse_families(capture("triton_metrics.txt"))
    torchserve = parse_families(capture("torchserve_metrics.txt"))
    assert {"nv_inference_count", "nv_inference_exec_count", "nv_inference_queue_duration_us"} <= set(triton)
    assert {"ts_inference_requests", "InferloadItems", "InferloadBatches"} <= set(torchserve)
    assert not any(name.endswith("_total") for name in [*triton, *torchserve])


def test_prometheus_text_that_does_not_parse_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="not Prometheus text"):
        parse_families('metric{model="cnn" 1\n')


# --- Triton: statistics API --------------------------------------------------------------------------


def test_triton_statistics_over_http_and_grpc_parse_to_the_same_snapshot() -> None:
    over_http = triton_stats()
    over_grpc = triton_stats("triton_stats_cnn_grpc.json", "1")
    assert over_http.counters == over_grpc.counters
    assert over_http.batches == over_grpc.batches
    assert over_http.counters["inferences"] == 201
    assert over_http.counters["executions"] == 73


@pytest.mark.parametrize("name", ["triton_stats_cnn_http.json", "triton_stats_cnn_grpc.json"])
def test_batch_stats_give_executions_per_batch_size_that_add_up_to_the_inference_count(name: str) -> None:
    snap = triton_stats(name)
    assert snap.batches == {1: 30, 2: 16, 3: 9, 4: 2, 5: 6, 6: 1, 7: 5, 8: 3, 9: 1}
    assert sum(size * count for size, count in snap.batches.items()) == snap.counters["inferences"] == 201  # exact
    assert sum(snap.batches.values()) == snap.counters["executions"] == 73


def test_triton_server_side_from_a_capture() -> None:
    snap = triton_stats()
    side = server_side(zero_like(snap), snap)
    assert set(side) == SERVER_SIDE_KEYS
    assert side["avg_batch_size"] == pytest.approx(201 / 73, rel=1e-5)
    assert side["queue_ms_avg"] == pytest.approx(447418623 / 201 / 1e6, rel=1e-5)
    assert side["request_ms_avg"] == pytest.approx(2948729554 / 201 / 1e6, rel=1e-5)
    compute_ns = 16299415 + 2445442159 + 38763983
    assert side["compute_ms_avg"] == pytest.approx(compute_ns / 201 / 1e6, rel=1e-5)
    assert side["batch_size_histogram"]["1"] == 30 and side["batch_size_histogram"]["9"] == 1
    assert side["requests"] == 201  # the requests the figures cover, to compare with the client's


def test_unknown_triton_model_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="no statistics for model 'nope'"):
        parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "nope")


# --- Triton: metrics page ----------------------------------------------------------------------------


def test_triton_metrics_are_read_by_family_name() -> None:
    snap = parse_triton_metrics(capture("triton_metrics.txt"), "cnn", 10.0)
    assert snap.counters["requests"] == 201 and snap.counters["inferences"] == 201
    assert snap.counters["executions"] == 73 and snap.counters["queue_us"] == 447318
    assert snap.counters["failures"] == 0 and snap.pending == 0
    assert not snap.has_batch_stats


def test_a_triton_generate_models_engine_gauges_are_its_running_and_waiting_requests() -> None:
    """A real page (tests/captures/triton_llm_metrics.txt: the built-in LLM model on Triton, 8 streams
    on its 4 slots): llama.cpp's gauges, which the model puts on Triton's page, are the running
    requests and, with Triton's own pending ones, the waiting."""
    snap = parse_triton_metrics(capture("triton_llm_metrics.txt"), "random-llama", 10.0)
    assert (snap.running, snap.pending, snap.kv_cache_used) == (4.0, 4.0, None)
    assert snap.counters["requests"] == 9


def test_triton_s_vllm_backend_gauges_are_read_by_model_label() -> None:
    """Triton's vLLM backend puts vLLM's scheduler on Triton's page under vLLM's names, labelled with
    the model and version (vllm_backend's src/utils/metrics.py); only the model's own are taken."""
    page = "\n".join(
        [
            'nv_inference_request_success{model="vllm_model",version="1"} 12',
            'nv_inference_pending_request_count{model="vllm_model",version="1"} 1',
            'vllm:num_requests_running{model="vllm_model",version="1"} 6',
            'vllm:num_requests_waiting{model="vllm_model",version="1"} 3',
            'vllm:gpu_cache_usage_perc{model="vllm_model",version="1"} 0.75',
            'vllm:num_requests_waiting{model="other",version="1"} 50',
        ]
    )
    snap = parse_triton_metrics(page, "vllm_model", 10.0)
    assert (snap.running, snap.pending, snap.kv_cache_used) == (6.0, 4.0, 0.75)
    plain = parse_triton_metrics(capture("triton_metrics.txt"), "cnn", 10.0)  # a tensor model: Triton's queue alone
    assert (plain.running, plain.pending, plain.kv_cache_used) == (None, 0.0, None)


def test_triton_s_tensorrt_llm_backend_gauges_are_read_by_their_request_and_block_types() -> None:
    """The TensorRT-LLM backend's batch manager on Triton's page (the tensorrtllm_backend README's
    sample): one family per kind of figure, the figure in a label: waiting and scheduled requests,
    the KV cache's used fraction; its request maximum and totals are not a queue."""
    page = "\n".join(
        [
            'nv_inference_request_success{model="tensorrt_llm",version="1"} 40',
            'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0',
            'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 3',
            'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1',
            'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 4',
            'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512',
            'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 7',
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.25',
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 11147',
        ]
    )
    snap = parse_triton_metrics(page, "tensorrt_llm", 10.0)
    assert (snap.running, snap.pending, snap.kv_cache_used) == (4.0, 3.0, 0.25)


def test_a_model_triton_does_not_serve_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="nothing for model 'resnet'"):
        parse_triton_metrics(capture("triton_metrics.txt"), "resnet", 0.0)


def test_triton_figures_from_the_metrics_page_over_an_interval() -> None:
    later = parse_triton_metrics(capture("triton_metrics.txt"), "cnn", 10.0)
    figures = server_figures(zero_like(later), later)
    assert figures.inferences_per_s == pytest.approx(20.1)
    assert figures.executions_per_s == pytest.approx(7.3)
    assert figures.avg_batch_size == pytest.approx(201 / 73)
    assert figures.queue_ms == pytest.approx(447318 / 201 / 1000)
    assert figures.compute_ms == pytest.approx((16207 + 2445336 + 38677) / 201 / 1000)
    assert figures.request_ms == pytest.approx(2948628 / 201 / 1000)
    assert figures.pending == 0 and figures.failures_per_s == 0
    assert figures.batch_sizes is None  # the metrics page has no batch sizes


# --- TorchServe --------------------------------------------------------------------------------------


def test_torchserve_metrics_capture_parses_with_the_handlers_batch_counters() -> None:
    snap = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn", 10.0)
    assert snap.has_batch_stats
    assert snap.batches == {1: 1, 3: 1, 5: 1, 8: 24}
    assert snap.counters["requests"] == 201 and snap.counters["inferences"] == 201
    assert sum(size * n for size, n in snap.batches.items()) == snap.counters["inferences"]
    side = server_side(zero_like(snap), snap)
    assert side["avg_batch_size"] == pytest.approx(201 / 27, rel=1e-5)
    assert side["batch_size_histogram"] == {"1": 1, "3": 1, "5": 1, "8": 24}
    assert side["queue_ms_avg"] == pytest.approx(snap.counters["queue_us"] / 201 / 1e3, rel=1e-5)
    assert side["request_ms_avg"] > side["queue_ms_avg"] > 0
    assert side["compute_ms_avg"] > 0


def test_torchserve_figures_over_an_interval() -> None:
    later = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn", 10.0)
    figures = server_figures(zero_like(later), later)
    assert figures.inferences_per_s == pytest.approx(20.1)
    assert figures.executions_per_s == pytest.approx(2.7)
    assert figures.avg_batch_size == pytest.approx(201 / 27)
    assert figures.request_ms == pytest.approx(7747069.549 / 201 / 1000)
    assert figures.queue_ms == pytest.approx(3742469.52 / 201 / 1000)
    assert figures.compute_ms == pytest.approx(2455460 / 201 / 1000)
    assert figures.failures_per_s == 0 and figures.pending is None  # TorchServe has no pending gauge


def test_torchserve_without_inferload_handler_metrics_reports_none_for_batches() -> None:
    lines = [line for line in capture("torchserve_metrics.txt").splitlines() if "Inferload" not in line]
    snap = parse_torchserve_metrics("\n".join(lines) + "\n", "cnn", 10.0)
    side = server_side(zero_like(snap), snap)
    assert side["avg_batch_size"] is None and side["batch_size_histogram"] is None
    assert side["compute_ms_avg"] is None and side["request_ms_avg"] > 0
    assert server_figures(zero_like(snap), snap).inferences_per_s == pytest.approx(20.1)  # requests, without items


def test_torchserve_without_prometheus_mode_is_a_clear_error() -> None:
    with pytest.raises(ScrapeError, match="metrics_mode=prometheus"):
        parse_torchserve_metrics("", "cnn")


def test_a_model_torchserve_has_not_shown_yet_has_no_counters() -> None:
    assert parse_torchserve_metrics(capture("torchserve_metrics.txt"), "resnet").counters == {}


def test_default_torchserve_metrics_url() -> None:
    assert torchserve_metrics_url("http://10.0.0.5:8080", None) == "http://10.0.0.5:8082/metrics"
    assert torchserve_metrics_url("x:1", "http://m:9/metrics") == "http://m:9/metrics"


# --- the figures of an interval ----------------------------------------------------------------------


def test_no_requests_between_snapshots_gives_none_not_zero_division() -> None:
    snap = triton_stats()
    side = server_side(snap, snap)
    assert side["avg_batch_size"] is None and side["queue_ms_avg"] is None
    assert side["batch_size_histogram"] == {}


def test_an_idle_interval_has_rates_of_zero_and_no_averages() -> None:
    snap = triton_stats()
    figures = server_figures(snap, dataclasses.replace(snap, taken_at=12.0))
    assert figures.inferences_per_s == 0 and figures.avg_batch_size is None and figures.queue_ms is None


def test_counters_going_backwards_mean_a_restart() -> None:
    snap = triton_stats()
    with pytest.raises(ScrapeError, match="restarted"):
        server_side(snap, zero_like(snap))


def test_a_batch_size_count_going_backwards_is_a_restart_too() -> None:
    snap = triton_stats()
    fewer = dataclasses.replace(snap, taken_at=11.0, batches={**snap.batches, 1: 29})
    with pytest.raises(ScrapeError, match=r"batches\[1\]"):
        server_figures(snap, fewer)


def test_the_batch_histogram_of_an_interval_counts_only_sizes_that_grew() -> None:
    before = ServerSnapshot("triton", "cnn", 0.0, {}, {1: 30, 8: 3})
    after = ServerSnapshot("triton", "cnn", 1.0, {}, {1: 32, 8: 3, 16: 4})
    assert server_figures(before, after).batch_sizes == {1: 2, 16: 4}


def test_the_average_batch_is_the_histograms_mean_when_requests_fail_in_the_model() -> None:
    """Triton 2.51 after 11 good and 11 failed requests to its BLS example (failed in execute):
    inference_count counts the 11 successes, execution_count and batch_stats all 22 executions."""
    stats = json.loads(capture("triton_stats_bls_sync_http.json"))
    after = parse_triton_statistics(stats, "bls_sync", taken_at=10.0)
    assert (after.counters["inferences"], after.counters["executions"], after.batches) == (11, 22, {1: 22})
    side = server_side(zero_like(after), after)
    assert side["avg_batch_size"] == 1.0 and side["batch_size_histogram"] == {"1": 22}  # not 11 / 22


def test_the_average_batch_weighs_each_size_by_its_executions() -> None:
    before = ServerSnapshot("triton", "cnn", 0.0, {"inferences": 0.0, "executions": 0.0}, {1: 30, 8: 3})
    after = ServerSnapshot("triton", "cnn", 1.0, {"inferences": 90.0, "executions": 6.0}, {1: 32, 8: 3, 16: 4})
    assert server_figures(before, after).avg_batch_size == pytest.approx((2 * 1 + 4 * 16) / 6)
    assert server_figures(after, after).avg_batch_size is None  # nothing ran


def test_torchserve_times_over_an_interval_without_a_success_are_none_with_the_reason() -> None:
    """TorchServe 0.12 after 10 requests its handler failed: requests +10, its latency counters +0."""
    counters = {"requests": 1.0, "request_us": 2902577.757, "queued": 1.0, "queue_us": 2880193.734, "inferences": 1.0}
    before = ServerSnapshot("torchserve", "h", 0.0, counters, has_batch_stats=False)
    after = ServerSnapshot("torchserve", "h", 5.0, {**counters, "requests": 11.0, "queued": 11.0}, has_batch_stats=False)
    side = server_side(before, after)
    assert side["queue_ms_avg"] is None and side["request_ms_avg"] is None
    assert side["unknown"]["request_ms_avg"].startswith("no request succeeded in the interval")
    timed = ServerSnapshot(
        "torchserve", "h", 9.0, {**after.counters, "requests": 21.0, "queued": 21.0, "request_us": 3068405.437}
    )
    assert server_side(after, timed)["request_ms_avg"] == pytest.approx(165.827680 / 10)
    assert "request_ms_avg" not in server_side(after, timed).get("unknown", {})


def test_snapshots_of_different_models_do_not_diff() -> None:
    a = ServerSnapshot("triton", "cnn", 0.0, {})
    b = ServerSnapshot("triton", "tiny", 1.0, {})
    with pytest.raises(ValueError, match="different targets"):
        server_side(a, b)


def test_snapshot_round_trips_through_a_dict() -> None:
    snap = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn")
    assert ServerSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap
    metrics = parse_triton_metrics(capture("triton_metrics.txt"), "cnn")
    assert ServerSnapshot.from_dict(json.loads(json.dumps(metrics.to_dict()))) == metrics


# --- reading failures --------------------------------------------------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_says_connection_refused() -> None:
    url = f"http://127.0.0.1:{closed_port()}/metrics"
    client = HttpClient(timeout_s=2.0)
    try:
        with pytest.raises(ScrapeError, match=f"GET {url}: connection refused$"):
            client.text(url)
    finally:
        client.close()


def test_only_econnrefused_is_called_refused() -> None:
    unreachable = OSError(errno.EHOSTUNREACH, "No route to host")
    wrapped = RuntimeError("Max retries exceeded")
    wrapped.__cause__ = unreachable
    assert connection_problem(wrapped) == "cannot connect (EHOSTUNREACH: No route to host)"
    assert connection_problem(RuntimeError("no errno at all")) == "cannot connect (RuntimeError)"
    assert connection_problem(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")) == "connection refused"


def test_an_unknown_target_kind_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="unknown target kind 'kserve'"):
        ServerReader("kserve", "h:1", "cnn")
