"""TorchServe with token authorization left on (TorchServe 0.12's default): ``token_file`` sends its
inference key; without it the start check stops the run, and every request is refused; a
``headers_from_env`` secret is sent but never written anywhere."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.torchserve_local import TorchServeModelConfig, start_torchserve, stop_torchserve
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

SECRET = "never-written-3f9a1c"
READY_DEADLINE_S = 180


@dataclass(frozen=True)
class AuthTorchServe:
    address: str
    management: str
    key_file: Path


def _ready(ports: ServerPorts, key_file: Path) -> bool:
    """The key file is written and the inference API answers a ping that carries its key."""
    try:
        key = json.loads(key_file.read_text())["inference"]["key"]
        answer = requests.get(
            f"http://127.0.0.1:{ports.ts_inference}/ping", headers={"Authorization": f"Bearer {key}"}, timeout=2
        )
    except (OSError, ValueError, KeyError, requests.RequestException):
        return False
    return answer.status_code == 200


@pytest.fixture(scope="module")
def auth_torchserve(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthTorchServe]:
    state_dir = tmp_path_factory.mktemp("ts-token-auth")
    ports = ServerPorts.free()
    record = start_torchserve(state_dir, ports, ("tiny",), TorchServeModelConfig(batch_size=1, workers=1), token_auth=True)
    key_file = state_dir / "torchserve" / "key_file.json"
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not _ready(ports, key_file):
            assert time.monotonic() < deadline, (state_dir / "torchserve" / "torchserve.log").read_text()[-3000:]
            time.sleep(0.5)
        yield AuthTorchServe(f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_management}", key_file)
    finally:
        stop_torchserve(record, state_dir)


def _scenario(folder: Path, server: AuthTorchServe, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = tiny_target(
        "ts-auth", "torchserve-rest", server.address, headers_from_env={"X-Secret": "INFERLOAD_TEST_SECRET"}, **extra
    )
    data = {"name": "token-auth", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    return write_scenario(folder, data)


def test_without_token_file_the_start_check_stops_and_every_request_is_refused(
    auth_torchserve: AuthTorchServe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERLOAD_TEST_SECRET", SECRET)
    scenario = _scenario(tmp_path, auth_torchserve)
    checked = run_locust(scenario, tmp_path / "checked")
    assert checked.returncode == 2, checked.output
    assert "refused the request's authorization" in checked.output and "give the target a token_file" in checked.output
    skipped = run_locust(scenario, tmp_path / "skipped", "--skip-start-checks")
    (row,) = [s for s in skipped.stats_json if s["name"] == "ts-auth"]
    assert row["num_requests"] > 0 and row["num_failures"] == row["num_requests"], skipped.output
    # TorchServe 0.12 answers a missing or wrong token with HTTP 400 InvalidKeyException
    assert any("HTTP 400" in f["Error"] or "InvalidKey" in f["Error"] for f in skipped.failures_csv), skipped.failures_csv


def test_with_token_file_every_request_succeeds_and_the_env_secret_is_never_written(
    auth_torchserve: AuthTorchServe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERLOAD_TEST_SECRET", SECRET)
    scenario = _scenario(tmp_path, auth_torchserve, token_file=str(auth_torchserve.key_file))
    run = run_locust(scenario, tmp_path)
    assert run.returncode == 0, run.output
    (row,) = [s for s in run.stats_json if s["name"] == "ts-auth"]
    assert row["num_requests"] > 0 and row["num_failures"] == 0, run.output
    key = json.loads(auth_torchserve.key_file.read_text())["inference"]["key"]
    written = [run.output, *(p.read_text(errors="replace") for p in run.results_dir.rglob("*") if p.is_file())]
    assert {"summary.json", "windows.csv", "report.html"} <= {p.name for p in run.results_dir.rglob("*")}
    assert not [text for text in written if SECRET in text or key in text]


def test_a_model_not_served_lists_the_served_ones_through_the_management_key(
    auth_torchserve: AuthTorchServe, tmp_path: Path
) -> None:
    target = tiny_target(
        "ts-auth",
        "torchserve-rest",
        auth_torchserve.address,
        token_file=str(auth_torchserve.key_file),
        management_url=auth_torchserve.management,
    )
    target["model"] = "no-such-model"
    data = {"name": "token-auth", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    run = run_locust(write_scenario(tmp_path, data), tmp_path)
    assert run.returncode == 2, run.output
    assert "does not serve model 'no-such-model'" in run.output and "it serves: tiny (GET" in run.output, run.output
