"""`user_class_for`: a user class per scenario target, made from the class its kind's record names
(`inferload.scenario.kinds.ServerKind.scenario_class_name`)."""

from __future__ import annotations

import re
from pathlib import Path

import inferload.users
from inferload.scenario.kinds import SERVER_KINDS
from inferload.scenario.targets import Target
from inferload.users.base import InferenceUser


def user_class_for(target: Target, scenario_dir: Path) -> type[InferenceUser]:
    """A concrete user class for one target, named after it (Locust shows class names)."""
    base: type[InferenceUser] = getattr(inferload.users, SERVER_KINDS[target.kind].scenario_class_name)
    class_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", target.name) if part)
    return type(
        f"{class_name or 'Target'}User",
        (base,),
        {
            "abstract": False,
            "target": target,
            "weight": target.weight,
            "scenario_dir": scenario_dir,
            "__module__": base.__module__,
        },
    )
