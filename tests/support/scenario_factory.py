"""Small scenarios built in code for tests (validated by the same models as YAML files), and the
one helper that writes a scenario file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inferload.scenario.model import Scenario


def write_scenario(folder: Path, data: Any, name: str = "scenario.yaml") -> Path:
    """`data` as a YAML scenario file `folder/name` (keys in the order given); its path."""
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


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
