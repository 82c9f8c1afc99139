"""A real InfluxDB (Debian's `influxd`, 1.x) on a free loopback port with temporary folders.

`influxdb` (session scope) is shared by the tests that only write and query; `InfluxServer` can
also be started and stopped by a test that needs an InfluxDB to go down mid-run. When `influxd`
is missing, the set-up runs scripts/install-system-deps.sh (which installs it with apt).
Import the fixture into a test module with `from tests.support.influx_fixture import influxdb`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.system_tools import require_tool

REPO = Path(__file__).resolve().parent.parent.parent
DATABASE = "inferload"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_influxd() -> str:
    return require_tool("influxd")


@dataclass
class InfluxServer:
    """One influxd process with its own folders and ports."""

    root: Path
    port: int = field(default_factory=free_port)
    rpc_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> None:
        influxd = ensure_influxd()
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "influxdb.conf"
        config.write_text(
            f'reporting-disabled = true\nbind-address = "127.0.0.1:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{self.root}/meta"\n'
            f'[data]\n  dir = "{self.root}/data"\n  wal-dir = "{self.root}/wal"\n  query-log-enabled = false\n'
            f'[http]\n  bind-address = "127.0.0.1:{self.port}"\n  log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
            "[continuous_queries]\n  enabled = false\n"
            '[logging]\n  level = "warn"\n'
        )
        log = open(self.root / "influxd.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen([influxd, "run", "-config", str(config)], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"influxd exited: {(self.root / 'influxd.log').read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=1) as response:
                    if response.status == 204:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"influxd did not answer /ping within {timeout_s} s")
        self.query(f'CREATE DATABASE "{DATABASE}"', method="POST")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None

    def query(self, influxql: str, method: str = "GET", database: str = DATABASE) -> dict[str, Any]:
        """Run InfluxQL through the real /query API; the decoded JSON answer."""
        params = urllib.parse.urlencode({"db": database, "q": influxql, "epoch": "ms"})
        if method == "GET":
            request = urllib.request.Request(f"{self.url}/query?{params}")
        else:
            request = urllib.request.Request(f"{self.url}/query", data=params.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # InfluxQL errors come back as 400 with a JSON body
            body = exc.read().decode(errors="replace")
            try:
                return dict(json.loads(body))
            except ValueError:
                raise AssertionError(f"{influxql}: HTTP {exc.code}: {body}") from None

    def series(self, influxql: str) -> list[dict[str, Any]]:
        """The series of a single-statement query; fails on an InfluxQL error."""
        answer = self.query(influxql)
        assert "error" not in answer, f"{influxql}: {answer['error']}"
        result = answer["results"][0]
        assert "error" not in result, f"{influxql}: {result['error']}"
        return result.get("series", [])


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxServer]:
    server = InfluxServer(tmp_path_factory.mktemp("influxdb"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- a real observed run: Locust streaming + the collector, against the real local servers ----------


def locustfile_with_streaming(tmp: Path) -> Path:
    """The project's locustfile: it streams when given --influx-url."""
    return REPO / "locustfiles" / "inferload_locustfile.py"


def write_scenario(path: Path, targets: list[dict[str, Any]], duration: str, users: int, warmup: str = "2s") -> Path:
    import yaml

    path.write_text(
        yaml.safe_dump(
            {
                "name": "observed",
                "duration": duration,
                "warmup": warmup,
                "window": "1s",
                "targets": targets,
                "shape": {"kind": "steady", "users": users},
            }
        )
    )
    return path


def cnn_targets(ports: Any) -> list[dict[str, Any]]:
    tensor = [{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32", "data": {"generator": "random", "seed": 0}}]
    return [
        {
            "name": "triton-grpc-cnn",
            "kind": "triton-grpc",
            "address": f"127.0.0.1:{ports.triton_grpc}",
            "model": "cnn",
            "inputs": tensor,
            "outputs": ["OUTPUT__0"],
            "metrics_url": f"http://127.0.0.1:{ports.triton_metrics}/metrics",
        },
        {
            "name": "torchserve-cnn",
            "kind": "torchserve-rest",
            "address": f"http://127.0.0.1:{ports.ts_inference}",
            "model": "cnn",
            "inputs": tensor,
            "content_type": "octet-stream",
            "metrics_url": f"http://127.0.0.1:{ports.ts_metrics}/metrics",
        },
    ]


def python_env() -> dict[str, str]:
    import os
    import sys

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env.pop("INFLUX_TOKEN", None)
    return env


def run_locust(
    locustfile: Path, scenario: Path, run_id: str, results: Path, influx_url: str, timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    import sys

    command = [
        str(Path(sys.executable).parent / "locust"),
        "-f",
        str(locustfile),
        "--headless",
        "--scenario",
        str(scenario),
        "--run-id",
        run_id,
        "--results-dir",
        str(results),
        "--influx-url",
        influx_url,
        "--loglevel",
        "INFO",
    ]
    return subprocess.run(command, cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=timeout_s)


@dataclass
class ObservedRun:
    run_id: str
    influx: InfluxServer
    results: Path
    locust: subprocess.CompletedProcess[str]
    collector_log: str
    targets: list[str]


@pytest.fixture(scope="session")
def observed_run(local_servers: Any, influxdb: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> ObservedRun:
    """A 10 s run (4 users, Triton gRPC + TorchServe REST on the CNN) streamed into the real
    InfluxDB, with the collector scraping both servers (and NVML, absent here) meanwhile; then
    synthetic NVML readings go through NvmlSource and the sink, since this host has no GPU."""
    import os
    import signal
    import sys

    tmp = tmp_path_factory.mktemp("observed")
    run_id = f"observed-{os.getpid()}"
    scenario = write_scenario(tmp / "scenario.yaml", cnn_targets(local_servers.ports), "10s", users=4)
    collector_log = tmp / "collector.log"
    with open(collector_log, "w") as log:
        collector = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collectors",
                "--scenario",
                str(scenario),
                "--run-id",
                run_id,
                "--interval",
                "1s",
                "--influx-url",
                influxdb.url,
            ],
            cwd=REPO,
            env=python_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        locust = run_locust(locustfile_with_streaming(tmp), scenario, run_id, tmp / "results", influxdb.url)
        time.sleep(2.5)  # the collector's last scrapes of the run
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=20)
    assert locust.returncode == 0, f"locust failed ({locust.returncode}):\n{locust.stdout[-3000:]}\n{locust.stderr[-5000:]}"
    assert collector.returncode == 0, collector_log.read_text()[-3000:]
    write_synthetic_gpu_points(influxdb.url, run_id)
    return ObservedRun(
        run_id, influxdb, tmp / "results", locust, collector_log.read_text(), ["triton-grpc-cnn", "torchserve-cnn"]
    )


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
