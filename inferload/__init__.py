"""inferload: load testing for ML inference servers (Triton, TorchServe) on Locust.

The public API, for hand-written locustfiles and scripts (docs/python-api.md):

    from inferload import InputSpec, Target, TritonGrpcUser

    class Tiny(TritonGrpcUser):
        target = Target(name="tiny", kind="triton-grpc", address="127.0.0.1:8001", model="tiny",
                        inputs=[InputSpec(name="INPUT__0", shape=(16,), dtype="FP32")])

- users, one per protocol on one base: ``InferenceUser``, ``TritonGrpcUser``, ``TritonHttpUser``,
  ``TorchServeRestUser`` (give a subclass a ``target``);
- the scenario model and its readers: ``Target``, ``InputSpec``, ``DataSpec``, ``Scenario``,
  ``load_scenario`` (a YAML file), ``scenario_from_dict`` (a dict as YAML would give);
- ``install``: what inferload's own locustfile does (a scenario's users, shape, options and results);
- the errors of ``inferload.errors`` (the tree is drawn there).

``import inferload`` stays cheap and changes nothing: the names above that need Locust (and so
gevent's monkey patching), numpy, pydantic or gRPC are imported when first used, not before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from inferload.errors import (
    BadOutputShape,
    ConnectionRefused,
    GrpcStatusError,
    HttpStatusError,
    InferloadError,
    JavaMissingError,
    ModelMismatchError,
    PortInUseError,
    Problem,
    RequestError,
    RequestTimeout,
    RunKeyError,
    ScenarioError,
    ScrapeError,
    ServerError,
    StartCheckError,
)

if TYPE_CHECKING:
    from inferload.run.install import install
    from inferload.scenario.loader import load_scenario, scenario_from_dict
    from inferload.scenario.model import Scenario
    from inferload.scenario.targets import DataSpec, InputSpec, Target
    from inferload.users.base import InferenceUser
    from inferload.users.torchserve_rest import TorchServeRestUser
    from inferload.users.triton_grpc import TritonGrpcUser
    from inferload.users.triton_http import TritonHttpUser

#: name -> the module it is imported from on first use
_LAZY = {
    "InferenceUser": "inferload.users.base",
    "TritonGrpcUser": "inferload.users.triton_grpc",
    "TritonHttpUser": "inferload.users.triton_http",
    "TorchServeRestUser": "inferload.users.torchserve_rest",
    "Target": "inferload.scenario.targets",
    "InputSpec": "inferload.scenario.targets",
    "DataSpec": "inferload.scenario.targets",
    "Scenario": "inferload.scenario.model",
    "load_scenario": "inferload.scenario.loader",
    "scenario_from_dict": "inferload.scenario.loader",
    "install": "inferload.run.install",
}

__all__ = [
    "BadOutputShape",
    "ConnectionRefused",
    "DataSpec",
    "GrpcStatusError",
    "HttpStatusError",
    "InferenceUser",
    "InferloadError",
    "InputSpec",
    "JavaMissingError",
    "ModelMismatchError",
    "PortInUseError",
    "Problem",
    "RequestError",
    "RequestTimeout",
    "RunKeyError",
    "Scenario",
    "ScenarioError",
    "ScrapeError",
    "ServerError",
    "StartCheckError",
    "Target",
    "TorchServeRestUser",
    "TritonGrpcUser",
    "TritonHttpUser",
    "install",
    "load_scenario",
    "scenario_from_dict",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'inferload' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
