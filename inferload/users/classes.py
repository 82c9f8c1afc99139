"""The user class of each target kind, and `user_class_for`, which makes one per scenario target.

`inferload.users` takes its public names (its one ``__all__``) from here when they are first used.
"""

from __future__ import annotations

import re
from pathlib import Path

from inferload.scenario.targets import Target
from inferload.users.base import InferenceUser
from inferload.users.bentoml import BentoMLHttpUser
from inferload.users.kserve import KServeV1HttpUser, KServeV2GrpcUser, KServeV2HttpUser
from inferload.users.torchserve import TorchServeRestUser
from inferload.users.triton import TritonGrpcUser as TritonGrpcUser  # not a kind's class: for `inferload.users`
from inferload.users.triton import TritonHttpUser, TritonStreamUser

USER_CLASS_BY_KIND: dict[str, type[InferenceUser]] = {
    # unary ModelInfer, or the gRPC stream once the start check finds a decoupled model
    "triton-grpc": TritonStreamUser,
    "triton-http": TritonHttpUser,
    "torchserve-rest": TorchServeRestUser,
    "kserve-v2-http": KServeV2HttpUser,
    "kserve-v2-grpc": KServeV2GrpcUser,
    "kserve-v1-http": KServeV1HttpUser,
    "bentoml-http": BentoMLHttpUser,
}


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
