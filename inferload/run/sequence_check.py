"""Is a Triton model a sequence (stateful) model, and how are its target's users to drive it?

Read from the model's config as Triton returns it (HTTP JSON, or gRPC's ``as_json`` form wrapped
in ``{"config": ...}``): a ``sequence_batching`` section makes it a sequence model, whose every
request needs a correlation ID and START/END flags (``inferload.users.sequence``). A
``CONTROL_SEQUENCE_CORRID`` control input of ``TYPE_STRING`` means string correlation IDs.

- a sequence model and a target without ``sequence``: driven with the defaults, and the run says so
  (``default_sequence_note``);
- ``sequence`` on a model that is not a sequence model: a start error (``sequence_problems``);
- a decoupled sequence model: a start error (the streaming user sends no sequence IDs yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferload.scenario.targets import Target
from inferload.users.sequence import SequenceSettings


def _config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("config")
    return inner if isinstance(inner, Mapping) else config


def triton_sequence_batching(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The model's ``sequence_batching`` section; None when it is not a sequence model."""
    section = _config(config).get("sequence_batching")
    return section if isinstance(section, Mapping) else None


def triton_string_correlation_ids(config: Mapping[str, Any]) -> bool:
    """True when the model takes its correlation ID as a string (``CONTROL_SEQUENCE_CORRID``, ``TYPE_STRING``)."""
    section = triton_sequence_batching(config) or {}
    for control_input in section.get("control_input", ()) or ():
        for control in control_input.get("control", ()) or ():
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID" and control.get("data_type") == "TYPE_STRING":
                return True
    return False


def sequence_settings_for(target: Target, config: Mapping[str, Any]) -> SequenceSettings | None:
    """How the target's users drive the model: None unless it is a sequence model."""
    if triton_sequence_batching(config) is None:
        return None
    return SequenceSettings.from_spec(target.sequence, triton_string_correlation_ids(config))


def default_sequence_note(target: Target, config: Mapping[str, Any]) -> str | None:
    """What the run says when it drives a sequence model with the default settings (no ``sequence`` key)."""
    settings = sequence_settings_for(target, config)
    if settings is None or target.sequence is not None:
        return None
    return (
        f"target {target.name!r}: model {target.model!r} is a sequence model (sequence_batching in its config);"
        f" each user sends sequences of {settings.length} requests, {settings.concurrent} open at a time"
        " (set the target's sequence: {length, concurrent} to choose)"
    )


def sequence_problems(target: Target, config: Mapping[str, Any]) -> list[str]:
    """Why the target cannot drive the model as a sequence model as its scenario says; empty when it can."""
    where = f"target {target.name!r}"
    model = f"model {target.model!r}"
    if triton_sequence_batching(config) is None:
        if target.sequence is None:
            return []
        return [
            f"{where}: sequence is set, but the {model} is not a sequence model (its config has no"
            " sequence_batching): remove the target's sequence key"
        ]
    policy = _config(config).get("model_transaction_policy")
    if isinstance(policy, Mapping) and policy.get("decoupled") is True:
        return [
            f"{where}: the {model} is a decoupled sequence model (sequence_batching and model_transaction_policy.decoupled):"
            " inferload does not drive decoupled sequence models yet"
        ]
    return []
