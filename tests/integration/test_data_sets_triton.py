"""Data sets and every KServe v2 datatype against a real Triton serving Python-backend models this
test writes:

- ``identity_all``: one input per datatype (BOOL ... BF16, BYTES), each answered as it came;
- ``distinct_text``: a BYTES identity model that also answers how many different texts it has seen;
- ``image_size``: JPEG bytes as a UINT8 ``[-1]`` tensor, decoded with Pillow, answered with the size;
- ``sum_xy``: FP32 ``X [4]`` and INT32 ``Y [1]`` → ``S = sum(X) + Y`` (fed from .npy, .npz, JSON lines).

One short headless run drives them over gRPC and HTTP with 0 failures, the answers' shapes checked,
and the counting models say every sample of every data set reached them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from PIL import Image

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import spawn
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, stop_triton, triton_command, triton_env
from inferload.scenario.fields import DTYPES
from tests.support.locust_runner import LocustRun, run_locust
from tests.support.scenario_factory import write_scenario

READY_DEADLINE_S = 180
#: the texts and JPEG sizes each protocol's run sends (different ones, so the server's counts tell the runs apart)
TEXTS = {"grpc": [f"text number {i}" for i in range(7)], "http": [f"another text {i}" for i in range(5)]}
IMAGE_SIZES = {"grpc": [(16, 16), (40, 24), (7, 33)], "http": [(64, 8), (9, 9)]}
MODELS = ("identity_all", "distinct_text", "image_size", "sum_xy")


def _config_type(dtype: str) -> str:
    return "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"


IDENTITY_ALL_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.dtypes = DTYPES

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for dtype in self.dtypes:
                tensor = pb_utils.get_input_tensor_by_name(request, "IN_" + dtype)
                name = "OUT_" + dtype
                if dtype == "BF16":  # numpy has no bfloat16: pass it through DLPack
                    outputs.append(pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack()))
                else:
                    outputs.append(pb_utils.Tensor(name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

DISTINCT_TEXT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.seen = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            self.seen.update(item for item in text.reshape(-1).tolist())
            distinct = np.full((text.shape[0], 1), len(self.seen), dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("ECHO", text), pb_utils.Tensor("DISTINCT", distinct)]))
        return responses
"""

IMAGE_SIZE_PY = """
import io
import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

class TritonPythonModel:
    def initialize(self, args):
        self.sizes = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            image = Image.open(io.BytesIO(data.tobytes()))
            image.load()  # a truncated or non-JPEG body fails here: the request fails
            self.sizes.add(image.size)
            size = np.array(image.size, dtype=np.int32)
            seen = np.array([len(self.sizes)], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("SIZE", size), pb_utils.Tensor("SIZES_SEEN", seen)]))
        return responses
"""

SUM_XY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = pb_utils.get_input_tensor_by_name(request, "Y").as_numpy()
            s = (x.sum(axis=1, keepdims=True) + y).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("S", s)]))
        return responses
