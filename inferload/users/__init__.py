"""Locust user classes, one module per protocol; `user_class_for` makes one per scenario target."""

from __future__ import annotations

import re
from pathlib import Path

from inferload.scenario.targets import Target
from inferload.users.base import InferenceUser
from inferload.users.torchserve_rest import TorchServeRestUser
from inferload.users.triton_grpc import TritonGrpcUser
from inferload.users.triton_http import TritonHttpUser
from inferload.users.triton_stream import TritonStreamUser

USER_CLASS_BY_KIND: dict[str, type[InferenceUser]] = {
    # unary ModelInfer, or the gRPC stream once the start check finds a decoupled model
    "triton-grpc": TritonStreamUser,
    "triton-http": TritonHttpUser,
    "torchserve-rest": TorchServeRestUser,
}

__all__ = ["InferenceUser", "TorchServeRestUser", "TritonGrpcUser", "TritonHttpUser", "TritonStreamUser", "user_class_for"]


def user_class_for(
    target: Target,
    scenario_dir: Path,
    expected_outputs: dict[str, tuple[int, ...]] | None = None,
) -> type[InferenceUser]:
    """A concrete user class for one target, named after it (Locust shows class names)."""
    base = USER_CLASS_BY_KIND[target.kind]
    class_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", target.name) if part)
    return type(
        f"{class_name or 'Target'}User",
        (base,),
        {
            "abstract": False,
            "target": target,
            "weight": target.weight,
            "scenario_dir": scenario_dir,
            "expected_outputs": dict(expected_outputs or {}),
            "__module__": base.__module__,
        },
    )
