"""A real InfluxDB (Debian's `influxd`, 1.x) on a free loopback port with temporary folders.

The launcher is the package's (`inferload.local.influxdb.LocalInfluxDB`); `InfluxServer` adds
what tests need: `influxd` installed on demand (scripts/install-system-deps.sh test), the
`inferload` database made at start, and `series()` that fails on an InfluxQL error.
`influxdb` (session scope) is shared by the tests that only write and query; an `InfluxServer`
can also be started and stopped by a test that needs an InfluxDB to go down mid-run.
The fixtures are registered for every test by tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.local.influxdb import LocalInfluxDB
from tests.support.locust_runner import LocustRun, python_env, run_locust
from tests.support.scenario_factory import cnn_target, write_scenario
from tests.support.system_tools import REPO, require_tool
from tests.support.waiting import wait_until

__all__ = [
    "DATABASE",
    "REPO",
    "InfluxServer",
    "ObservedRun",
    "cnn_targets",
    "influxdb",
    "observed_generation_run",
    "observed_run",
    "python_env",
]

DATABASE = "inferload"


class InfluxServer(LocalInfluxDB):
    """The package's InfluxDB launcher, with the `inferload` database made at start."""

    def start(self, timeout_s: float = 20.0, influxd: str | None = None) -> None:
        super().start(timeout_s, influxd or require_tool("influxd"))
        self.create_database(DATABASE)

    def query(self, influxql: str, database: str | None = DATABASE) -> dict[str, Any]:
        return super().query(influxql, database)

    def series(self, influxql: str) -> list[dict[str, Any]]:
        """The series of a single-statement query; fails on an InfluxQL error."""
        answer = self.query(influxql)
        assert "error" not in answer, f"{influxql}: {answer['error']}"
        result = answer["results"][0]
        assert "error" not in result, f"{influxql}: {result['error']}"
        return list(result.get("series", []))


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxServer]:
    server = InfluxServer(tmp_path_factory.mktemp("influxdb"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- a real observed run: Locust streaming + the collector, against the real local servers ----------


def observed_scenario(folder: Path, targets: list[dict[str, Any]], duration: str, users: int, warmup: str = "2s") -> Path:
    """A steady scenario with 1 s windows, written to `folder/scenario.yaml`."""
    data = {
        "name": "observed",
        "duration": duration,
        "warmup": warmup,
        "window": "1s",
        "targets": targets,
        "shape": {"kind": "steady", "users": users},
    }
    return write_scenario(folder, data)


def cnn_targets(ports: Any) -> list[dict[str, Any]]:
    """Triton gRPC and TorchServe REST on the CNN, each with its metrics endpoint for the collector."""
    return [
        cnn_target(
            "triton-grpc-cnn",
            "triton-grpc",
            f"127.0.0.1:{ports.triton_grpc}",
            timeout="10s",
            outputs=["OUTPUT__0"],
            metrics_url=f"http://127.0.0.1:{ports.triton_metrics}/metrics",
        ),
        cnn_target(
            "torchserve-cnn",
            "torchserve-rest",
            f"http://127.0.0.1:{ports.ts_inference}",
            timeout="10s",
            content_type="octet-stream",
            metrics_url=f"http://127.0.0.1:{ports.ts_metrics}/metrics",
        ),
    ]


def streamed_run(scenario: Path, folder: Path, run_id: str, influx_url: str, timeout_s: float = 90) -> LocustRun:
    """A headless run of the project's locustfile streaming to `influx_url`; results in `folder/results`."""
    return run_locust(scenario, folder, "--run-id", run_id, "--influx-url", influx_url, "--loglevel", "INFO", timeout_s=timeout_s)


def collector_scraped_after(influx: InfluxServer, run_id: str, targets: list[str], after_s: float) -> bool:
    """True once the collector has written a `server` point later than `after_s` for every target."""
    series = influx.series(
        f"SELECT count(inferences_per_s) FROM server WHERE run_id = '{run_id}' AND time > {int(after_s * 1e9)} GROUP BY target"
    )
    return {s["tags"]["target"] for s in series} >= set(targets)


@dataclass
class ObservedRun:
    run_id: str
    influx: InfluxServer
    results: Path
    locust: LocustRun
    collector_log: str
    targets: list[str]


@pytest.fixture(scope="session")
def observed_run(local_servers: Any, influxdb: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> ObservedRun:
    """A 10 s run (4 users, Triton gRPC + TorchServe REST on the CNN) streamed into the real
    InfluxDB, with the collector scraping both servers (and NVML, absent here) meanwhile; then
    synthetic NVML readings go through NvmlSource and the sink, since this host has no GPU."""
    import os

    tmp = tmp_path_factory.mktemp("observed")
    run_id = f"observed-{os.getpid()}"
    targets = cnn_targets(local_servers.ports)
    names = [t["name"] for t in targets]
    observed = collected_run(observed_scenario(tmp, targets, "10s", users=4), tmp, run_id, influxdb, names)
    write_synthetic_gpu_points(influxdb.url, run_id)
    write_synthetic_stream_points(influxdb.url, run_id, names)
    return observed


def collected_run(scenario: Path, folder: Path, run_id: str, influxdb: InfluxServer, names: list[str]) -> ObservedRun:
    """A run streamed into `influxdb` with the collector (`--scenario`) scraping its targets' servers
    meanwhile, until one scrape lands after the run's end."""
    import signal
    import sys

    collector_log = folder / "collector.log"
    command = [sys.executable, "-m", "collectors", "--scenario", str(scenario), "--run-id", run_id, "--interval", "1s"]
    with open(collector_log, "w") as log:
        collector = subprocess.Popen(
            [*command, "--influx-url", influxdb.url], cwd=REPO, env=python_env(), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        locust = streamed_run(scenario, folder, run_id, influxdb.url)
        ended_at = time.time()
        if locust.returncode == 0:  # the collector's scrapes cover the whole run once one lands after its end
            wait_until(lambda: collector_scraped_after(influxdb, run_id, names, ended_at), 20, "a collector scrape after the run")
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=20)
    assert locust.returncode == 0, f"locust failed ({locust.returncode}):\n{locust.stdout[-3000:]}\n{locust.stderr[-5000:]}"
    assert collector.returncode == 0, collector_log.read_text()[-3000:]
    return ObservedRun(run_id, influxdb, folder / "results", locust, collector_log.read_text(), names)


@pytest.fixture(scope="session")
def observed_generation_run(influxdb: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedRun]:
    """A 10 s run of 2 users streaming chat from llama.cpp's real server (the built-in LLM, goodput
    thresholds set) into the real InfluxDB, with the collector reading llama.cpp's /metrics."""
    import os

    from tests.support.llamacpp import LLM_NAME, llamacpp_server

    tmp = tmp_path_factory.mktemp("observed-llm")
    run_id = f"observed-llm-{os.getpid()}"
    with llamacpp_server(tmp) as url:
        chat = {
            "name": "chat",
            "kind": "openai-chat",
            "address": url,
            "model": LLM_NAME,
            "metrics_url": f"{url}/metrics",
            "generation": {"max_tokens": 16, "goodput": {"ttft_ms": 60_000}},
        }
        scenario = observed_scenario(tmp, [chat], "10s", users=2)
        yield collected_run(scenario, tmp, run_id, influxdb, ["chat"])


def write_synthetic_gpu_points(url: str, run_id: str) -> None:
    from inferload.observe.collector import with_run_id
    from inferload.observe.sink import SinkSettings, open_sink
    from inferload.observe.sources.nvml import NvmlSource
    from tests.unit.test_sources import fake_nvml

    devices = [
        {
            "name": "NVIDIA H200",
            "util": 80 + i,
            "used": (20 + i) * 2**30,
            "total": 141 * 2**30,
            "power_mw": 400_000,
            "temp": 50,
            "sm": 1980,
        }
        for i in range(2)
    ]
    source = NvmlSource(host="synthetic", nvml=fake_nvml(devices))
    sink = open_sink(SinkSettings(url=url), start=False)
    now = time.time()
    for second in range(5):
        sink.submit(with_run_id(source.scrape(now - 5 + second), run_id))
    stats = sink.close(timeout_s=10)
    assert stats.points_written == 10, stats


def write_synthetic_stream_points(url: str, run_id: str, targets: list[str]) -> None:
    """`streams` points (Triton decoupled models) for the observed run's targets, made by the real
    point function from real merged histograms and written by the real sink: the observed run has no
    decoupled model (tests/integration/test_triton_decoupled.py runs the panels on a real one)."""
    from inferload.measure.decoupled_record import StreamRecord, StreamTiming
    from inferload.observe.influx_export import stream_point
    from inferload.observe.sink import SinkSettings, open_sink

    record = StreamRecord()
    now = time.time()
    first = int(now) - 5
    for index in range(first, first + 5):
        for target in targets:
            record.record((index, target), StreamTiming(3, 2.0, (1.0, 1.5)), steady=True)
    sink = open_sink(SinkSettings(url=url), start=False)
    points = []
    for key in record.count_windows:
        window = record.window(key)
        assert window is not None
        points.append(stream_point(run_id, {"target": key[1]}, key[0], 1.0, window))
    sink.submit(points)
    stats = sink.close(timeout_s=10)
    assert stats.points_written == len(points), stats