"""


def _tensor(name: str, dtype: str, dims: list[int]) -> str:
    return f'  {{ name: "{name}" data_type: {_config_type(dtype)} dims: {dims} }}'


def _config(
    name: str, max_batch: int, inputs: list[tuple[str, str, list[int]]], outputs: list[tuple[str, str, list[int]]]
) -> str:
    body = ",\n".join(_tensor(*spec) for spec in inputs)
    out = ",\n".join(_tensor(*spec) for spec in outputs)
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch}\n'
        f"input [\n{body}\n]\noutput [\n{out}\n]\ninstance_group [{{ kind: KIND_CPU count: 1 }}]\n"
    )


def write_repository(repository: Path) -> None:
    models = {
        "identity_all": (
            _config("identity_all", 8, [(f"IN_{d}", d, [2]) for d in DTYPES], [(f"OUT_{d}", d, [2]) for d in DTYPES]),
            IDENTITY_ALL_PY.replace("DTYPES", repr(DTYPES)),
        ),
        "distinct_text": (
            _config("distinct_text", 8, [("TEXT", "BYTES", [1])], [("ECHO", "BYTES", [1]), ("DISTINCT", "INT64", [1])]),
            DISTINCT_TEXT_PY,
        ),
        "image_size": (
            _config("image_size", 0, [("IMAGE", "UINT8", [-1])], [("SIZE", "INT32", [2]), ("SIZES_SEEN", "INT32", [1])]),
            IMAGE_SIZE_PY,
        ),
        "sum_xy": (_config("sum_xy", 8, [("X", "FP32", [4]), ("Y", "INT32", [1])], [("S", "FP32", [1])]), SUM_XY_PY),
    }
    for name, (config, code) in models.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        (repository / name / "1" / "model.py").write_text(code)


@dataclass(frozen=True)
class ModelsTriton:
    http: str
    grpc: str


@pytest.fixture(scope="module")
def models_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelsTriton]:
    work = tmp_path_factory.mktemp("triton-data-sets")
    write_repository(work / "models")
    ports = ServerPorts.free()
    install = find_triton()
    command = triton_command(install, prepare_backend_dir(install, work / "backends"), work / "models", ports, MODELS)
    record = spawn(command, work / "triton.log", triton_env(install), cwd=work)
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not all(_ready(ports, model) for model in MODELS):
            assert time.monotonic() < deadline, (work / "triton.log").read_text()[-3000:]
            time.sleep(0.5)
        yield ModelsTriton(f"127.0.0.1:{ports.triton_http}", f"127.0.0.1:{ports.triton_grpc}")
    finally:
        stop_triton(record)


def _ready(ports: ServerPorts, model: str) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{ports.triton_http}/v2/models/{model}/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data sets: text lines, real JPEG files of several sizes, .npy, .npz and JSON lines."""
    folder = tmp_path_factory.mktemp("data-sets")
    for protocol in ("grpc", "http"):
        (folder / f"texts-{protocol}.txt").write_text("\n".join(TEXTS[protocol]) + "\n")
        (folder / f"images-{protocol}").mkdir()
        for index, size in enumerate(IMAGE_SIZES[protocol]):
            image = Image.new("RGB", size, color=(40 * index, 90, 200))
            image.save(folder / f"images-{protocol}" / f"photo{index}.jpg", format="JPEG")
        (folder / f"images-{protocol}" / "notes.md").write_text("not an image: left out by the pattern")
    rng = np.random.default_rng(0)
    np.save(folder / "x.npy", rng.random((6, 4), dtype=np.float32))
    np.savez(folder / "xy.npz", features=rng.random((5, 4), dtype=np.float32), Y=np.arange(5, dtype=np.int32).reshape(5, 1))
    lines = [json.dumps({"X": [i, i + 1, i + 2, i + 3], "Y": [i]}) for i in range(4)]
    (folder / "xy.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _targets(kind: str, address: str, suffix: str) -> list[dict[str, Any]]:
    identity_inputs = [{"name": f"IN_{d}", "shape": [2], "dtype": d, "data": {"generator": "random", "seed": 3}} for d in DTYPES]
    return [
        {
            "name": f"identity-{suffix}",
            "kind": kind,
            "address": address,
            "model": "identity_all",
            "batch_size": 2,
            "inputs": identity_inputs,
        },
        {
            "name": f"texts-{suffix}",
            "kind": kind,
            "address": address,
            "model": "distinct_text",
            "inputs": [{"name": "TEXT", "shape": [1], "dtype": "BYTES", "data": {"dataset": f"texts-{suffix}.txt"}}],
            **({"rotation": "random", "rotation_seed": 11} if suffix == "http" else {}),
        },
        {
            "name": f"images-{suffix}",
            "kind": kind,
            "address": address,
            "model": "image_size",
            "inputs": [
                {"name": "IMAGE", "shape": [-1], "dtype": "UINT8", "data": {"dataset": f"images-{suffix}", "pattern": "*.jpg"}}
            ],
        },
    ]


def _sum_targets(address: str) -> list[dict[str, Any]]:
    def target(name: str, inputs: list[dict[str, Any]], batch_size: int) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "triton-grpc",
            "address": address,
            "model": "sum_xy",
            "batch_size": batch_size,
            "inputs": inputs,
        }

    y_constant = {"name": "Y", "shape": [1], "dtype": "INT32", "data": {"generator": "constant", "value": 1}}
    return [
        target("npy", [{"name": "X", "shape": [4], "dtype": "FP32", "data": {"dataset": "x.npy"}}, y_constant], 4),
        target(
            "npz",
            [
                {"name": "X", "shape": [4], "dtype": "FP32", "data": {"dataset": "xy.npz", "key": "features"}},
                {"name": "Y", "shape": [1], "dtype": "INT32", "data": {"dataset": "xy.npz"}},
            ],
            2,
        ),
        target(
            "jsonl",
            [
                {"name": "X", "shape": [4], "dtype": "FP32", "data": {"dataset": "xy.jsonl"}},
                {"name": "Y", "shape": [1], "dtype": "INT32", "data": {"dataset": "xy.jsonl"}},
            ],
            1,
        ),
    ]


