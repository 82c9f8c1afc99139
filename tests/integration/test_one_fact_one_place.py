"""One fact, one place: for the same interval on the real Triton and TorchServe, summary.json's
`server_side`, the per-window residual's server time and the collector's `server` and
`batch_sizes` points carry the very same figures.

Each path reads the real server through its own production reader, at the same quiet moments
(counters settled) before and after a burst of concurrent requests:
  - summary.json: `snapshot(kind, address, model, version, metrics_url)` and `server_side`, as the
    run plugin calls them at the end of the warm-up and at stop;
  - windows.csv: one `ServerReader` kept open across both reads, and `server_figures().request_ms`,
    as `ServerWindowPoller` does;
  - the collector: the source `python -m collectors --scenario` builds for the target
    (`build_source(sources_from_scenario(...))`), scraped before and after.
The figures must be equal, not merely close. This fails if the collector computes from other
counters (Triton's microsecond metrics page instead of the statistics API the summary reads),
with other denominators (per successful request instead of per queued or computed request,
requests instead of executions), or forms another batch-size histogram; and the burst's items
must add up exactly in that histogram, so the interval compared is the one measured.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from inferload.local.models.definitions import get_spec
from inferload.local.servers.manager import torchserve_infer, triton_infer
from inferload.observe.collector import NvmlSourceConfig, build_source, sources_from_scenario
from inferload.observe.sources import ServerSource
from inferload.scenario.loader import scenario_from_dict
from inferload.scenario.schema import Scenario
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.readers import ServerReader, server_side, snapshot
from inferload.servermetrics.snapshot import ServerSnapshot
from tests.support.scenario_factory import cnn_target
from tests.support.waiting import wait_until

BURST = 64


def cnn_scenario(ports: Any) -> Scenario:
    """The CNN on Triton (gRPC and HTTP) and TorchServe, each target with its metrics page."""
    metrics = {
        "triton": f"http://127.0.0.1:{ports.triton_metrics}/metrics",
        "torchserve": f"http://127.0.0.1:{ports.ts_metrics}/metrics",
    }
    targets = [
        cnn_target("triton-grpc-cnn", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}", metrics_url=metrics["triton"]),
        cnn_target("triton-http-cnn", "triton-http", f"127.0.0.1:{ports.triton_http}", metrics_url=metrics["triton"]),
        cnn_target(
            "torchserve-cnn", "torchserve-rest", f"http://127.0.0.1:{ports.ts_inference}", metrics_url=metrics["torchserve"]
        ),
    ]
    return scenario_from_dict(
        {"name": "one-fact", "duration": "10s", "targets": targets, "shape": {"kind": "steady", "users": 1}}
    )


def settled(read: Any, at_least: float) -> ServerSnapshot:
    """A reading once `requests` reached `at_least` and two reads in a row agree (the server has
    booked every request: Triton and TorchServe update their counters just after answering)."""
    previous: list[ServerSnapshot] = []

    def quiet() -> ServerSnapshot | None:
        current = read()
        last = previous[-1] if previous else None
        previous.append(current)
        enough = current.counters.get("requests", 0.0) >= at_least
        same = last is not None and last.counters == current.counters and last.batches == current.batches
        return current if enough and same else None

    return wait_until(quiet, timeout_s=30, what=f"settled counters with at least {at_least} requests", interval_s=0.2)


def burst(ports: Any, server: str) -> None:
    spec = get_spec("cnn")
    data = np.full((1, *spec.input_shape), 0.5, dtype=np.float32)
    if server == "triton":
        call = lambda: triton_infer(ports.triton_http, spec, data)  # noqa: E731
    else:
        call = lambda: torchserve_infer(ports.ts_inference, spec, data)  # noqa: E731
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: call(), range(BURST)))


@pytest.mark.parametrize("target_name", ["triton-grpc-cnn", "triton-http-cnn", "torchserve-cnn"])
def test_summary_residual_and_collector_give_the_same_figures_for_the_same_interval(local_servers, target_name) -> None:
    scenario = cnn_scenario(local_servers.ports)
    target = scenario.target(target_name)
    config = next(
        c for c in sources_from_scenario(scenario, gpu=False) if not isinstance(c, NvmlSourceConfig) and c.target == target_name
    )
    source = build_source(config, timeout_s=5.0)
    assert isinstance(source, ServerSource)
    window_reader = ServerReader(target.kind, target.address, target.model, target.version, target.metrics_url)

    def summary_read() -> ServerSnapshot:
        return snapshot(target.kind, target.address, target.model, target.version, target.metrics_url)

    try:
        before = settled(summary_read, at_least=0)
        window_before = window_reader.read()
        assert source.scrape(1.0) == []  # the collector's baseline, at the same quiet moment
        burst(local_servers.ports, target.server)
        after = settled(summary_read, at_least=before.counters["requests"] + BURST)
        window_after = window_reader.read()
        points = source.scrape(2.0)
    finally:
        window_reader.close()
        source.close()

    side = server_side(before, after)
    histogram = side["batch_size_histogram"]
    assert sum(int(size) * count for size, count in histogram.items()) == BURST, histogram  # exactly the burst
    assert all(side[key] is not None and side[key] > 0 for key in ("queue_ms_avg", "compute_ms_avg", "request_ms_avg"))

    [server] = [p for p in points if p.measurement == "server"]
    collector = {
        "queue_ms_avg": server.fields["queue_ms"],
        "compute_ms_avg": server.fields["compute_ms"],
        "request_ms_avg": server.fields["request_ms"],
        "avg_batch_size": server.fields["avg_batch_size"],
        "batch_size_histogram": {p.tags["batch_size"]: p.fields["count"] for p in points if p.measurement == "batch_sizes"},
    }
    assert side.pop("requests") == BURST  # the summary's own count of the requests its figures cover
    assert collector == side
    assert server_figures(window_before, window_after).request_ms == side["request_ms_avg"]
