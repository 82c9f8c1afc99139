"""TorchServe's own MNIST example, and a handler that answers a bare number from a KServe-style JSON
body, load-tested with ``locust --headless`` against one real TorchServe with token auth left on
(TorchServe 0.12's default; the targets send its key through ``token_file``).

- MNIST (tests/examples/torchserve/mnist, vendored from pytorch/serve; see its SOURCE.md): the upstream
  handler and model, weights regenerated with a fixed seed, fed the example's real PNG digits from
  their folder as raw bodies (``content_type: raw``, what ``curl -T digit.png`` sends). Each file's
  answer, a bare digit, is checked against the digit the same model gives here for that file; in the
  load run, any body the handler cannot open as an image would fail (HTTP 500).
- ``kserve_sum``: a module-level handler that answers the sum of ``{"instances": [row]}`` as one bare
  number, fed JSON lines through ``body_template: '{"instances": $data}'``. It refuses (HTTP 500) any
  body that is not exactly one line of the data set in that template and logs each row it took, so
  0 failures means every body was right, and its log shows that every line was sent.
- ``text_length``: a handler that takes ``content_type: text`` bodies (one line of a text file each,
  which TorchServe hands it as a str) and refuses anything that is not one of those lines as text.

The .mar files are built into tmp by torch-model-archiver; the server's key file feeds ``token_file``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import TorchServeModelConfig, start_torchserve, stop_torchserve
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario
from tests.support.torchserve_archive import archive_model
from tests.support.waiting import wait_until

MNIST_DIR = Path(__file__).resolve().parents[1] / "examples" / "torchserve" / "mnist"
DIGITS = sorted((MNIST_DIR / "test_data").glob("*.png"))
#: the weights' seed: any seed serves (no training); this one gives several different digits for the ten files
MNIST_SEED = 2
READY_TIMEOUT_S = 180

SUM_SAMPLES = [[1.0, 2.0, 3.0], [0.5, 0.25, 0.25], [10.0, 20.0, 30.0], [-1.0, -2.0, -3.5]]
#: a handler of the kind TorchServe runs as a module function: one bare number per request
KSERVE_SUM_HANDLER = f"""
import json
import logging

SAMPLES = {{json.dumps(row) for row in {SUM_SAMPLES!r}}}


def handle(data, context):
    if data is None:
        return None
    answers = []
    for row in data:
        body = row.get("body") or row.get("data")
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body)
        (instance,) = body["instances"]  # batch_size 1: exactly one row
        if set(body) != {{"instances"}} or json.dumps(instance) not in SAMPLES:
            raise ValueError("not a line of the data set in the template: " + json.dumps(body)[:80])
        logging.getLogger(__name__).info("kserve_sum took %s", json.dumps(instance))
        answers.append(float(sum(instance)))
    return answers
"""
TEXT_LINES = ["the first review", "héllo wörld, ünïcode", "short"]
#: a text handler: TorchServe hands it text/* bodies as a str; it answers the length in characters
TEXT_LENGTH_HANDLER = f"""
LINES = set({TEXT_LINES!r})


def handle(data, context):
    if data is None:
        return None
    answers = []
    for row in data:
        body = row.get("body") or row.get("data")
        if not isinstance(body, str) or body not in LINES:
            raise ValueError("not a line of the text file, as text: " + repr(body)[:80])
        answers.append(len(body))
    return answers