def _run(folder: Path, data_folder: Path, targets: list[dict[str, Any]]) -> LocustRun:
    data = {"name": "data-sets", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 2 * len(targets)}}
    run = run_locust(write_scenario(data_folder, data), folder)
    assert run.returncode == 0, run.output[-4000:]
    for name in (target["name"] for target in targets):
        summary = run.summary["targets"][name]
        assert summary["requests"] > 0 and summary["failures"] == 0, (name, summary, run.output[-3000:])
    return run


def _seen(http: str, model: str, name: str, dtype: str, value: np.ndarray, output: str) -> int:
    """Ask a counting model what it has seen so far (one more request, with a value already sent)."""
    client = httpclient.InferenceServerClient(http)
    tensor = httpclient.InferInput(name, list(value.shape), dtype)
    tensor.set_data_from_numpy(value)
    try:
        return int(client.infer(model, [tensor]).as_numpy(output).reshape(-1)[0])
    finally:
        client.close()


def _texts_seen(http: str) -> int:
    return _seen(http, "distinct_text", "TEXT", "BYTES", np.array([[TEXTS["grpc"][0].encode()]], dtype=object), "DISTINCT")


def _image_sizes_seen(http: str, data_folder: Path) -> int:
    jpeg = (data_folder / "images-grpc" / "photo0.jpg").read_bytes()
    return _seen(http, "image_size", "IMAGE", "UINT8", np.frombuffer(jpeg, dtype=np.uint8), "SIZES_SEEN")


def test_data_sets_and_every_datatype_over_grpc_and_http(models_triton: ModelsTriton, data_folder: Path, tmp_path: Path) -> None:
    texts, sizes = _texts_seen(models_triton.http), _image_sizes_seen(models_triton.http, data_folder)
    targets = _targets("triton-grpc", models_triton.grpc, "grpc") + _targets("triton-http", models_triton.http, "http")
    _run(tmp_path, data_folder, targets + _sum_targets(models_triton.grpc))
    # every sample of each data set reached the server, in rotation (round-robin over gRPC, random over
    # HTTP), not one payload sent over and over; the probes themselves send a text and an image of the
    # gRPC data sets (already counted before the run)
    assert _texts_seen(models_triton.http) - texts == len(TEXTS["grpc"]) + len(TEXTS["http"]) - 1
    assert _image_sizes_seen(models_triton.http, data_folder) - sizes == len(IMAGE_SIZES["grpc"]) + len(IMAGE_SIZES["http"]) - 1
