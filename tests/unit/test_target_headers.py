"""Per-target request headers: ``headers``, ``headers_from_env`` and TorchServe's ``token_file``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferload.launch.embedded_locustfile import embedded_locustfile
from inferload.scenario.headers import HeadersError, read_inference_key, request_headers
from inferload.scenario.loader import load_scenario, scenario_to_dict
from inferload.scenario.targets import TorchServeTarget
from tests.support.scenario_factory import bare_target, load_problems, steady_one_user

KEY_FILE = {
    "management": {"key": "mgmt-key", "expiration time": "2026-11-30T16:02:06.113841471Z"},
    "inference": {"key": "infer-key", "expiration time": "2026-11-30T16:02:06.113832111Z"},
    "API": {"key": "api-key"},
}


def scenario(**extra: Any) -> dict[str, Any]:
    """A grpc and a TorchServe target; ``extra`` adds keys to the target of that kind."""
    targets = [
        bare_target("grpc", "triton-grpc", "127.0.0.1:8001"),
        bare_target("ts", "torchserve-rest", "http://127.0.0.1:8080"),
    ]
    for target in targets:
        target.update(extra.get(str(target["kind"]), {}))
    return steady_one_user(*targets)


def problems(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    return [str(p) for p in load_problems(tmp_path, data)]


def test_valid_headers_load_and_token_file_is_made_absolute(tmp_path: Path) -> None:
    data = scenario(
        **{
            "torchserve-rest": {
                "headers": {"X-Team": "ml", "Accept": "application/json"},
                "headers_from_env": {"X-Api-Key": "MY_KEY"},
                "token_file": "keys/key_file.json",
            },
            "triton-grpc": {"headers": {"X-Team": "ml"}, "headers_from_env": {"x-secret": "SECRET_1"}},
        }
    )
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    loaded = load_scenario(path)
    ts = loaded.targets[1]
    assert isinstance(ts, TorchServeTarget)
    assert ts.headers == {"X-Team": "ml", "Accept": "application/json"}
    assert ts.headers_from_env == {"X-Api-Key": "MY_KEY"}
    assert ts.token_file == str(tmp_path / "keys" / "key_file.json")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"torchserve-rest": {"headers": {"Bad Name": "x"}}}, "targets[1].headers"),
        ({"torchserve-rest": {"headers": {"X-N": 5}}}, "targets[1].headers.X-N: expected a string (quote numbers); got 5"),
        ({"torchserve-rest": {"headers": {"X-N": "a\nb"}}}, "targets[1].headers.X-N: expected a header value without control"),
        ({"torchserve-rest": {"headers": {"Content-Length": "3"}}}, "is set by the client itself"),
        (
            {"torchserve-rest": {"headers_from_env": {"X-K": "1BAD"}}},
            "targets[1].headers_from_env.X-K: expected an environment variable name",
        ),
        (
            {"torchserve-rest": {"headers": {"X-K": "a"}, "headers_from_env": {"x-k": "K"}}},
            "targets[1].headers_from_env.x-k: header 'x-k' is also in headers ('X-K')",
        ),
        ({"triton-grpc": {"token_file": "k.json"}}, "targets[0].token_file: only applies to torchserve-rest targets"),
        (
            {"torchserve-rest": {"token_file": "k.json", "headers": {"Authorization": "Basic x"}}},
            "targets[1].headers.Authorization: token_file already sends Authorization",
        ),
        (
            {"triton-grpc": {"headers": {"X~Odd": "a"}}},
            "targets[0].headers.X~Odd: a triton-grpc target sends headers as gRPC metadata",
        ),
        (
            {"triton-grpc": {"headers": {"grpc-timeout": "1"}}},
            "targets[0].headers.grpc-timeout: 'grpc-timeout' is reserved by gRPC",
        ),
        (
            {"triton-grpc": {"headers": {"x-data-bin": "1"}}},
            "targets[0].headers.x-data-bin: '-bin' metadata carries binary values",
        ),
        ({"triton-grpc": {"headers": {"x-name": "é"}}}, "targets[0].headers.x-name: gRPC metadata values are printable ASCII"),
        ({"torchserve-rest": {"token_file": ""}}, "targets[1].token_file: expected the path of TorchServe's key_file.json"),
    ],
)
def test_bad_header_keys_are_reported_at_their_key(tmp_path: Path, extra: dict[str, Any], expected: str) -> None:
    found = problems(tmp_path, scenario(**extra))
    assert any(expected in line for line in found), found
    assert all(line.startswith(str(tmp_path / "scenario.yaml")) for line in found), found


def test_request_headers_reads_env_and_the_inference_key(tmp_path: Path) -> None:
    key_file = tmp_path / "key_file.json"
    key_file.write_text(json.dumps(KEY_FILE))
    headers = request_headers("ts", {"X-Team": "ml"}, {"X-Api-Key": "MY_KEY"}, "key_file.json", tmp_path, {"MY_KEY": "s3cret"})
    assert headers == {"X-Team": "ml", "X-Api-Key": "s3cret", "Authorization": "Bearer infer-key"}


def test_a_missing_env_var_names_target_and_variable(tmp_path: Path) -> None:
    with pytest.raises(HeadersError, match=r"target 'ts': environment variable MY_KEY \(for header X-Api-Key\) is not set"):
        request_headers("ts", None, {"X-Api-Key": "MY_KEY"}, None, tmp_path, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read token_file"),
        ("not json", "is not JSON"),
        (json.dumps({"management": {"key": "m"}}), "has no inference key"),
        (json.dumps({"inference": "x"}), "has no inference key"),
    ],
)
def test_bad_key_files_are_clear_errors(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "key_file.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(HeadersError, match=message):
        read_inference_key(path)


def test_env_values_never_reach_the_scenario_dict_or_the_embedded_locustfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "value-that-must-not-leak")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(**{"torchserve-rest": {"headers_from_env": {"X-Api-Key": "MY_KEY"}}})))
    loaded = load_scenario(path)
    dumped = json.dumps(scenario_to_dict(loaded))
    assert "MY_KEY" in dumped and "value-that-must-not-leak" not in dumped
    text = embedded_locustfile(loaded)
    assert "MY_KEY" in text and "value-that-must-not-leak" not in text
