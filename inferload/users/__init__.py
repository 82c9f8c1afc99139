"""Locust user classes, one module per protocol; `user_class_for` makes one per scenario target.

The names below are imported when first used (PEP 562): importing a module of this package for its
helpers (`inferload.users.tls`, `inferload.users.sequence`) does not import Locust, whose gevent
monkey-patching would change the process that imported it. The CLI reads models' metadata through
those helpers and then starts child processes: patched, its `subprocess` forked through gevent,
and gRPC's poller aborted the child (epoll_wait: Bad file descriptor).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferload.users.base import InferenceClient, InferenceUser, InferResult, inference_task
    from inferload.users.bentoml import BentoMLHttpUser
    from inferload.users.classes import user_class_for
    from inferload.users.generation import OpenAIUser, TritonGenerateUser
    from inferload.users.kserve import KServeV1HttpUser, KServeV2GrpcUser, KServeV2HttpUser
    from inferload.users.torchserve import TorchServeRestUser
    from inferload.users.triton import TritonGrpcUser, TritonHttpUser, TritonStreamUser

__all__ = [
    "BentoMLHttpUser",
    "InferResult",
    "InferenceClient",
    "InferenceUser",
    "KServeV1HttpUser",
    "KServeV2GrpcUser",
    "KServeV2HttpUser",
    "OpenAIUser",
    "TorchServeRestUser",
    "TritonGenerateUser",
    "TritonGrpcUser",
    "TritonHttpUser",
    "TritonStreamUser",
    "inference_task",
    "user_class_for",
]

#: each public name's module, imported when the name is first used (``inferload`` takes its user
#: names from here)
_MODULE_OF = {
    "InferResult": "base",
    "InferenceClient": "base",
    "inference_task": "base",
    "InferenceUser": "base",
    "user_class_for": "classes",
    "TritonGrpcUser": "triton",
    "TritonHttpUser": "triton",
    "TritonStreamUser": "triton",
    "TorchServeRestUser": "torchserve",
    "KServeV1HttpUser": "kserve",
    "KServeV2GrpcUser": "kserve",
    "KServeV2HttpUser": "kserve",
    "BentoMLHttpUser": "bentoml",
    "OpenAIUser": "generation",
    "TritonGenerateUser": "generation",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
