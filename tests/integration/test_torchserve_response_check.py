"""``response_check`` against a real TorchServe whose handler answers a bare number (as TorchServe's
MNIST example does): the default ``status`` check counts every answer a success; ``shape`` fails
every request with one message that says what came instead.

The handler is written here, archived with torch-model-archiver around the sample ``tiny``
TorchScript model, and served by a TorchServe of this module's own.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferload.local.models.paths import torchscript_path
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import start_torchserve, stop_torchserve
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.waiting import wait_until

MODEL = "bare_number"

#: a handler like TorchServe's MNIST example: one bare int (the arg-max class) per request
HANDLER = """
import os

import torch


class BareNumberHandler:
    def initialize(self, context):
        properties = context.system_properties
        serialized = context.manifest["model"]["serializedFile"]
        self.model = torch.jit.load(os.path.join(properties["model_dir"], serialized), map_location="cpu")
        self.initialized = True

    def handle(self, data, context):
        answers = []
        for row in data or []:
            body = row.get("body") or row.get("data")
            items = torch.frombuffer(bytearray(body), dtype=torch.float32).reshape(-1, 16)
            with torch.no_grad():
                answers.append(int(self.model(items)[0].argmax()))
        return answers
"""


def archive(store: Path, work: Path) -> Path:
    handler = work / "bare_number_handler.py"
    handler.write_text(HANDLER)
    command = [
        sys.executable,
        "-m",
        "model_archiver.model_packaging",
        "--model-name",
        MODEL,
        "--version",
        "1.0",
        "--serialized-file",
        str(torchscript_path("tiny")),
        "--handler",
        str(handler),
        "--export-path",
        str(store),
        "--force",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr or done.stdout
    return store / f"{MODEL}.mar"


def answer_of(url: str) -> bytes:
    request = urllib.request.Request(url, data=bytes(64), headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read()


@pytest.fixture(scope="module")
def bare_number_server(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPorts]:
    work = tmp_path_factory.mktemp("bare-number")
    store = work / "store"
    store.mkdir()
    assert archive(store, work).is_file()
    ports = ServerPorts.free()
    record = start_torchserve(work, ports, (MODEL,), store=store)
    try:
        answer = wait_until(
            lambda: answer_of(f"http://127.0.0.1:{ports.ts_inference}/predictions/{MODEL}"),
            timeout_s=120,
            what=f"TorchServe to serve {MODEL}",
            interval_s=0.5,
        )
        assert answer.strip().isdigit(), answer  # a bare number, not a JSON list
        yield ports
    finally:
        stop_torchserve(record, work)
        assert processes_mentioning(str(work)) == []


def bare_number_scenario(folder: Path, ports: ServerPorts, **keys: object) -> Path:
    target = tiny_target(
        "bare",
        "torchserve-rest",
        f"http://127.0.0.1:{ports.ts_inference}",
        batch_size=4,
        management_url=f"http://127.0.0.1:{ports.ts_management}",
        metrics_url=f"http://127.0.0.1:{ports.ts_metrics}/metrics",
        **keys,
    )
    target["model"] = MODEL  # tiny_target names the sample model; the archive here wraps the same model.pt
    return write_scenario(
        folder, {"name": "bare-number", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    )


def test_the_default_status_check_takes_a_bare_number_answer(bare_number_server: ServerPorts, tmp_path: Path) -> None:
    run = run_locust(bare_number_scenario(tmp_path, bare_number_server), tmp_path)

    assert run.returncode == 0, run.output
    target = run.summary["targets"]["bare"]
    assert target["requests"] > 5 and target["failures"] == 0, target
    assert run.failures_csv == []


def test_the_shape_check_fails_every_request_saying_what_came(bare_number_server: ServerPorts, tmp_path: Path) -> None:
    run = run_locust(bare_number_scenario(tmp_path, bare_number_server, response_check="shape"), tmp_path)

    assert run.returncode == 1, run.output
    target = run.summary["targets"]["bare"]
    assert target["requests"] > 5 and target["failures"] == target["requests"], target
    errors = {row["Error"] for row in run.failures_csv}
    assert len(errors) == 1 and "bad output: expected a JSON list of 4 items; got int" in errors.pop(), run.failures_csv
