"""`inferload tune`'s Triton candidate with its own max_batch_size and preferred batch sizes, applied
to the real local Triton as the tune applies it (model-control load with a config override, no
restart), read back from Triton's model config API, obeyed by Triton (a batch above the new
max_batch_size is refused), and the model's own config put back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from inferload.tune.server_config import ConfigError, TritonCandidate, TritonConfigurator

MODEL = "identity"  # used by no other tune test; its own max_batch_size is 64


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def infer(base: str, batch: int) -> int:
    """One inference of `batch` rows over HTTP; the status code."""
    body = {"inputs": [{"name": "INPUT__0", "shape": [batch, 16], "datatype": "FP32", "data": [0.5] * (16 * batch)}]}
    request = urllib.request.Request(
        f"{base}/v2/models/{MODEL}/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_max_batch_size_and_preferred_sizes_are_applied_read_back_obeyed_and_restored(local_servers):
    base = f"http://127.0.0.1:{local_servers.ports.triton_http}"
    before = get(f"{base}/v2/models/{MODEL}/config")
    assert before["max_batch_size"] == 64
    configurator = TritonConfigurator(base, MODEL)
    try:
        applied = configurator.apply(TritonCandidate(True, 300, 1, (2, 4), max_batch_size=8))
        config = get(f"{base}/v2/models/{MODEL}/config")  # what Triton runs, read independently
        assert config["max_batch_size"] == 8
        assert [int(n) for n in config["dynamic_batching"]["preferred_batch_size"]] == [2, 4]
        assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 300
        assert applied["max_batch_size"] == 8 and applied["preferred_batch_size"] == [2, 4]
        assert infer(base, 8) == 200
        assert infer(base, 9) == 400  # above the new max_batch_size: Triton refuses it
    finally:
        configurator.restore()
    after = get(f"{base}/v2/models/{MODEL}/config")
    assert after["max_batch_size"] == 64 and after.get("dynamic_batching") == before.get("dynamic_batching")
    assert infer(base, 9) == 200


def test_preferred_sizes_above_the_max_batch_size_are_refused_before_anything_is_loaded(local_servers):
    base = f"http://127.0.0.1:{local_servers.ports.triton_http}"
    configurator = TritonConfigurator(base, MODEL)
    with pytest.raises(ConfigError, match="--triton-preferred-batch-sizes: 16 is above the max_batch_size 8"):
        configurator.apply(TritonCandidate(True, 300, 1, (4, 16), max_batch_size=8))
    assert get(f"{base}/v2/models/{MODEL}/config")["max_batch_size"] == 64
