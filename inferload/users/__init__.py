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
    from inferload.users.base import InferenceUser
    from inferload.users.bentoml import BentoMLHttpUser
    from inferload.users.classes import user_class_for
    from inferload.users.client import InferenceClient, InferResult, inference_task
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
    "TorchServeRestUser",
    "TritonGrpcUser",
    "TritonHttpUser",
    "TritonStreamUser",
    "inference_task",
    "user_class_for",
]

#: the names that do not come from `inferload.users.classes`
_CLIENT_NAMES = ("InferResult", "InferenceClient", "inference_task")


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "inferload.users.client" if name in _CLIENT_NAMES else "inferload.users.classes"
    return getattr(import_module(module), name)
