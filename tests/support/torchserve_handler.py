"""A TorchServe of a test's own, serving a handler written in the test (a third-party handler, not
inferload's ``model_store/handler.py``): the handler is archived with torch-model-archiver around
the sample ``tiny`` TorchScript model and served on free loopback ports.

    with serving_handler(work, "bare_number", BARE_NUMBER_HANDLER) as ports: ...

``BARE_NUMBER_HANDLER`` answers one bare int per request, as TorchServe's MNIST example does, and
adds no metrics of its own.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferload.local.models.specs import torchscript_path
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import start_torchserve, stop_torchserve
from tests.support.waiting import wait_until

#: a handler like TorchServe's MNIST example: one bare int (the arg-max class) per request
BARE_NUMBER_HANDLER = """
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

READY_TIMEOUT_S = 120


def archive(store: Path, work: Path, model: str, handler_source: str) -> Path:
    """``store/<model>.mar``: ``handler_source`` as the handler around the sample ``tiny`` model."""
    handler = work / f"{model}_handler.py"
    handler.write_text(handler_source)
    command = [
        sys.executable,
        "-m",
        "model_archiver.model_packaging",
        "--model-name",
        model,
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
    return store / f"{model}.mar"


def answer_of(url: str) -> bytes:
    """One prediction of a 16-float item (64 zero bytes, as octet-stream)."""
    request = urllib.request.Request(url, data=bytes(64), headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return bytes(response.read())


@contextmanager
def serving_handler(work: Path, model: str, handler_source: str) -> Iterator[tuple[ServerPorts, bytes]]:
    """A TorchServe serving ``model`` with that handler: its ports and its first answer. Stopped on
    exit, and nothing of it may be left running."""
    store = work / "store"
    store.mkdir(parents=True, exist_ok=True)
    assert archive(store, work, model, handler_source).is_file()
    ports = ServerPorts.free()
    record = start_torchserve(work, ports, (model,), store=store)
    try:
        answer = wait_until(
            lambda: answer_of(f"http://127.0.0.1:{ports.ts_inference}/predictions/{model}"),
            timeout_s=READY_TIMEOUT_S,
            what=f"TorchServe to serve {model}",
            interval_s=0.5,
        )
        yield ports, answer
    finally:
        stop_torchserve(record, work)
        assert processes_mentioning(str(work)) == []
