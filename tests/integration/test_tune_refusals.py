"""`inferload tune` on servers that refuse every candidate, each said once with what to do, nothing
changed, exit 2 (before: every candidate printed the server's raw refusal, and the tune went on):

- a TorchServe started as TorchServe 0.12 starts by default, its management API with model control
  off (``enable_model_api=false``: HTTP 405 on unregister) and token authorization on (HTTP 400
  InvalidKeyException without the management key), serving a third-party handler;
- a Triton ensemble (tests/examples/triton/add_sub_ensemble around Triton's add_sub example): Triton
  refuses an instance_group on an ensemble, and answered every candidate's load with only "failed to
  poll from model repository" (the cause was in its log).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import TorchServeModelConfig, start_torchserve, stop_torchserve
from tests.support.cli import inferload
from tests.support.example_triton import ExampleTriton
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.torchserve_handler import BARE_NUMBER_HANDLER, archive
from tests.support.waiting import wait_until

MODEL = "bare_number"
READY_TIMEOUT_S = 180
SEARCH = ["--slo", "p99_ms=50", "--start-rate", "50", "--torchserve-workers", ""]


@dataclass(frozen=True)
class DefaultTorchServe:
    inference: str
    management: str
    key_file: Path

    def describe(self) -> dict[str, Any]:
        key = json.loads(self.key_file.read_text())["management"]["key"]
        request = urllib.request.Request(f"{self.management}/models/{MODEL}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return dict(json.loads(response.read())[0])


@pytest.fixture(scope="module")
def default_torchserve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultTorchServe]:
    work = tmp_path_factory.mktemp("ts-defaults")
    store = work / "store"
    store.mkdir()
    archive(store, work, MODEL, BARE_NUMBER_HANDLER)
    ports = ServerPorts.free()
    config = TorchServeModelConfig(batch_size=1, workers=1, response_timeout_s=90)
    record = start_torchserve(work, ports, (MODEL,), config, store=store, token_auth=True, model_api=False)
    server = DefaultTorchServe(
        f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_management}", work / "torchserve" / "key_file.json"
    )
    try:
        wait_until(
            server.describe,
            READY_TIMEOUT_S,
            "TorchServe to serve bare_number",
            interval_s=0.5,
            ignore=(OSError, ValueError, KeyError),
        )
        yield server
    finally:
        stop_torchserve(record, work)
        assert processes_mentioning(str(work)) == []


def tune(tmp_path: Path, target: dict[str, Any], *options: str) -> Any:
    data = {"name": "tune", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    scenario = write_scenario(tmp_path, data)
    return inferload("tune", str(scenario), "--out", str(tmp_path / "out"), *SEARCH, *options, timeout_s=300)


def torchserve_target(server: DefaultTorchServe, **extra: Any) -> dict[str, Any]:
    target = tiny_target("ts", "torchserve-rest", server.inference, management_url=server.management, **extra)
    target["model"] = MODEL
    return target


def test_tune_on_a_torchserve_with_model_control_off_says_how_to_turn_it_on(
    default_torchserve: DefaultTorchServe, tmp_path: Path
) -> None:
    before = default_torchserve.describe()
    done = tune(
        tmp_path, torchserve_target(default_torchserve, token_file=str(default_torchserve.key_file)), "--servers", "torchserve"
    )

    assert done.returncode == 2, done.stdout + done.stderr
    line = f"TorchServe at {default_torchserve.management} refuses to change model '{MODEL}' (DELETE /models/{MODEL}/1.0 answered HTTP 405"
    assert done.stdout.count(line) == 1, done.stdout  # once, not per candidate
    assert "enable_model_api=true in config.properties" in done.stdout
    assert '"code": 405' not in done.stdout and "did not beat" not in done.stdout
    assert "putting the original settings back" not in done.stdout  # nothing was changed: nothing to put back
    document = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert "enable_model_api=true" in document["server_stops"]["torchserve"] and document["candidates"] == []
    after = default_torchserve.describe()
    assert (after["batchSize"], after["maxBatchDelay"], after["responseTimeout"]) == (
        before["batchSize"],
        before["maxBatchDelay"],
        before["responseTimeout"],
    )


def test_tune_on_a_torchserve_with_token_auth_and_no_key_says_where_the_key_is(
    default_torchserve: DefaultTorchServe, tmp_path: Path
) -> None:
    done = tune(tmp_path, torchserve_target(default_torchserve), "--servers", "torchserve")

    assert done.returncode == 2, done.stdout + done.stderr
    # found when tune reads the model's registration, before anything starts: the one error line
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("inferload tune: ") and "cannot read the settings of model" in line, line
    assert f"TorchServe at {default_torchserve.management} wants its management key" in line
    assert "answered HTTP 400 InvalidKeyException" in line and "set the target's token_file" in line
    assert not (tmp_path / "out").exists()  # nothing measured, nothing written


def test_tune_on_an_ensemble_says_to_tune_its_steps(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    config_url = f"http://{example_models_triton.http}/v2/models/add_sub_ensemble/config"
    with urllib.request.urlopen(config_url, timeout=5) as response:
        before = json.loads(response.read())
    target = {
        "name": "ensemble",
        "kind": "triton-http",
        "address": example_models_triton.http,
        "model": "add_sub_ensemble",
        "inputs": [{"name": name, "shape": [4], "dtype": "FP32"} for name in ("A", "B")],
    }
    done = tune(tmp_path, target, "--servers", "triton")

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.count("model 'add_sub_ensemble' is an ensemble (platform: ensemble)") == 1, done.stdout
    assert "putting the original settings back" not in done.stdout  # nothing was changed: nothing to put back
    assert "Tune its steps instead: add_sub" in done.stdout
    assert "failed to poll from model repository" not in done.stdout
    assert example_models_triton.ready("add_sub_ensemble")
    with urllib.request.urlopen(config_url, timeout=5) as response:
        assert json.loads(response.read()) == before  # nothing was loaded
