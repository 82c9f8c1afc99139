"""Fit each target's user class to the model its server serves, and check at start that every
target's server can be reached and serves its model as the scenario sends it: each server's
`start_check` (named by its `inferload.scenario.kinds.ServerRecord`, beside the server's own
checks in ``startchecks/<server>.py``) returns `StartFindings`.

A Triton model's metadata and config come shipped with the locustfile (distributed runs: the master
read them once, `ModelInfos`) or are read from the server now. With the start checks (`fit_to_models(...,
check=True)`, the default; `--skip-start-checks` turns them off) every problem, one line per
target, ends in one `StartCheckError` before any load: a server that cannot be reached or does not
answer over the target's protocol, a model or version it does not serve (with the models it
serves), tensors that do not match (`startchecks.triton`). TorchServe targets are checked by
`startchecks.torchserve`. Without the checks (a distributed run's workers, `--skip-start-checks`), a
Triton model that cannot be read is only a warning: the run goes on and counts its failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferload.errors import InferloadError, StartCheckError
from inferload.scenario.kinds import implementation
from inferload.scenario.schema import Scenario

if TYPE_CHECKING:
    from inferload.scenario.targets import Target
    from inferload.users import InferenceUser
    from inferload.users.base import ModelFit

logger = logging.getLogger(__name__)

ModelInfo = tuple[dict[str, Any], dict[str, Any]]  # Triton model metadata and config


class ModelInfos:
    """Triton targets' (metadata, config) by target name: the shipped ones, then those read once with
    ``fetch`` (`startchecks.triton.fetch_triton_model_info`)."""

    def __init__(
        self,
        known: dict[str, ModelInfo] | None,
        fetch: Callable[[Target], ModelInfo],
    ) -> None:
        self.known: dict[str, ModelInfo] = dict(known or {})
        self._fetch = fetch

    def read(self, target: Target) -> ModelInfo:
        """The target's model info (read once); the fetch's InferloadError when it cannot be read."""
        if target.name not in self.known:
            self.known[target.name] = self._fetch(target)
        return self.known[target.name]

    def get(self, target: Target) -> ModelInfo | None:
        """The target's model info; None (and a warning) when it cannot be read."""
        try:
            return self.read(target)
        except InferloadError as exc:
            logger.warning("target %r: cannot read the model's metadata (%s); going on", target.name, exc)
            return None


@dataclass(frozen=True)
class StartFindings:
    """What one target's start check found: problems end the run before any load, warnings do not."""

    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: the model as read (None: nothing read; the class keeps the default fit)
    fit: ModelFit | None = None


@dataclass(frozen=True)
class StartContext:
    infos: ModelInfos
    base_dir: Path
    #: run the checks (False: a worker, or --skip-start-checks; the users are still fitted)
    check: bool


def fit_to_models(
    environment: Any,
    scenario: Scenario,
    user_classes: Iterable[type[InferenceUser]],
    infos: ModelInfos,
    check: bool = True,
) -> None:
    """Fit every target's users to its model (the model's fit in the run's `Wiring` of its class, in
    ``environment``) and, with `check`, run the start checks: raise one
    StartCheckError (a line per problem, in target order) when a server cannot be reached, does
    not serve the target's model, or the scenario's tensors differ from the model's; log each
    warning. The targets are checked side by side (each check has its own deadline: a slow server
    delays the start by one deadline, not one per target)."""
    by_target = {cls.target.name: cls for cls in user_classes}
    context = StartContext(infos, scenario.base_dir, check)

    def start_check(target: Target) -> StartFindings:
        found: StartFindings = implementation(target.server, "start_check")(by_target[target.name], context)
        return found

    with ThreadPoolExecutor(max_workers=max(1, len(scenario.targets)), thread_name_prefix="start-check") as pool:
        findings = list(pool.map(start_check, scenario.targets))
    problems: list[str] = []
    for target, found in zip(scenario.targets, findings, strict=True):
        if found.fit is not None:  # the one place a run takes its model's fit
            by_target[target.name].wiring_in(environment).fit = found.fit
        problems.extend(found.problems)
        for warning in found.warnings:
            logger.warning("%s; going on", warning)
    if problems:
        raise StartCheckError(problems)