"""


@dataclass(frozen=True)
class ExamplesServer:
    address: str
    management: str
    key_file: Path
    mnist_digits: tuple[int, ...]  # what the model answers for each file of DIGITS, worked out here
    model_log: Path  # the handlers' own log lines

    @property
    def key(self) -> str:
        return str(json.loads(self.key_file.read_text())["inference"]["key"])


def load_module(name: str, path: Path) -> ModuleType:
    """A vendored file as a module of its own name (nothing named torchvision enters sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mnist_weights(path: Path) -> tuple[int, ...]:
    """Save the seeded weights to ``path``; the digit the model answers for each PNG, one at a time."""
    import torch
    from PIL import Image

    net_module = load_module("mnist_example_net", MNIST_DIR / "mnist.py")
    transforms = load_module("mnist_example_transforms", MNIST_DIR / "shims" / "torchvision" / "transforms.py")
    torch.manual_seed(MNIST_SEED)
    net = net_module.Net().eval()
    torch.save(net.state_dict(), path)
    # the handler's own preprocessing (mnist_handler.py: ToTensor, then Normalize((0.1307,), (0.3081,)))
    image_processing = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")  # upstream mnist.py, in eval mode a no-op
        return tuple(int(net(image_processing(Image.open(png)).unsqueeze(0)).argmax(1)) for png in DIGITS)


def kserve_body(row: list[float]) -> bytes:
    return json.dumps({"instances": [row]}).encode()


def predict(server_address: str, model: str, body: bytes, content_type: str, key: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": content_type} | ({"Authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(f"{server_address}/predictions/{model}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, bytes(error.read())


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExamplesServer]:
    work = tmp_path_factory.mktemp("ts-examples")
    store = work / "store"
    weights = work / "mnist_cnn.pt"
    digits = mnist_weights(weights)
    archive_model(
        store,
        "mnist",
        MNIST_DIR / "mnist_handler.py",
        model_file=MNIST_DIR / "mnist.py",
        serialized_file=weights,
        extra_files=[MNIST_DIR / "shims"],
    )
    (work / "kserve_sum_handler.py").write_text(KSERVE_SUM_HANDLER)
    archive_model(store, "kserve_sum", work / "kserve_sum_handler.py")
    (work / "text_length_handler.py").write_text(TEXT_LENGTH_HANDLER)
    archive_model(store, "text_length", work / "text_length_handler.py")
    ports = ServerPorts.free()
    config = TorchServeModelConfig(batch_size=1, workers=1)
    record = start_torchserve(work, ports, ("mnist", "kserve_sum", "text_length"), config, store=store, token_auth=True)
    server = ExamplesServer(
        f"http://127.0.0.1:{ports.ts_inference}",
        f"http://127.0.0.1:{ports.ts_management}",
        work / "torchserve" / "key_file.json",
        digits,
        work / "torchserve" / "logs" / "model_log.log",
    )

    def both_answer() -> bool:
        mnist = predict(server.address, "mnist", DIGITS[0].read_bytes(), "image/png", server.key)
        summed = predict(server.address, "kserve_sum", kserve_body(SUM_SAMPLES[0]), "application/json", server.key)
        text = predict(server.address, "text_length", TEXT_LINES[0].encode(), "text/plain; charset=utf-8", server.key)
        return mnist[0] == 200 and summed[0] == 200 and text[0] == 200

    try:
        wait_until(
            both_answer,
            timeout_s=READY_TIMEOUT_S,
            what="TorchServe to serve its three models",
            interval_s=0.5,
            ignore=(OSError, ValueError, KeyError),
        )
        yield server
    finally:
        stop_torchserve(record, work)
        assert processes_mentioning(str(work)) == []


def test_the_mnist_handler_answers_each_png_with_its_digit_and_token_auth_is_on(examples_server: ExamplesServer) -> None:
    answers = [predict(examples_server.address, "mnist", png.read_bytes(), "image/png", examples_server.key) for png in DIGITS]
    assert answers == [(200, str(digit).encode()) for digit in examples_server.mnist_digits]
    assert len(set(examples_server.mnist_digits)) > 1  # the seed gives different answers, so rotation shows
    refused, _ = predict(examples_server.address, "mnist", DIGITS[0].read_bytes(), "image/png", key=None)
    assert refused in (400, 401), refused  # TorchServe 0.12 answers a missing key with 400 (InvalidKeyException)


def test_the_kserve_handler_answers_a_bare_sum_and_refuses_other_bodies(examples_server: ExamplesServer) -> None:
    server = examples_server
    answers = [predict(server.address, "kserve_sum", kserve_body(row), "application/json", server.key) for row in SUM_SAMPLES]
    assert answers == [(200, str(sum(row)).encode()) for row in SUM_SAMPLES]
    refused, _ = predict(server.address, "kserve_sum", kserve_body([9.0, 9.0, 9.0]), "application/json", server.key)
    assert refused >= 500, refused  # its check of the body is live: a row not in the data set fails


def test_the_text_handler_takes_text_bodies_as_a_string(examples_server: ExamplesServer) -> None:
    server = examples_server
    answers = [
        predict(server.address, "text_length", line.encode(), "text/plain; charset=utf-8", server.key) for line in TEXT_LINES
    ]
    assert answers == [(200, str(len(line)).encode()) for line in TEXT_LINES]
    as_bytes, _ = predict(server.address, "text_length", TEXT_LINES[0].encode(), "application/octet-stream", server.key)
    assert as_bytes >= 500, as_bytes  # not text/*: the handler gets bytes and refuses them


def examples_scenario(folder: Path, server: ExamplesServer) -> Path:
    (folder / "reviews.txt").write_text("".join(line + "\n" for line in TEXT_LINES), encoding="utf-8")
    (folder / "sums.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in SUM_SAMPLES))
    # each PNG's answer (a bare digit), line i for the data set's sample i (its files in sorted order)
    (folder / "mnist_answers.jsonl").write_text("".join(f"{digit}\n" for digit in server.mnist_digits))
    common: dict[str, Any] = {
        "kind": "torchserve-rest",
        "address": server.address,
        "management_url": server.management,
        "token_file": str(server.key_file),
        "timeout": "10s",
    }
    mnist = {
        "name": "mnist",
        "model": "mnist",
        "inputs": [
            {
                "name": "image",
                "shape": [-1],
                "dtype": "UINT8",
                "data": {"dataset": str(MNIST_DIR / "test_data"), "pattern": "*.png"},
            }
        ],
        "content_type": "raw",  # the file as it is, Content-Type image/png from the suffix
        "expected": "mnist_answers.jsonl",  # every answer compared with its own file's digit
        **common,
    }
    kserve = {
        "name": "kserve-sum",
        "model": "kserve_sum",
        "inputs": [{"name": "instances", "shape": [3], "dtype": "FP32", "data": {"dataset": "sums.jsonl"}}],
        "content_type": "json",
        "body_template": '{"instances": $data}',
        **common,
    }
    text = {
        "name": "text-length",
        "model": "text_length",
        "inputs": [{"name": "review", "shape": [1], "dtype": "BYTES", "data": {"dataset": "reviews.txt"}}],
        "content_type": "text",  # one line per request, Content-Type text/plain; charset=utf-8
        **common,
    }
    data = {"name": "ts-examples", "duration": "4s", "targets": [mnist, kserve, text], "shape": {"kind": "steady", "users": 4}}
    return write_scenario(folder, data)


def test_both_examples_run_headless_with_0_failures(examples_server: ExamplesServer, tmp_path: Path) -> None:
    log_before = examples_server.model_log.stat().st_size  # the lines of this run only
    run = run_locust(examples_scenario(tmp_path, examples_server), tmp_path)

    assert run.returncode == 0, run.output
    assert run.failures_csv == [], run.failures_csv
    targets = run.summary["targets"]
    for name in ("mnist", "kserve-sum", "text-length"):
        assert targets[name]["requests"] > 2 * len(DIGITS) and targets[name]["failures"] == 0, targets[name]
    wanted = {json.dumps(row) for row in SUM_SAMPLES}

    def rows_taken() -> set[str]:  # the server's log is written in the background: poll it
        with examples_server.model_log.open("rb") as log:
            log.seek(log_before)
            return set(re.findall(r"kserve_sum took (\[[^\]]*\])", log.read().decode("utf-8", "replace")))

    # every line of the data set went out, each in the template (a timeout fails the test)
    wait_until(
        lambda: rows_taken() == wanted, timeout_s=10, what=f"every row of the data set in the handler's log: {sorted(wanted)}"
    )


def test_a_wrong_expected_answer_names_its_sample_and_file(examples_server: ExamplesServer, tmp_path: Path) -> None:
    """One digit of the expected answers is off: only the requests carrying that PNG fail, and their
    message says which sample it was, by index and file name."""
    scenario = examples_scenario(tmp_path, examples_server)
    wrong = 3  # the sample of 3.png (the folder's files sorted by name: 0.png ... 9.png)
    digits = list(examples_server.mnist_digits)
    digits[wrong] = (digits[wrong] + 1) % 10
    (tmp_path / "mnist_answers.jsonl").write_text("".join(f"{digit}\n" for digit in digits))

    run = run_locust(scenario, tmp_path)

    assert run.returncode == 1, run.output
    mnist = run.summary["targets"]["mnist"]
    assert 0 < mnist["failures"] < mnist["requests"], mnist  # one sample in ten
    (error,) = [row["Error"] for row in run.failures_csv if row["Name"] == "mnist"]
    assert f"unexpected answer for sample {wrong} ({DIGITS[wrong].name}): at $ got {examples_server.mnist_digits[wrong]}" in error
