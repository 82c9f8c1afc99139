"""The self-contained locustfile a distributed run gives its workers: scenario, payload files
and model metadata travel inside it, so no file is copied by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from inferload.launch.embedded_locustfile import embedded_locustfile, load_embedded
from inferload.scenario.loader import load_scenario
from tests.support.scenario_factory import tiny_target, write_scenario


def embedded_constants(source: str) -> str:
    """The generated locustfile up to its constants (SCENARIO, FILES, MODELS), without the line that
    wires the run into Locust."""
    head, wiring, _ = source.partition("\nusers, ScenarioShape = scenario_classes(")
    assert wiring, source[-400:]
    return head


def test_the_scenario_and_its_npy_payload_travel_inside_the_locustfile(tmp_path):
    payload = np.arange(16, dtype=np.float32).reshape(1, 16)
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", payload)
    target = tiny_target("t", "triton-grpc", "127.0.0.1:1")
    target["inputs"][0]["data"] = {"generator": "npy", "path": "data/x.npy"}
    scenario = load_scenario(
        write_scenario(tmp_path, {"name": "npy", "duration": "5s", "targets": [target], "shape": {"kind": "steady", "users": 1}})
    )
    models = {"t": [{"name": "tiny", "inputs": []}, {"max_batch_size": 32}]}
    source = embedded_locustfile(scenario, models)

    namespace: dict = {}
    exec(compile(embedded_constants(source), "locustfile", "exec"), namespace)
    copy = load_embedded(namespace["SCENARIO"], namespace["FILES"])
    assert copy.base_dir != tmp_path  # unpacked into a folder of its own, on whichever machine
    assert np.array_equal(np.load(copy.base_dir / copy.targets[0].inputs[0].data.path), payload)
    assert json.loads(namespace["MODELS"]) == models


def test_the_unpacked_payloads_go_when_the_worker_process_ends(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 16), dtype=np.float32))
    target = tiny_target("t", "triton-grpc", "127.0.0.1:1")
    target["inputs"][0]["data"] = {"generator": "npy", "path": "x.npy"}
    scenario = load_scenario(
        write_scenario(tmp_path, {"name": "npy", "duration": "5s", "targets": [target], "shape": {"kind": "steady", "users": 1}})
    )
    namespace: dict = {}
    exec(compile(embedded_constants(embedded_locustfile(scenario, {})), "locustfile", "exec"), namespace)
    program = (
        "import sys; from inferload.launch.embedded_locustfile import load_embedded; "
        "scenario = load_embedded(sys.argv[1], sys.argv[2]); print(scenario.base_dir); "
        "assert (scenario.base_dir / scenario.targets[0].inputs[0].data.path).is_file()"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, namespace["SCENARIO"], namespace["FILES"]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("inferload-scenario-") and not folder.exists()
