"""inferload: load testing for ML inference servers (Triton, TorchServe, KServe, BentoML) on Locust.

The public API, for hand-written locustfiles and scripts (docs/python-api.md):

    from locust import task
    from inferload import TritonGrpcUser

    class Tiny(TritonGrpcUser):
        target = {"name": "tiny", "address": "127.0.0.1:8001", "model": "tiny",
                  "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}]}

        @task
        def first_request(self):
            self.client.infer(request_index=0)  # timed and reported like the default task's calls

- users, one per target kind on one base (``InferenceUser``): ``TritonGrpcUser`` (and
  ``TritonStreamUser`` for decoupled models), ``TritonHttpUser``, ``TorchServeRestUser``,
  ``KServeV2HttpUser``, ``KServeV2GrpcUser``, ``KServeV1HttpUser``, ``BentoMLHttpUser``: give a
  subclass a ``target``; ``self.client`` (an ``InferenceClient``: ``infer() -> InferResult``) and
  the default task ``inference_task``;
- ``attach(environment, ...)``: inferload's exact percentiles, summary.json, SLO exit codes and
  InfluxDB streaming for any locustfile's own users (``AttachedRun``);
- the scenario model and its readers: ``Target`` (and each kind's class: ``TritonTarget``, ``TorchServeTarget``,
  ``KServeTarget``, ``BentoMLTarget``, ``GenerativeTarget``), ``InputSpec``, ``DataSpec``, ``Slo``, ``Scenario``,
  ``load_scenario`` (a YAML file), ``scenario_from_dict`` (a dict as YAML would give);
- ``scenario_classes`` (``ScenarioClasses``): what inferload's own locustfile does
  (a scenario's users, shape, options and results);
- the errors of ``inferload.errors`` (the tree is drawn there).

``import inferload`` stays cheap and changes nothing: the names above that need Locust (and so
gevent's monkey patching), numpy, pydantic or gRPC are imported when first used, not before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from inferload.errors import (
    BadOutputShape,
    ConfigFileError,
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
    SequenceRefused,
    ServerChangeError,
    ServerError,
    StartCheckError,
    StoppedBeforeStart,
    UsageError,
)

if TYPE_CHECKING:
    from inferload.run.attached_run import AttachedRun, attach
    from inferload.run.locust_classes import ScenarioClasses, scenario_classes
    from inferload.scenario.inputs import DataSpec, InputSpec
    from inferload.scenario.loader import load_scenario, scenario_from_dict
    from inferload.scenario.schema import Scenario
    from inferload.scenario.targets import (
        BentoMLTarget,
        GenerativeTarget,
        KServeTarget,
        Slo,
        Target,
        TorchServeTarget,
        TritonTarget,
    )
    from inferload.users.base import InferenceClient, InferenceUser, InferResult, inference_task
    from inferload.users.bentoml import BentoMLHttpUser
    from inferload.users.kserve import KServeV1HttpUser, KServeV2GrpcUser, KServeV2HttpUser
    from inferload.users.torchserve import TorchServeRestUser
    from inferload.users.triton import TritonGrpcUser, TritonHttpUser, TritonStreamUser

#: name -> the module it is imported from on first use
_LAZY = {
    # the users' names: `inferload.users` knows each one's module
    "InferenceUser": "inferload.users",
    "InferenceClient": "inferload.users",
    "InferResult": "inferload.users",
    "inference_task": "inferload.users",
    "TritonGrpcUser": "inferload.users",
    "TritonStreamUser": "inferload.users",
    "TritonHttpUser": "inferload.users",
    "TorchServeRestUser": "inferload.users",
    "KServeV2HttpUser": "inferload.users",
    "KServeV2GrpcUser": "inferload.users",
    "KServeV1HttpUser": "inferload.users",
    "BentoMLHttpUser": "inferload.users",
    "OpenAIUser": "inferload.users",
    "TritonGenerateUser": "inferload.users",
    "Target": "inferload.scenario.targets",
    "BentoMLTarget": "inferload.scenario.targets",
    "GenerativeTarget": "inferload.scenario.targets",
    "KServeTarget": "inferload.scenario.targets",
    "TorchServeTarget": "inferload.scenario.targets",
    "TritonTarget": "inferload.scenario.targets",
    "InputSpec": "inferload.scenario.inputs",
    "DataSpec": "inferload.scenario.inputs",
    "Slo": "inferload.scenario.targets",
    "Scenario": "inferload.scenario.schema",
    "load_scenario": "inferload.scenario.loader",
    "scenario_from_dict": "inferload.scenario.loader",
    "attach": "inferload.run.attached_run",
    "AttachedRun": "inferload.run.attached_run",
    "scenario_classes": "inferload.run.locust_classes",
    "ScenarioClasses": "inferload.run.locust_classes",
}

__all__ = [
    "AttachedRun",
    "BadOutputShape",
    "BentoMLHttpUser",
    "BentoMLTarget",
    "ConfigFileError",
    "ConnectionRefused",
    "DataSpec",
    "GenerativeTarget",
    "GrpcStatusError",
    "HttpStatusError",
    "InferResult",
    "InferenceClient",
    "InferenceUser",
    "InferloadError",
    "InputSpec",
    "JavaMissingError",
    "KServeTarget",
    "KServeV1HttpUser",
    "KServeV2GrpcUser",
    "KServeV2HttpUser",
    "ModelMismatchError",
    "OpenAIUser",
    "PortInUseError",
    "Problem",
    "RequestError",
    "RequestTimeout",
    "RunKeyError",
    "Scenario",
    "ScenarioClasses",
    "ScenarioError",
    "ScrapeError",
    "SequenceRefused",
    "ServerChangeError",
    "ServerError",
    "Slo",
    "StartCheckError",
    "StoppedBeforeStart",
    "Target",
    "TorchServeRestUser",
    "TorchServeTarget",
    "TritonGenerateUser",
    "TritonGrpcUser",
    "TritonHttpUser",
    "TritonStreamUser",
    "TritonTarget",
    "UsageError",
    "attach",
    "inference_task",
    "load_scenario",
    "scenario_classes",
    "scenario_from_dict",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'inferload' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
