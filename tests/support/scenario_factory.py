"""Small scenarios built in code for tests (validated by the same models as YAML files), the one
helper that writes a scenario file, and the problems loading one raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from inferload.errors import Problem, ScenarioError
from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import Target

KindClass = TypeVar("KindClass", bound=Target)


def write_scenario(folder: Path, data: Any, name: str = "scenario.yaml") -> Path:
    """`data` as a YAML scenario file `folder/name` (keys in the order given); its path."""
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def bare_target(
    name: str,
    kind: str,
    address: str,
    model: str = "cnn",
    input_name: str = "INPUT__0",
    shape: tuple[int, ...] = (4,),
    dtype: str = "FP32",
    **extra: Any,
) -> dict[str, Any]:
    """A target with its required keys only (one input, no data), then ``extra``: what key tests start from."""
    target: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "address": address,
        "model": model,
        "inputs": [{"name": input_name, "shape": list(shape), "dtype": dtype}],
    }
    target.update(extra)
    return target


def steady_one_user(*targets: dict[str, Any], name: str = "unit", duration: str = "10s") -> dict[str, Any]:
    """A scenario's data: ``targets`` under one steady user."""
    return {"name": name, "duration": duration, "targets": list(targets), "shape": {"kind": "steady", "users": 1}}


def load_problems(folder: Path, data: Any) -> list[Problem]:
    """The problems that loading ``data``, written as ``folder/scenario.yaml``, raises (the test fails if it loads)."""
    path = write_scenario(folder, data)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value.problems


def key_problems(folder: Path, data: Any) -> list[tuple[str, str]]:
    """(key path, message) of each problem ``load_problems`` finds, each checked to read ``file: key.path: message``."""
    problems = load_problems(folder, data)
    for problem in problems:
        assert str(problem) == f"{folder / 'scenario.yaml'}: {problem.key_path}: {problem.message}"
    return [(problem.key_path, problem.message) for problem in problems]


def cnn_target(name: str, kind: str, address: str, **extra: Any) -> dict[str, Any]:
    target: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "address": address,
        "model": "cnn",
        "inputs": [{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32", "data": {"generator": "random", "seed": 0}}],
        "timeout": "5s",
    }
    target.update(extra)
    return target


def tiny_target(name: str, kind: str, address: str, **extra: Any) -> dict[str, Any]:
    target = cnn_target(name, kind, address, **extra)
    target["model"] = "tiny"
    target["inputs"] = [{"name": "INPUT__0", "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 1}}]
    return target


def scenario(shape: dict[str, Any], duration: str = "60s", targets: list[dict[str, Any]] | None = None, **extra: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "test",
        "duration": duration,
        "targets": targets or [tiny_target("t", "triton-grpc", "127.0.0.1:8001")],
        "shape": shape,
    }
    data.update(extra)
    return Scenario.model_validate(data)


def targets_of(model: type[KindClass], scenario: Scenario) -> list[KindClass]:
    """The scenario's targets, each checked to be of the kind's class ``model`` (its keys typed on it)."""
    assert all(isinstance(target, model) for target in scenario.targets), [type(t).__name__ for t in scenario.targets]
    return [target for target in scenario.targets if isinstance(target, model)]
