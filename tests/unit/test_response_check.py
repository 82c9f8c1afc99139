"""``response_check`` per target: its defaults, its validation, and what each value accepts.

TorchServe answers are judged by ``TorchServeRestUser.send`` against a stub HTTP client (the real
server runs in tests/integration/test_torchserve_response_check.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferload.errors import BadOutputShape, HttpStatusError, ScenarioError
from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.targets import Target
from inferload.users import user_class_for
from inferload.users.base import Wiring
from inferload.users.failures import check_json_list, describe_answer
from inferload.users.request_pool import RequestPool, RequestSource
from inferload.users.torchserve import TorchServeRestUser
from tests.support.http_stub import StubClient, StubResponse

TRITON = {
    "name": "triton",
    "kind": "triton-grpc",
    "address": "127.0.0.1:8001",
    "model": "tiny",
    "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}],
}
TORCHSERVE = {
    "name": "torchserve",
    "kind": "torchserve-rest",
    "address": "http://127.0.0.1:8080",
    "model": "tiny",
    "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}],
}


def scenario_file(tmp_path: Path, *targets: dict[str, Any]) -> Path:
    data = {"name": "checks", "duration": "10s", "targets": list(targets), "shape": {"kind": "steady", "users": 1}}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def with_keys(target: dict[str, Any], **keys: Any) -> dict[str, Any]:
    return {**copy.deepcopy(target), **keys}


# --- validation -----------------------------------------------------------------------------------


def test_torchserve_defaults_to_status_and_triton_to_shape(tmp_path: Path) -> None:
    http = with_keys(TRITON, name="http", kind="triton-http", address="127.0.0.1:8000")
    scenario = load_scenario(scenario_file(tmp_path, TRITON, http, TORCHSERVE))
    assert [t.response_check for t in scenario.targets] == ["shape", "shape", "status"]


@pytest.mark.parametrize("value", ["none", "status", "shape"])
def test_every_value_is_accepted_and_survives_the_round_trip_to_workers(tmp_path: Path, value: str) -> None:
    scenario = load_scenario(
        scenario_file(tmp_path, with_keys(TRITON, response_check=value), with_keys(TORCHSERVE, response_check=value))
    )
    assert [t.response_check for t in scenario.targets] == [value, value]
    assert [t.response_check for t in scenario_from_dict(scenario_to_dict(scenario)).targets] == [value, value]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Status", "expected one of none, status, shape, expected; got 'Status'"),
        (True, "expected one of none, status, shape, expected; got true"),
        (3, "expected one of none, status, shape, expected; got 3"),
    ],
)
def test_a_bad_value_is_reported_at_its_key(tmp_path: Path, value: object, message: str) -> None:
    path = scenario_file(tmp_path, TRITON, with_keys(TORCHSERVE, response_check=value))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert [str(p) for p in caught.value.problems] == [f"{path}: targets[1].response_check: {message}"]


# --- what a TorchServe answer is judged by --------------------------------------------------------


def torchserve_user(response_check: str | None, batch_size: int, status: int, body: bytes) -> TorchServeRestUser:
    keys: dict[str, Any] = {"batch_size": batch_size}
    if response_check is not None:
        keys["response_check"] = response_check
    target = Target.model_validate(with_keys(TORCHSERVE, **keys))
    cls = user_class_for(target, Path("."))
    user = object.__new__(cls)  # no Locust environment: send() only needs its client and request
    assert isinstance(user, TorchServeRestUser)
    user._client = StubClient(StubResponse(status, body))  # type: ignore[assignment]  # duck-typed stand-in
    user._path, user._headers, user._expected = "/predictions/tiny", {}, None
    user.wiring = Wiring(request_pool=RequestPool(RequestSource(target, Path(".")), cls.encode_request))  # what connect() makes
    return user


@pytest.mark.parametrize("body", [b"7", b'{"label": 3}', b"not json at all", b"\x89PNG\r\n", b"[1, 2, 3]"])
def test_status_takes_any_http_200_whatever_its_body(body: bytes) -> None:
    assert torchserve_user(None, 2, 200, body).send() == len(body)


@pytest.mark.parametrize("status", [201, 204])
def test_status_refuses_other_2xx_and_none_takes_them(status: int) -> None:
    with pytest.raises(HttpStatusError, match=f"HTTP {status}"):
        torchserve_user("status", 1, status, b"").send()
    assert torchserve_user("none", 1, status, b"").send() == 0


@pytest.mark.parametrize("check", ["none", "status", "shape"])
def test_an_error_status_fails_under_every_check(check: str) -> None:
    with pytest.raises(HttpStatusError, match="HTTP 503"):
        torchserve_user(check, 1, 503, b'{"code": 503, "message": "busy"}').send()


def test_shape_takes_a_json_list_of_batch_size_items() -> None:
    assert torchserve_user("shape", 3, 200, b"[0, 1, 2]").send() == 9


@pytest.mark.parametrize(
    ("batch_size", "body", "message"),
    [
        (4, b"7", "bad output: expected a JSON list of 4 items; got a number"),
        (1, b"0.25", "bad output: expected a JSON list of 1 item; got a number"),
        (2, b'"cat"', "bad output: expected a JSON list of 2 items; got a string"),
        (2, b"false", "bad output: expected a JSON list of 2 items; got a boolean"),
        (2, b"[NaN, 1]", "bad output: expected a JSON list of 2 items; got a body that is not JSON"),
        (2, b"null", "bad output: expected a JSON list of 2 items; got null"),
        (2, b"[1, 2, 3]", "bad output: expected a JSON list of 2 items; got a list of 3 items"),
        (2, b"[1]", "bad output: expected a JSON list of 2 items; got a list of 1 item"),
        (
            1,
            b'{"score": 0.9, "label": "cat"}',
            "bad output: expected a JSON list of 1 item; got an object with keys [label, score]",
        ),
        (1, b"{}", "bad output: expected a JSON list of 1 item; got an empty object"),
        (1, b"\x89PNG\r\n", "bad output: expected a JSON list of 1 item; got a body that is not JSON"),
    ],
)
def test_shape_says_what_came_instead(batch_size: int, body: bytes, message: str) -> None:
    with pytest.raises(BadOutputShape) as caught:
        torchserve_user("shape", batch_size, 200, body).send()
    assert str(caught.value) == message


def test_failure_messages_name_types_not_values_so_locust_groups_them() -> None:
    messages = set()
    for digit in range(10):
        with pytest.raises(BadOutputShape) as caught:
            check_json_list(str(digit).encode(), 1)
        messages.add(str(caught.value))
    assert messages == {"bad output: expected a JSON list of 1 item; got a number"}
    many_keys = {f"k{i}": i for i in range(8)}
    assert describe_answer(many_keys) == "an object with keys [k0, k1, k2, k3, k4, ...]"
