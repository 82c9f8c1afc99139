"""Fit each Triton target's user class to the model the server serves, and check at start that
every target's server can be reached and serves its model as the scenario sends it.

A model's metadata and config come shipped with the locustfile (distributed runs: the master
read them once) or are read from the server now. With the start checks (`fit_to_models(...,
check=True)`, the default; `--skip-start-checks` turns them off) every problem, one line per
target, ends in one `StartCheckError` before any load: a server that cannot be reached or does not
answer over the target's protocol, a model or version it does not serve (with the models it
serves), tensors that do not match (`triton_check`). TorchServe targets are checked by
`torchserve_check`. Without the checks (a distributed run's workers, `--skip-start-checks`), a
Triton model that cannot be read is only a warning: the run goes on and counts its failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError, ModelMismatchError, ServerError, StartCheckError
from inferload.run.bentoml_check import check_bentoml_target
from inferload.run.kserve_check import fit_kserve_target
from inferload.run.torchserve_check import check_torchserve_target
from inferload.run.triton_check import (
    check_target_against_triton,
    default_sequence_note,
    fetch_triton_model_info,
    sequence_settings_for,
    triton_model_batches,
    triton_model_decoupled,
)
from inferload.scenario.headers import HeadersError, request_headers
from inferload.scenario.kinds import Server
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import Target
from inferload.users import InferenceUser
from inferload.users.base import batched_output_names, expected_output_shapes
from inferload.users.triton import TritonStreamUser

logger = logging.getLogger(__name__)

ModelInfo = tuple[dict[str, Any], dict[str, Any]]  # Triton model metadata and config


class ModelInfos:
    """Triton targets' (metadata, config) by target name: the shipped ones, then those read once."""

    def __init__(
        self,
        known: dict[str, ModelInfo] | None = None,
        fetch: Callable[[Target], ModelInfo] = fetch_triton_model_info,
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


def fit_user_class(cls: type[InferenceUser], info: ModelInfo) -> None:
    """Whether the model takes a batch dimension, the output shapes answers must have, and a sequence
    model's correlation IDs and flags (the run says when it uses the default sequence settings)."""
    metadata, config = info
    cls.model_batches = triton_model_batches(config)
    model_config = config.get("config", config)  # gRPC's JSON wraps it
    max_batch = int(model_config.get("max_batch_size", 0) or 0) if cls.model_batches else 0
    cls.expected_outputs = expected_output_shapes(cls.target, metadata, max_batch)
    cls.batched_outputs = batched_output_names(metadata, max_batch > 0)
    cls.sequence_settings = sequence_settings_for(cls.target, config)  # None unless a sequence model
    note = default_sequence_note(cls.target, config)
    if note:
        logger.info("%s", note)
    if issubclass(cls, TritonStreamUser) and triton_model_decoupled(config) != cls.decoupled:
        cls.decoupled = triton_model_decoupled(config)
        if cls.decoupled:
            logger.info(
                "target %r: model %r is decoupled: each user sends its requests over one gRPC stream (ModelStreamInfer)",
                cls.target.name,
                cls.target.model,
            )


@dataclass(frozen=True)
class StartFindings:
    """What one target's start check found: problems end the run before any load, warnings do not."""

    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StartContext:
    infos: ModelInfos
    base_dir: Path
    #: run the checks (False: a worker, or --skip-start-checks; the users are still fitted)
    check: bool
    check_torchserve: Callable[[Target], str | None]


def _triton_start(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    target = cls.target
    if not context.check:
        info = context.infos.get(target)  # a warning when unreadable
        if info is not None:
            fit_user_class(cls, info)
        return StartFindings()
    try:  # the users would stop at start without them: say so before any load
        request_headers(target.name, target.headers, target.headers_from_env, target.token_file, context.base_dir)
        info = context.infos.read(target)
    except (HeadersError, ServerError, ModelMismatchError) as exc:
        return StartFindings(problems=(str(exc),))
    fit_user_class(cls, info)
    return StartFindings(problems=tuple(check_target_against_triton(target, *info)))


def _kserve_start(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    """The standard metadata (v2) or model status (v1)."""
    return StartFindings(problems=tuple(fit_kserve_target(cls, context.check)))


def _bentoml_start(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    if not context.check:
        return StartFindings()
    try:
        check_bentoml_target(cls.target)
    except (ServerError, ModelMismatchError, HeadersError) as exc:
        return StartFindings(problems=(str(exc),))
    return StartFindings()


def _torchserve_start(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    if not context.check:
        return StartFindings()
    try:
        warning = context.check_torchserve(cls.target)
    except (ServerError, ModelMismatchError) as exc:
        return StartFindings(problems=(str(exc),))
    return StartFindings(warnings=(warning,) if warning else ())


#: each server's start check (fits the target's user class to the model, where there is something to fit)
START_CHECKS: dict[Server, Callable[[type[InferenceUser], StartContext], StartFindings]] = {
    "triton": _triton_start,
    "kserve": _kserve_start,
    "bentoml": _bentoml_start,
    "torchserve": _torchserve_start,
}


def fit_to_models(
    scenario: Scenario,
    user_classes: Iterable[type[InferenceUser]],
    infos: ModelInfos,
    check: bool = True,
    check_torchserve: Callable[[Target], str | None] = check_torchserve_target,
) -> None:
    """Fit every target's users to its model and, with `check`, run the start checks: raise one
    StartCheckError (a line per problem, in target order) when a server cannot be reached, does
    not serve the target's model, or the scenario's tensors differ from the model's; log each
    warning."""
    by_target = {cls.target.name: cls for cls in user_classes}
    context = StartContext(infos, scenario.base_dir, check, check_torchserve)
    problems: list[str] = []
    for target in scenario.targets:
        found = START_CHECKS[target.server](by_target[target.name], context)
        problems.extend(found.problems)
        for warning in found.warnings:
            logger.warning("%s; going on", warning)
    if problems:
        raise StartCheckError(problems)
