"""Server-side statistics: parsing of real captures, the diff, and snapshots of the real servers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from inferload.errors import ServerError
from inferload.local.models.definitions import get_spec
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.readiness import torchserve_infer, triton_infer
from inferload.servermetrics.snapshots import (
    ServerSnapshot,
    parse_torchserve_metrics,
    parse_triton_statistics,
    server_side,
    snapshot,
    torchserve_metrics_url,
)

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
SERVER_SIDE_KEYS = {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram"}


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def zero_like(snap: ServerSnapshot) -> ServerSnapshot:
    return ServerSnapshot(snap.server, snap.model, 0.0, {k: 0.0 for k in snap.counters}, {}, snap.has_batch_stats)


# ---- parsing real captures ------------------------------------------------------------------


def test_triton_statistics_over_http_and_grpc_parse_to_the_same_snapshot():
    over_http = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    over_grpc = parse_triton_statistics(json.loads(capture("triton_stats_cnn_grpc.json")), "cnn", "1")
    assert over_http.counters == over_grpc.counters
    assert over_http.batches == over_grpc.batches
    assert over_http.counters["inference_count"] == 201
    assert over_http.counters["execution_count"] == 73


def test_triton_batch_stats_account_for_every_inference():
    snap = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    assert sum(size * count for size, count in snap.batches.items()) == snap.counters["inference_count"]
    assert sum(snap.batches.values()) == snap.counters["execution_count"]


def test_triton_server_side_from_a_capture():
    snap = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    side = server_side(zero_like(snap), snap)
    assert set(side) == SERVER_SIDE_KEYS
    assert side["avg_batch_size"] == pytest.approx(201 / 73, rel=1e-5)
    assert side["queue_ms_avg"] == pytest.approx(447418623 / 201 / 1e6, rel=1e-5)
    assert side["request_ms_avg"] == pytest.approx(2948729554 / 201 / 1e6, rel=1e-5)
    compute_ns = 16299415 + 2445442159 + 38763983
    assert side["compute_ms_avg"] == pytest.approx(compute_ns / 201 / 1e6, rel=1e-5)
    assert side["batch_size_histogram"]["1"] == 30 and side["batch_size_histogram"]["9"] == 1


def test_unknown_triton_model_is_a_server_error():
    with pytest.raises(ServerError, match="no statistics for model 'nope'"):
        parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "nope")


def test_torchserve_metrics_capture_parses_with_the_handlers_batch_counters():
    snap = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn")
    assert snap.has_batch_stats
    assert snap.batches == {1: 1, 3: 1, 5: 1, 8: 24}
    assert snap.counters["requests"] == 201 and snap.counters["items"] == 201
    side = server_side(zero_like(snap), snap)
    assert side["avg_batch_size"] == pytest.approx(201 / 27, rel=1e-5)
    assert side["batch_size_histogram"] == {"1": 1, "3": 1, "5": 1, "8": 24}
    assert side["queue_ms_avg"] == pytest.approx(snap.counters["queue_us"] / 201 / 1e3, rel=1e-5)
    assert side["request_ms_avg"] > side["queue_ms_avg"] > 0
    assert side["compute_ms_avg"] > 0


def test_torchserve_without_inferload_handler_metrics_reports_none_for_batches():
    lines = [line for line in capture("torchserve_metrics.txt").splitlines() if "Inferload" not in line]
    snap = parse_torchserve_metrics("\n".join(lines) + "\n", "cnn")
    side = server_side(zero_like(snap), snap)
    assert side["avg_batch_size"] is None and side["batch_size_histogram"] is None
    assert side["compute_ms_avg"] is None and side["request_ms_avg"] > 0


def test_torchserve_without_prometheus_mode_is_a_clear_error():
    with pytest.raises(ServerError, match="metrics_mode=prometheus"):
        parse_torchserve_metrics("", "cnn")


def test_triton_metrics_capture_has_the_documented_counters():
    from prometheus_client.parser import text_string_to_metric_families

    names = {f.name for f in text_string_to_metric_families(capture("triton_metrics.txt"))}
    assert {
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_duration_us",
    } <= names


# ---- the diff -------------------------------------------------------------------------------


def test_no_requests_between_snapshots_gives_none_not_zero_division():
    snap = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    side = server_side(snap, snap)
    assert side["avg_batch_size"] is None and side["queue_ms_avg"] is None
    assert side["batch_size_histogram"] == {}


def test_counters_going_backwards_mean_a_restart():
    snap = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    with pytest.raises(ServerError, match="restarted"):
        server_side(snap, zero_like(snap))


def test_snapshots_of_different_models_do_not_diff():
    a = ServerSnapshot("triton", "cnn", 0.0, {})
    b = ServerSnapshot("triton", "tiny", 1.0, {})
    with pytest.raises(ServerError, match="different targets"):
        server_side(a, b)


def test_snapshot_round_trips_through_a_dict():
    snap = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn")
    assert ServerSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_default_torchserve_metrics_url():
    assert torchserve_metrics_url("http://10.0.0.5:8080", None) == "http://10.0.0.5:8082/metrics"
    assert torchserve_metrics_url("x:1", "http://m:9/metrics") == "http://m:9/metrics"


@pytest.mark.parametrize("kind", ["triton-http", "triton-grpc", "torchserve-rest"])
def test_unreachable_server_is_a_quick_server_error(kind):
    port = ServerPorts.free().triton_http  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ServerError):
        snapshot(kind, f"127.0.0.1:{port}", "cnn", metrics_url=f"http://127.0.0.1:{port}/metrics")
    assert time.monotonic() - started < 10


# ---- against the real servers ---------------------------------------------------------------


def targets(ports: ServerPorts) -> dict[str, tuple[str, str | None]]:
    return {
        "triton-http": (f"127.0.0.1:{ports.triton_http}", None),
        "triton-grpc": (f"127.0.0.1:{ports.triton_grpc}", None),
        "torchserve-rest": (f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_metrics}/metrics"),
    }


@pytest.mark.parametrize("kind", ["triton-http", "triton-grpc", "torchserve-rest"])
def test_diff_on_the_real_server_counts_exactly_the_requests_sent(local_servers, kind):
    address, metrics_url = targets(local_servers.ports)[kind]
    spec = get_spec("cnn")
    data = np.full((1, *spec.input_shape), 0.5, dtype=np.float32)
    if kind.startswith("triton"):
        call = lambda: triton_infer(local_servers.ports.triton_http, spec, data)  # noqa: E731
    else:
        call = lambda: torchserve_infer(local_servers.ports.ts_inference, spec, data)  # noqa: E731
    before = snapshot(kind, address, "cnn", None, metrics_url)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: call(), range(64)))
    after = snapshot(kind, address, "cnn", None, metrics_url)
    side = server_side(before, after)
    assert set(side) == SERVER_SIDE_KEYS
    histogram = side["batch_size_histogram"]
    assert sum(int(size) * count for size, count in histogram.items()) == 64
    assert side["avg_batch_size"] == pytest.approx(64 / sum(histogram.values()))
    assert side["request_ms_avg"] >= side["queue_ms_avg"] >= 0
    assert side["compute_ms_avg"] > 0


GEVENT_SCRIPT = """
from gevent import monkey; monkey.patch_all()
import grpc.experimental.gevent as grpc_gevent; grpc_gevent.init_gevent()
import json, sys
from inferload.servermetrics.snapshots import snapshot
targets = json.loads(sys.argv[1])
print(json.dumps({kind: snapshot(kind, a, "tiny", None, m).counters for kind, (a, m) in targets.items()}))
"""


def test_snapshot_works_under_gevent_like_a_locust_process(local_servers):
    proc = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, json.dumps(targets(local_servers.ports))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counters = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counters["triton-http"] == counters["triton-grpc"]
    assert counters["triton-http"]["inference_count"] >= 1
    assert counters["torchserve-rest"]["requests"] >= 1
