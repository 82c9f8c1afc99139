"""The target's ``sequence`` key: valid forms, and ``file: key.path`` messages for bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.targets import DEFAULT_SEQUENCE_LENGTH, SequenceSpec, sequence_of
from tests.support.scenario_factory import bare_target, load_problems, steady_one_user


def scenario(grpc_sequence: Any = None, torchserve_sequence: Any = None) -> dict[str, Any]:
    targets = [
        bare_target("seq", "triton-grpc", "127.0.0.1:8001", model="sequence_py", input_name="INPUT0", shape=(1,), dtype="INT32"),
        bare_target("ts", "torchserve-rest", "http://127.0.0.1:8080"),
    ]
    if grpc_sequence is not None:
        targets[0]["sequence"] = grpc_sequence
    if torchserve_sequence is not None:
        targets[1]["sequence"] = torchserve_sequence
    return steady_one_user(*targets)


def problems(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    return [str(p) for p in load_problems(tmp_path, data)]


def test_a_sequence_key_loads_with_defaults_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario({"length": 8, "concurrent": 2})))
    loaded = load_scenario(path)
    assert sequence_of(loaded.targets[0]) == SequenceSpec(length=8, concurrent=2)
    assert sequence_of(loaded.targets[1]) is None
    assert scenario_from_dict(scenario_to_dict(loaded)).targets == loaded.targets
    defaults = scenario_from_dict(scenario({}))
    assert sequence_of(defaults.targets[0]) == SequenceSpec(length=DEFAULT_SEQUENCE_LENGTH, concurrent=1)
    triton_http = scenario({"length": 1})
    triton_http["targets"][0].update(kind="triton-http", address="127.0.0.1:8000")
    assert sequence_of(scenario_from_dict(triton_http).targets[0]) == SequenceSpec(length=1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"length": 0}, "targets[0].sequence.length: must be at least 1; got 0"),
        ({"length": "8"}, "targets[0].sequence.length: expected an integer; got '8'"),
        ({"length": 2.5}, "targets[0].sequence.length: expected an integer; got 2.5"),
        ({"length": 10_000_000}, "targets[0].sequence.length: must be at most 1000000; got 10000000"),
        ({"concurrent": 0}, "targets[0].sequence.concurrent: must be at least 1; got 0"),
        ({"concurrent": 1001}, "targets[0].sequence.concurrent: must be at most 1000; got 1001"),
        ({"lenght": 3}, "targets[0].sequence.lenght: unknown key 'lenght' (did you mean 'length'?)"),
        (True, "targets[0].sequence: expected a mapping; got true"),
        (8, "targets[0].sequence: expected a mapping; got 8"),
    ],
)
def test_bad_sequence_values_name_the_file_and_key(tmp_path: Path, value: Any, message: str) -> None:
    assert problems(tmp_path, scenario(value)) == [f"{tmp_path / 'scenario.yaml'}: {message}"]


def test_a_torchserve_target_takes_the_sequence_key(tmp_path: Path) -> None:
    loaded = scenario_from_dict(scenario(torchserve_sequence={"length": 2, "concurrent": 3}))
    assert sequence_of(loaded.targets[1]) == SequenceSpec(length=2, concurrent=3)


def test_a_sequence_id_header_next_to_the_sequence_key_is_refused(tmp_path: Path) -> None:
    for key, headers in (
        ("headers", {"ts_request_sequence_id": "seq_0"}),
        ("headers_from_env", {"TS_Request_Sequence_Id": "SEQ"}),
    ):
        data = scenario(torchserve_sequence={"length": 2})
        data["targets"][1][key] = headers
        (name,) = headers
        assert problems(tmp_path, data) == [
            f"{tmp_path / 'scenario.yaml'}: targets[1].{key}.{name}: is set per sequence by this target's sequence key"
            " (a new id every 2 requests); remove it"
        ]


def test_sequence_on_another_kind_is_refused(tmp_path: Path) -> None:
    data = steady_one_user(bare_target("b", "bentoml-http", "http://127.0.0.1:3000", sequence={"length": 2}))
    assert problems(tmp_path, data) == [
        f"{tmp_path / 'scenario.yaml'}: targets[0].sequence: only applies to triton-grpc, triton-http and torchserve-rest targets; this target is bentoml-http"
    ]


def test_torchserve_sequence_steps_carry_the_id_header_and_the_end_on_the_last() -> None:
    from inferload.scenario.targets import static_sequence_id_note
    from inferload.users.sequence import CorrelationIds, SequenceSettings, UserSequences, torchserve_sequence_headers

    sequences = UserSequences(SequenceSettings(length=3, concurrent=1, string_ids=True), CorrelationIds(41, string_ids=True))
    headers = [torchserve_sequence_headers(sequences.next_step()) for _ in range(4)]
    assert headers == [
        {"ts_request_sequence_id": "inferload-41"},
        {"ts_request_sequence_id": "inferload-41"},
        {"ts_request_sequence_id": "inferload-41", "ts_request_sequence_end": "true"},
        {"ts_request_sequence_id": "inferload-42"},
    ]
    note = static_sequence_id_note("ts", "torchserve-rest", {"TS_REQUEST_SEQUENCE_ID": "seq_0"}, None)
    assert note is not None and "carries the one ts_request_sequence_id 'seq_0'" in note
    assert static_sequence_id_note("ts", "torchserve-rest", {"x": "y"}, None) is None
    assert static_sequence_id_note("ts", "torchserve-rest", {"ts_request_sequence_id": "a"}, SequenceSpec()) is None


def test_a_torchserve_sequence_target_is_sent_by_the_engine_its_ids_in_torchserves_headers(tmp_path: Path) -> None:
    from locust.env import Environment

    from inferload.errors import SequenceRefused
    from inferload.users import user_class_for
    from inferload.users.engine import request_error

    data = scenario(torchserve_sequence={"length": 5, "concurrent": 2})
    target = scenario_from_dict(data).targets[1]
    cls = user_class_for(target, tmp_path)
    environment = Environment()
    wiring = cls.wiring_in(environment)
    assert cls.python_only_reason(wiring) is None  # no longer the Python transport's alone
    native = cls.native_target(cls.pool_for(environment), wiring.fit)
    assert native is not None and native.sequence == {"length": 5, "concurrent": 2, "string_ids": True, "headers": True}
    refused = request_error("SequenceRefused", "HTTP 503: no more sequences")
    assert isinstance(refused, SequenceRefused) and str(refused) == "HTTP 503: no more sequences"
