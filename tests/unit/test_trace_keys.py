"""The target's ``trace`` key: valid forms, and ``file: key.path`` messages for bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.targets import DEFAULT_TRACE_RATE, TraceSpec, trace_of
from tests.support.scenario_factory import bare_target, load_problems, steady_one_user


def scenario(triton_trace: Any = None, torchserve_trace: Any = None) -> dict[str, Any]:
    targets = [
        bare_target("tr", "triton-grpc", "127.0.0.1:8001", model="m", input_name="X"),
        bare_target("ts", "torchserve-rest", "http://127.0.0.1:8080", input_name="X"),
    ]
    if triton_trace is not None:
        targets[0]["trace"] = triton_trace
    if torchserve_trace is not None:
        targets[1]["trace"] = torchserve_trace
    return steady_one_user(*targets)


def problems(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    return [str(p) for p in load_problems(tmp_path, data)]


def test_a_trace_key_loads_with_defaults_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario({"rate": 0.05, "file": "/srv/trace.json"})))
    loaded = load_scenario(path)
    traced = trace_of(loaded.targets[0])
    assert traced == TraceSpec(rate=0.05, file="/srv/trace.json") and traced.every_nth == 20
    assert trace_of(loaded.targets[1]) is None
    assert scenario_from_dict(scenario_to_dict(loaded)).targets == loaded.targets
    defaults = trace_of(scenario_from_dict(scenario({})).targets[0])
    assert defaults is not None
    assert defaults == TraceSpec(rate=DEFAULT_TRACE_RATE) and defaults.every_nth == 100
    assert TraceSpec(rate=0.01, slowest=True).every_nth == 1  # slowest: every request traced


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rate": 0}, "targets[0].trace.rate: must be greater than 0; got 0"),
        ({"rate": 1.5}, "targets[0].trace.rate: must be at most 1; got 1.5"),
        ({"slowest": "yes"}, "targets[0].trace.slowest: expected a valid boolean; got 'yes'"),
        (
            {"file": ""},
            "targets[0].trace.file: expected the path of Triton's trace file (its --trace-config triton,file=...); got ''",
        ),
        ({"rat": 0.1}, "targets[0].trace.rat: unknown key 'rat' (did you mean 'rate'?)"),
        (True, "targets[0].trace: expected a mapping; got true"),
    ],
)
def test_bad_trace_values_name_the_file_and_key(tmp_path: Path, value: Any, message: str) -> None:
    assert problems(tmp_path, scenario(value)) == [f"{tmp_path / 'scenario.yaml'}: {message}"]


def test_trace_on_a_torchserve_target_is_refused(tmp_path: Path) -> None:
    assert problems(tmp_path, scenario(torchserve_trace={})) == [
        f"{tmp_path / 'scenario.yaml'}: targets[1].trace: only applies to triton-grpc and triton-http"
        " targets; this target is torchserve-rest"
    ]
