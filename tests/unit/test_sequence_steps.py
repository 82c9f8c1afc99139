"""Correlation IDs and START/END flags per call (inferload.users.sequence), and their gRPC bytes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import InferInput, service_pb2
from tritonclient.grpc._utils import _get_inference_request

from inferload.scenario.targets import DEFAULT_SEQUENCE_LENGTH, SequenceSpec
from inferload.users.sequence import (
    MAX_CORRELATION_ID,
    CorrelationIds,
    SequenceSettings,
    UserSequences,
    grpc_sequence_parameters,
    http_body_with_sequence,
    user_sequences,
)


def steps(sequences: UserSequences, calls: int) -> list[tuple[int | str, bool, bool]]:
    return [(s.correlation_id, s.start, s.end) for s in (sequences.next_step() for _ in range(calls))]


def test_one_sequence_at_a_time_start_on_the_first_end_on_the_last_then_a_new_id() -> None:
    sequences = UserSequences(SequenceSettings(length=3, concurrent=1), CorrelationIds(first=100))
    assert steps(sequences, 7) == [
        (100, True, False),
        (100, False, False),
        (100, False, True),
        (101, True, False),
        (101, False, False),
        (101, False, True),
        (102, True, False),
    ]


def test_a_sequence_of_one_request_starts_and_ends_on_it() -> None:
    sequences = UserSequences(SequenceSettings(length=1, concurrent=1), CorrelationIds(first=7))
    assert steps(sequences, 3) == [(7, True, True), (8, True, True), (9, True, True)]


def test_concurrent_sequences_are_interleaved_each_with_its_own_id_and_flags() -> None:
    sequences = UserSequences(SequenceSettings(length=2, concurrent=3), CorrelationIds(first=1))
    assert steps(sequences, 8) == [
        (1, True, False),
        (2, True, False),
        (3, True, False),
        (1, False, True),
        (2, False, True),
        (3, False, True),
        (4, True, False),
        (5, True, False),
    ]


def test_a_failed_call_abandons_its_sequence_and_its_slot_starts_a_new_one() -> None:
    sequences = UserSequences(SequenceSettings(length=3, concurrent=2), CorrelationIds(first=10))
    assert steps(sequences, 3) == [(10, True, False), (11, True, False), (10, False, False)]
    sequences.abandon()  # the call of sequence 10 failed
    assert steps(sequences, 3) == [(11, False, False), (12, True, False), (11, False, True)]


def test_a_refused_opening_opens_the_same_sequence_again_not_a_new_id() -> None:
    """TorchServe refuses a new sequence while it holds maxNumSequence (an ended one among them for a
    while): opening a new id at each refusal made 18,509 failures in 8 s; the same id is opened again."""
    sequences = UserSequences(SequenceSettings(length=3, concurrent=1), CorrelationIds(first=10))
    assert steps(sequences, 1) == [(10, True, False)] and sequences.opened
    sequences.open_again()
    assert steps(sequences, 1) == [(10, True, False)]  # the same id, opened again
    sequences.open_again()
    assert steps(sequences, 4) == [(10, True, False), (10, False, False), (10, False, True), (11, True, False)]
    assert sequences.opened
    assert steps(sequences, 1) == [(11, False, False)] and not sequences.opened


def test_ids_are_random_63_bit_numbers_unique_per_user_and_wrap_past_the_largest() -> None:
    firsts = {CorrelationIds().next() for _ in range(50)}
    assert len(firsts) == 50
    assert all(isinstance(i, int) and 1 <= i <= MAX_CORRELATION_ID for i in firsts)
    ids = CorrelationIds(first=MAX_CORRELATION_ID)
    assert [ids.next(), ids.next()] == [MAX_CORRELATION_ID, 1]  # never 0: Triton reads 0 as "no sequence"
    with pytest.raises(ValueError, match="1 to 2"):
        CorrelationIds(first=0)


def test_string_ids_for_models_that_take_a_string_correlation_id() -> None:
    sequences = UserSequences(SequenceSettings(length=1, concurrent=1, string_ids=True), CorrelationIds(first=5, string_ids=True))
    step = sequences.next_step()
    assert step.correlation_id == "5"
    parsed = service_pb2.ModelInferRequest.FromString(step.grpc_parameters)
    assert parsed.parameters["sequence_id"].string_param == "5"


@pytest.mark.parametrize(("start", "end"), [(True, False), (False, False), (False, True), (True, True)])
def test_appended_parameters_make_the_request_tritonclient_would_send(start: bool, end: bool) -> None:
    """A serialized request + the step's bytes parses as tritonclient's own request with those flags."""
    infer_input = InferInput("INPUT0", [1, 1], "INT32")
    infer_input.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    plain = _get_inference_request("sequence_py", [infer_input], "", "", None, 0, False, False, 0, None, None)
    theirs = _get_inference_request("sequence_py", [infer_input], "", "", None, 2**62 + 9, start, end, 0, None, None)

    merged = service_pb2.ModelInferRequest.FromString(plain.SerializeToString() + grpc_sequence_parameters(2**62 + 9, start, end))
    assert merged.parameters["sequence_id"].int64_param == 2**62 + 9
    # Triton reads an absent flag as false; tritonclient always sends both
    for flag, wanted in (("sequence_start", start), ("sequence_end", end)):
        assert merged.parameters[flag].bool_param is wanted
        assert theirs.parameters[flag].bool_param is wanted
    merged.parameters["sequence_start"].bool_param = start
    merged.parameters["sequence_end"].bool_param = end
    assert merged == theirs


def test_user_sequences_come_from_the_fitted_settings_else_the_scenario_key() -> None:
    fitted = SequenceSettings(length=5, concurrent=2, string_ids=True)
    from_model = user_sequences(fitted, None)
    assert from_model is not None and from_model.settings == fitted
    from_key = user_sequences(None, SequenceSpec(length=4))
    assert from_key is not None and from_key.settings == SequenceSettings(length=4, concurrent=1)
    assert user_sequences(None, None) is None
    assert SequenceSettings.from_spec(None) == SequenceSettings(DEFAULT_SEQUENCE_LENGTH, 1)


@pytest.mark.parametrize("outputs", [["OUTPUT0"], None], ids=["outputs", "no-outputs"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_an_http_body_built_up_front_gets_the_parameters_tritonclient_would_send(outputs: list[str] | None, binary: bool) -> None:
    infer_input = httpclient.InferInput("INPUT0", [1, 1], "INT32")
    infer_input.set_data_from_numpy(np.array([[3]], dtype=np.int32), binary_data=binary)
    requested = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs] if outputs else None
    body, json_size = httpclient.InferenceServerClient.generate_request_body([infer_input], outputs=requested)
    step = UserSequences(SequenceSettings(length=2, concurrent=1), CorrelationIds(first=2**62 + 1)).next_step()
    theirs, their_size = httpclient.InferenceServerClient.generate_request_body(
        [infer_input], outputs=requested, sequence_id=step.correlation_id, sequence_start=True, sequence_end=False
    )

    ours, our_size = http_body_with_sequence(body, json_size, step)

    assert (our_size is None) == (their_size is None) == (not binary)
    assert json.loads(ours[:our_size]) == json.loads(theirs[:their_size])
    if binary:
        assert ours[our_size:] == theirs[their_size:]  # the tensors, untouched


def test_a_header_of_another_form_is_parsed_and_written_again() -> None:
    step = UserSequences(SequenceSettings(length=1, concurrent=1), CorrelationIds(first=9)).next_step()
    for header in (b'{"inputs": [], "parameters": {}}', b'{"parameters": {"priority": 1}, "inputs": []}'):
        body, size = http_body_with_sequence(header + b"TENSORS", len(header), step)
        assert body.endswith(b"TENSORS") and size == len(body) - len(b"TENSORS")
        parameters = json.loads(body[:size])["parameters"]
        assert parameters | {"priority": 1} == {"priority": 1, "sequence_id": 9, "sequence_start": True, "sequence_end": True}
