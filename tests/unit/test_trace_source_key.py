"""``trace.source: influxdb``: the scenario key, the collector's ``triton-trace`` source config, the
run's wait for the collector's points, and the tail's reasons when there are none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from inferload.errors import ScenarioError
from inferload.observe.collector import CollectorConfigError, build_source, load_collector_config, sources_from_scenario
from inferload.observe.sources.triton_trace_file import TritonTraceFileSource, TritonTraceSourceConfig
from inferload.run.trace_run import settled_count
from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.targets import trace_of


def scenario(*traces: Any) -> dict[str, Any]:
    targets = [
        {
            "name": f"t{i}",
            "kind": "triton-grpc",
            "address": "10.0.0.5:8001" if i < 2 else "10.0.0.6:8001",
            "model": "m",
            "inputs": [{"name": "X", "shape": [4], "dtype": "FP32"}],
            **({"trace": trace} if trace is not None else {}),
        }
        for i, trace in enumerate(traces)
    ]
    return {"name": "unit", "duration": "10s", "targets": targets, "shape": {"kind": "steady", "users": 1}}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("kafka", "targets[0].trace.source: expected one of file, influxdb; got 'kafka'"),
        ("", "targets[0].trace.source: expected one of file, influxdb; got ''"),
        (1, "targets[0].trace.source: expected one of file, influxdb; got 1"),
    ],
)
def test_validate_rejects_a_bad_trace_source(tmp_path: Path, value: Any, message: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario({"source": value})))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert [str(p) for p in caught.value.problems] == [f"{path}: {message}"]


def test_the_trace_source_defaults_to_the_file_and_round_trips() -> None:
    loaded = scenario_from_dict(scenario({}, {"source": "influxdb"}))
    assert [trace.source for t in loaded.targets if (trace := trace_of(t))] == ["file", "influxdb"]
    assert scenario_from_dict(scenario_to_dict(loaded)).targets == loaded.targets


def test_the_collector_adds_one_trace_source_per_triton_that_ships_its_traces() -> None:
    loaded = scenario_from_dict(
        scenario({"source": "influxdb"}, {"source": "influxdb"}, {"source": "influxdb", "file": "/srv/t.json"}, {}, None)
    )
    traces = [c for c in sources_from_scenario(loaded, gpu=False) if isinstance(c, TritonTraceSourceConfig)]
    assert [(c.target, c.file, c.address, c.protocol, c.model) for c in traces] == [
        ("t0", None, "10.0.0.5:8001", "grpc", "m"),  # t1: the same server, one source
        ("t2", "/srv/t.json", "10.0.0.6:8001", "grpc", "m"),
    ]
    built = build_source(traces[1], 2.0)
    assert isinstance(built, TritonTraceFileSource) and built.path == Path("/srv/t.json")
    asking = build_source(traces[0], 2.0)
    assert isinstance(asking, TritonTraceFileSource) and asking.path is None  # asked of Triton on the first scrape


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"kind": "triton-trace"}, "give file (Triton's --trace-config triton,file=PATH), or address and model"),
        (
            {"kind": "triton-trace", "address": "h:8000"},
            "give file (Triton's --trace-config triton,file=PATH), or address and model",
        ),
        ({"kind": "triton-trace", "file": " "}, "file: expected the path of Triton's trace file"),
        ({"kind": "triton-trace", "file": "/x", "protocol": "udp"}, "Input should be 'http' or 'grpc'"),
    ],
)
def test_the_collector_rejects_a_bad_triton_trace_source(tmp_path: Path, source: dict[str, Any], message: str) -> None:
    path = tmp_path / "collector.yaml"
    path.write_text(yaml.safe_dump({"sources": [source, {"kind": "nvml"}]}))
    with pytest.raises(CollectorConfigError) as caught:
        load_collector_config(path)
    lines = [str(p) for p in caught.value.problems]
    assert len(lines) == 1 and lines[0].startswith(f"{path}: sources[0]") and message in lines[0], lines


def test_a_good_triton_trace_source_loads(tmp_path: Path) -> None:
    path = tmp_path / "collector.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"kind": "triton-trace", "file": "/var/log/triton/trace.json"}]}))
    assert load_collector_config(path).sources[0] == TritonTraceSourceConfig(
        kind="triton-trace", file="/var/log/triton/trace.json"
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_run_waits_until_the_count_stops_growing_and_no_longer_than_the_deadline() -> None:
    clock = FakeClock()
    counts = iter([0, 0, 5, 5, 9] + [12] * 100)
    assert settled_count(lambda: next(counts), 3.0, 10.0, 0.5, clock, clock.sleep) == 12
    assert clock.now == pytest.approx(2.5 + 3.0)  # 12 first seen at 2.5 s, then quiet for 3 s
    clock = FakeClock()
    assert settled_count(lambda: 0, 3.0, 10.0, 0.5, clock, clock.sleep) == 0
    assert clock.now == pytest.approx(10.0)  # nothing yet: waits until the deadline
    clock = FakeClock()
    grows = iter(range(1, 1000))
    assert settled_count(lambda: next(grows), 3.0, 4.0, 0.5, clock, clock.sleep) == 9  # never quiet: the deadline


def test_the_tail_says_why_there_are_no_influxdb_traces(monkeypatch) -> None:
    from locust.env import Environment

    from inferload.observe.sink import SinkSettings
    from inferload.run import trace_run

    class FakeClient:
        def get(self, model: str) -> dict:
            return {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0"}

        def update(self, model: str, settings: dict) -> dict:
            return {}

    monkeypatch.setattr(trace_run.TraceRun, "_client", lambda self, target: FakeClient())
    loaded = scenario_from_dict(scenario({"source": "influxdb"}))
    run = trace_run.TraceRun(Environment(), loaded, {})  # no --influx-url
    run._on_test_start()
    tail = run.tails()["t0"]
    assert tail["available"] is False and tail["trace_source"] == "influxdb" and "--influx-url" in tail["reason"]

    monkeypatch.setattr(trace_run, "influx_traces", lambda settings, run_id, model: [])
    run = trace_run.TraceRun(Environment(), loaded, {}, SinkSettings(url="http://127.0.0.1:1"), "run-7")
    run._on_test_start()
    tail = run.tails()["t0"]
    assert tail["available"] is False and "no triton_traces points of run 'run-7'" in tail["reason"]
    assert "python -m collectors" in tail["reason"]
