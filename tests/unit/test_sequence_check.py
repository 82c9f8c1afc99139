"""Sequence models found at start from the model config (inferload.startchecks.triton), and the
start check's and the users' view of them.

The configs are what the real Triton 2.51 answered for the vendored ``sequence_py`` model
(tests/examples/triton/sequence_py), trimmed: over HTTP (``GET v2/models/sequence_py/config``) and
over gRPC (``as_json=True``: int64 values as strings, the config wrapped in ``{"config": ...}``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from inferload.scenario.loader import scenario_from_dict
from inferload.scenario.targets import DEFAULT_SEQUENCE_LENGTH, Target
from inferload.startchecks.triton import (
    check_target_against_triton,
    default_sequence_note,
    model_fit,
    sequence_problems,
    sequence_settings_for,
    triton_sequence_batching,
    triton_string_correlation_ids,
)
from inferload.users import user_class_for
from inferload.users.sequence import SequenceSettings

HTTP_CONFIG: dict[str, Any] = {
    "name": "sequence_py",
    "backend": "python",
    "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "format": "FORMAT_NONE", "dims": [1], "optional": False}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
    "sequence_batching": {
        "oldest": {"max_candidate_sequences": 4, "preferred_batch_size": [4], "max_queue_delay_microseconds": 1000000},
        "max_sequence_idle_microseconds": 10000000,
        "control_input": [],
        "state": [],
        "iterative_sequence": False,
    },
}
GRPC_CONFIG: dict[str, Any] = {
    "config": {
        "name": "sequence_py",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": ["1"]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": ["1"]}],
        "sequence_batching": {
            "max_sequence_idle_microseconds": "10000000",
            "oldest": {"max_candidate_sequences": 4, "preferred_batch_size": [4], "max_queue_delay_microseconds": "1000000"},
        },
        "backend": "python",
    }
}
METADATA: dict[str, Any] = {
    "name": "sequence_py",
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 1]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 1]}],
}
#: a model whose correlation ID goes in a string control input (the gRPC JSON form omits enum zeros)
STRING_ID_CONFIG: dict[str, Any] = {
    "config": {
        **GRPC_CONFIG["config"],
        "sequence_batching": {
            "direct": {},
            "control_input": [{"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_STRING"}]}],
        },
    }
}
PLAIN_CONFIG: dict[str, Any] = {k: v for k, v in HTTP_CONFIG.items() if k != "sequence_batching"} | {"dynamic_batching": {}}


def target(kind: str = "triton-grpc", sequence: dict[str, Any] | None = None) -> Target:
    data: dict[str, Any] = {
        "name": "seq",
        "kind": kind,
        "address": "127.0.0.1:8001" if kind == "triton-grpc" else "127.0.0.1:8000",
        "model": "sequence_py",
        "inputs": [{"name": "INPUT0", "shape": [1], "dtype": "INT32"}],
    }
    if sequence is not None:
        data["sequence"] = sequence
    return scenario_from_dict(
        {"name": "u", "duration": "5s", "targets": [data], "shape": {"kind": "steady", "users": 1}}
    ).targets[0]


@pytest.mark.parametrize("config", [HTTP_CONFIG, GRPC_CONFIG], ids=["http", "grpc"])
def test_a_sequence_model_is_found_in_either_protocols_config(config: dict[str, Any]) -> None:
    assert triton_sequence_batching(config) is not None
    assert not triton_string_correlation_ids(config)
    assert sequence_settings_for(target(), config) == SequenceSettings(DEFAULT_SEQUENCE_LENGTH, 1, string_ids=False)
    assert sequence_settings_for(target(sequence={"length": 3, "concurrent": 2}), config) == SequenceSettings(3, 2)
    assert check_target_against_triton(target(), METADATA, config) == []


def test_a_string_correlation_id_control_input_gives_string_ids() -> None:
    assert triton_string_correlation_ids(STRING_ID_CONFIG)
    assert sequence_settings_for(target(sequence={"length": 2}), STRING_ID_CONFIG) == SequenceSettings(2, 1, string_ids=True)


def test_a_model_that_is_not_a_sequence_model_gets_no_sequence_and_refuses_the_key() -> None:
    assert triton_sequence_batching(PLAIN_CONFIG) is None
    assert sequence_settings_for(target(sequence={"length": 3}), PLAIN_CONFIG) is None
    assert sequence_problems(target(), PLAIN_CONFIG) == []
    assert check_target_against_triton(target(sequence={"length": 3}), METADATA, PLAIN_CONFIG) == [
        "target 'seq': sequence is set, but the model 'sequence_py' is not a sequence model (its config has no"
        " sequence_batching): remove the target's sequence key"
    ]


def test_a_decoupled_sequence_model_is_refused_at_start() -> None:
    config = {"config": {**GRPC_CONFIG["config"], "model_transaction_policy": {"decoupled": True}}}
    (problem,) = sequence_problems(target(), config)
    assert "decoupled sequence model" in problem and "does not drive" in problem


def test_the_run_says_when_it_uses_the_default_sequence_settings() -> None:
    note = default_sequence_note(target(), HTTP_CONFIG)
    assert note is not None
    assert f"sequences of {DEFAULT_SEQUENCE_LENGTH} requests, 1 open at a time" in note and "sequence:" in note
    assert default_sequence_note(target(sequence={"length": 3}), HTTP_CONFIG) is None
    assert default_sequence_note(target(), PLAIN_CONFIG) is None


@pytest.mark.parametrize("kind", ["triton-grpc", "triton-http"])
def test_a_sequence_models_fit_has_its_sequence_settings(kind: str, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    assert user_class_for(target(kind), tmp_path).fit.sequence_settings is None  # nothing read yet
    with caplog.at_level(logging.INFO, logger="inferload.startchecks.triton"):
        fit = model_fit(target(kind), (METADATA, GRPC_CONFIG))
    assert fit.sequence_settings == SequenceSettings(DEFAULT_SEQUENCE_LENGTH, 1)
    assert "is a sequence model" in caplog.text
    assert model_fit(target(kind), (METADATA, PLAIN_CONFIG)).sequence_settings is None
