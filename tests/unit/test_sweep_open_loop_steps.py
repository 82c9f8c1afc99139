"""A sweep or capacity step keeps the scenario's arrival law at the step's rate: "capacity under my
p99 with my traffic" is one command."""

from __future__ import annotations

from pathlib import Path

from inferload.measure.windows import StabilityRule
from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.shapes import ReplayShape
from inferload.traffic.arrivals import law_for
from inferload.tune.step import StepPlan, step_scenario
from tests.support.scenario_factory import bare_target, write_scenario

PLAN = StepPlan(open_loop=True, rule=StabilityRule(3, 10.0, 10), window_s=1.0, warmup_s=2.0, target="a", max_in_flight=8)


def base(folder: Path, shape: dict[str, object]) -> dict[str, object]:
    data = {"name": "s", "duration": "10s", "targets": [bare_target("a", "triton-grpc", "127.0.0.1:1")], "shape": shape}
    return scenario_to_dict(load_scenario(write_scenario(folder, data)))


def test_a_replay_step_is_the_recording_rescaled_to_the_level_and_looped(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("t_s\n0\n0.01\n0.02\n1\n1.01\n1.9\n")  # 6 arrivals, bursty
    step = step_scenario(base(tmp_path, {"kind": "replay", "file": "trace.csv", "speed": 3, "start": 0}), PLAN, 40.0)
    scenario = scenario_from_dict(step, source_path=tmp_path / "step.yaml")
    shape = scenario.shape
    assert isinstance(shape, ReplayShape)
    assert (shape.rate, shape.speed, shape.loop, shape.max_in_flight) == (40.0, None, True, 8)
    assert shape.file == str((tmp_path / "trace.csv").resolve())
    arrivals = list(law_for(scenario).arrivals(0))
    assert abs(len(arrivals) / PLAN.max_duration_s - 40.0) <= 40.0 * 0.05  # the step's rate, the shape kept


def test_gamma_and_poisson_steps_keep_their_law_and_seed(tmp_path: Path) -> None:
    gamma = step_scenario(base(tmp_path, {"kind": "gamma", "rate": 5, "cv": 3, "seed": 4}), PLAN, 80.0)
    assert gamma["shape"] == {"kind": "gamma", "cv": 3.0, "seed": 4, "rate": 80.0, "max_in_flight": 8}
    ramp = {"kind": "ramping-rate", "from_rate": 1, "to_rate": 5, "over": "5s"}
    assert step_scenario(base(tmp_path, ramp), PLAN, 80.0)["shape"] == {"kind": "constant-rate", "rate": 80.0, "max_in_flight": 8}
