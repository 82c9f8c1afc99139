"""A server's model metadata and Triton's config are read only once their keys have the types inferload reads:
Triton's and KServe's real forms (HTTP JSON, gRPC's JSON with int64 as strings) pass, a wrong type is a path."""

from __future__ import annotations

from inferload.startchecks.model_metadata import metadata_problem, triton_config_problem
from tests.unit.test_triton_check import cnn_config, cnn_metadata

GRPC_CONFIG = {  # tritonclient.grpc's get_model_config(as_json=True)["config"]: int64 dims as strings
    "name": "seq",
    "max_batch_size": 8,
    "input": [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": ["1"]}],
    "output": [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": ["-1"]}],
    "sequence_batching": {
        "max_sequence_idle_microseconds": "5000000",
        "control_input": [
            {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
            {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_STRING"}]},
        ],
    },
    "model_transaction_policy": {"decoupled": False},
}


def test_the_real_forms_have_no_problem() -> None:
    assert metadata_problem(cnn_metadata()) is None
    assert metadata_problem({**cnn_metadata(), "outputs": [{"name": "O", "datatype": "FP32", "shape": ["-1", "10"]}]}) is None
    assert metadata_problem({"name": "m", "versions": ["1"], "platform": "x"}) is None  # no tensors stated: nothing to read
    assert triton_config_problem(cnn_config()) is None
    assert triton_config_problem(GRPC_CONFIG) is None


def test_a_wrong_type_is_named_by_its_path() -> None:
    assert metadata_problem({"inputs": {"IN": 1}}) == "inputs: Input should be a valid list"
    assert metadata_problem({"outputs": [{"name": "O", "shape": [1.5]}]}) is not None
    assert metadata_problem({"outputs": [{"name": "O", "shape": ["1e3"]}]}) is not None
    assert triton_config_problem({**cnn_config(), "max_batch_size": True}) == "max_batch_size: Input should be a valid integer"
    wrong = {**GRPC_CONFIG, "sequence_batching": {"control_input": [{"control": [{"kind": 7}]}]}}
    assert triton_config_problem(wrong) == "sequence_batching.control_input[0].control[0].kind: Input should be a valid string"
