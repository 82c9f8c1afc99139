"""The sidecar collector: its loop keeps every source going whatever one of them does, its
configuration errors name the key, and it picks a real Triton up again after a restart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from inferload.errors import ScrapeError
from inferload.observe.collector import Collector, CollectorConfigError, load_collector_config, main
from inferload.observe.sink import BackgroundWriter, Point
from tests.support.influx_fixture import REPO, python_env
from tests.support.waiting import wait_until


class ListSink(BackgroundWriter):
    def __init__(self) -> None:
        self.points: list[Point] = []

    def submit(self, points) -> None:
        self.points.extend(points)


class ScriptedSource:
    def __init__(self, name: str, script: list[int | Exception]) -> None:
        self.name = name
        self.script = script

    def scrape(self, now: float) -> list[Point]:
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return [Point("server", {"target": self.name}, {"pending": step}, 0)]


def test_a_failing_source_does_not_stop_the_others_and_is_reported_once_when_down_and_when_back() -> None:
    flaky = ScriptedSource("flaky", [1, ScrapeError("refused"), ScrapeError("refused"), 2])
    steady = ScriptedSource("steady", [1, 2, 3, 4])
    sink = ListSink()
    collector = Collector([flaky, steady], sink, run_id="r")
    for second in range(4):
        collector.tick(float(second))
    events = [(p.tags["kind"], p.fields["text"]) for p in sink.points if p.measurement == "events"]
    assert events == [("source_down", "flaky is down: refused"), ("source_up", "flaky is back")]
    values = [(p.tags["target"], p.fields["pending"]) for p in sink.points if p.measurement == "server"]
    assert values == [("flaky", 1), ("steady", 1), ("steady", 2), ("steady", 3), ("flaky", 2), ("steady", 4)]
    assert all(p.tags["run_id"] == "r" for p in sink.points)


def test_an_unexpected_error_in_a_source_is_contained() -> None:
    broken = ScriptedSource("broken", [KeyError("x")])
    sink = ListSink()
    Collector([broken], sink, run_id="r").tick(0.0)
    assert sink.points[0].tags["kind"] == "source_down" and "KeyError" in str(sink.points[0].fields["text"])


def test_scrape_errors_never_show_the_token() -> None:
    leaky = ScriptedSource("leaky", [ScrapeError("auth Token tok-XYZ refused")])
    sink = ListSink()
    Collector([leaky], sink, run_id="r", secrets=["tok-XYZ"]).tick(0.0)
    assert "tok-XYZ" not in str(sink.points[0].fields["text"])


def test_a_bad_config_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("interval: soon\nsources:\n  - kind: triton\n    target: t\n    model: m\n")
    with pytest.raises(CollectorConfigError) as caught:
        load_collector_config(path)
    lines = str(caught.value).splitlines()
    assert f"{path}: interval: expected a duration like '30s', '2m' or '1m30s'; got 'soon'" in lines
    assert any(line.startswith(f"{path}: sources[0].triton.metrics_url:") for line in lines)


def test_the_command_exits_2_without_an_influxdb_url(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("INFLUX_URL", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text("sources: [{kind: nvml}]\n")
    assert main(["--config", str(path)]) == 2
    assert "no InfluxDB URL" in capsys.readouterr().out


def infer_tiny(port: int, n: int) -> None:
    body: dict[str, Any] = {"inputs": [{"name": "INPUT__0", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}
    for _ in range(n):
        requests.post(f"http://127.0.0.1:{port}/v2/models/tiny/infer", json=body, timeout=10).raise_for_status()


def test_the_collector_picks_triton_up_again_after_a_restart(built_models, influxdb, tmp_path: Path) -> None:
    from inferload.local.servers.manager import LocalServers
    from inferload.local.servers.ports import ServerPorts

    ports = ServerPorts.free()
    servers = LocalServers(tmp_path / "servers", ports, ("tiny",))
    servers.up(which=("triton",), timeout_s=120)
    config = tmp_path / "collector.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run_id": "restart",
                "interval": "0.5s",
                "influx": {"url": influxdb.url},
                "sources": [
                    {
                        "kind": "triton",
                        "target": "tiny-t",
                        "model": "tiny",
                        "metrics_url": f"http://127.0.0.1:{ports.triton_metrics}/metrics",
                        "statistics": {"address": f"127.0.0.1:{ports.triton_http}", "protocol": "http"},
                    }
                ],
            }
        )
    )
    log_path = tmp_path / "collector.log"
    with open(log_path, "w") as log_file:
        collector = subprocess.Popen(
            [sys.executable, "-m", "collectors", "--config", str(config)],
            cwd=REPO,
            env=python_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )

    def max_rate_after(since_s: float) -> float | None:
        query = f"SELECT max(inferences_per_s) FROM server WHERE run_id = 'restart' AND time > {int(since_s * 1e9)}"
        series = influxdb.series(query)
        return series[0]["values"][0][1] if series else None

    def logged(text: str) -> bool:
        return text in log_path.read_text()

    try:
        wait_until(lambda: max_rate_after(0) is not None, 30, "a first interval from the collector (its baseline is taken)")
        started = time.time()
        infer_tiny(ports.triton_http, 20)
        wait_until(lambda: (max_rate_after(started) or 0) > 0, 20, "rates of the first requests in InfluxDB")
        servers.down()
        wait_until(lambda: logged("source triton:tiny-t is down"), 20, "the collector to see Triton down")
        servers.up(which=("triton",), timeout_s=120)
        wait_until(lambda: logged("source triton:tiny-t is back"), 20, "the collector to read Triton again (a new baseline)")
        back_at = time.time()
        infer_tiny(ports.triton_http, 20)
        wait_until(lambda: (max_rate_after(back_at) or 0) > 0, 20, "rates after Triton came back")
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=20)
        servers.down()
    log = log_path.read_text()
    assert collector.returncode == 0, log
    assert log.count("source triton:tiny-t is down") == 1 and "source triton:tiny-t is back" in log
    kinds = [s["tags"]["kind"] for s in influxdb.series("SELECT \"text\" FROM events WHERE run_id = 'restart' GROUP BY kind")]
    assert {"source_down", "source_up", "collector_start", "collector_stop"} <= set(kinds)
    after = influxdb.series(f"SELECT max(inferences_per_s) FROM server WHERE run_id = 'restart' AND time > {int(back_at * 1e9)}")
    assert after and after[0]["values"][0][1] > 0, "no rates after Triton came back"
    batches = influxdb.series(f"SELECT sum(\"count\") FROM batch_sizes WHERE run_id = 'restart' AND time > {int(back_at * 1e9)}")
    assert batches and batches[0]["values"][0][1] >= 1
