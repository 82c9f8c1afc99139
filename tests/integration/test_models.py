"""The sample models: same answers on both real servers, the handler's inputs, batching seen."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from inferload.local.models.build import build_models
from inferload.local.models.definitions import MODEL_NAMES, create_model, get_spec
from inferload.local.models.specs import model_repository_dir
from inferload.local.servers.manager import torchserve_infer, triton_infer
from inferload.servermetrics.readers import parse_triton_statistics
from tests.support.waiting import wait_until

TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def reference(model: str, data: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return create_model(model)(torch.from_numpy(data)).numpy()


def random_input(model: str, batch: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).random((batch, *get_spec(model).input_shape), dtype=np.float32)


def post(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def triton_stats(port: int, model: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=10) as r:
        return json.loads(r.read())


# ---- the built model files and the models themselves (committed configs: tests/unit/test_model_files.py)


def test_every_model_py_is_the_same_generic_file():
    texts = {(model_repository_dir() / m / "1" / "model.py").read_text() for m in MODEL_NAMES}
    assert len(texts) == 1


def test_models_are_deterministic():
    data = random_input("cnn", 2)
    np.testing.assert_array_equal(reference("cnn", data), reference("cnn", data))


def test_build_is_idempotent_and_fast_when_up_to_date(built_models):
    results = build_models(MODEL_NAMES)
    assert [r.built for r in results] == [False] * len(MODEL_NAMES)
    assert all(r.torchscript.exists() and r.mar.exists() for r in results)


# ---- same answers on both servers -----------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_same_input_gives_the_same_output_on_triton_and_torchserve(local_servers, model):
    spec = get_spec(model)
    data = random_input(model, 3)
    expected = reference(model, data)
    from_triton = triton_infer(local_servers.ports.triton_http, spec, data)
    from_torchserve = torchserve_infer(local_servers.ports.ts_inference, spec, data)
    np.testing.assert_allclose(from_triton, expected, **TOLERANCE)
    np.testing.assert_allclose(from_torchserve, expected, **TOLERANCE)
    np.testing.assert_allclose(from_triton, from_torchserve, **TOLERANCE)


# ---- the TorchServe handler's inputs ---------------------------------------------------------


@pytest.fixture()
def tiny_url(local_servers) -> str:
    return f"http://127.0.0.1:{local_servers.ports.ts_inference}/predictions/tiny"


def test_handler_accepts_raw_float32_with_several_items(tiny_url):
    data = random_input("tiny", 5)
    status, body = post(tiny_url, data.tobytes(), "application/octet-stream")
    assert status == 200
    np.testing.assert_allclose(np.array(json.loads(body)), reference("tiny", data), **TOLERANCE)


def test_handler_accepts_npy_by_content_type_and_by_magic(tiny_url):
    data = random_input("tiny", 2)
    buffer = io.BytesIO()
    np.save(buffer, data)
    for content_type in ("application/x-npy", "application/octet-stream"):
        status, body = post(tiny_url, buffer.getvalue(), content_type)
        assert status == 200, body
        np.testing.assert_allclose(np.array(json.loads(body)), reference("tiny", data), **TOLERANCE)


def test_handler_accepts_json_list_and_data_object(tiny_url):
    data = random_input("tiny", 2)
    for payload in (data.tolist(), {"data": data.tolist()}):
        status, body = post(tiny_url, json.dumps(payload).encode(), "application/json")
        assert status == 200, body
        np.testing.assert_allclose(np.array(json.loads(body)), reference("tiny", data), **TOLERANCE)
    status, body = post(tiny_url, json.dumps(data[0].tolist()).encode(), "application/json")
    assert status == 200 and np.array(json.loads(body)).shape == (1, 4)


def test_handler_rejects_a_partial_item_with_400_and_a_reason(tiny_url):
    status, body = post(tiny_url, b"\x00" * 10, "application/octet-stream")
    assert status == 400
    assert b"not a whole number of float32 items of shape [16]" in body


# ---- batching visible on the servers ---------------------------------------------------------


def burst(call, requests: int = 200, threads: int = 16) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: call(), range(requests)))


def test_triton_forms_batches_under_concurrent_load(local_servers):
    spec, port = get_spec("cnn"), local_servers.ports.triton_http
    data = random_input("cnn", 1)
    before = parse_triton_statistics(triton_stats(port, "cnn"), "cnn")
    burst(lambda: triton_infer(port, spec, data))

    def formed() -> dict[int, int] | None:
        """The batches formed since `before`, once they hold the 200 items (Triton counts a batch
        just after it answers it: a clean clone read 193 at once)."""
        after = parse_triton_statistics(triton_stats(port, "cnn"), "cnn")
        batches = {size: after.batches.get(size, 0) - before.batches.get(size, 0) for size in after.batches}
        return batches if sum(size * count for size, count in batches.items()) >= 200 else None

    batches = wait_until(formed, timeout_s=10, what="Triton's batch statistics to hold the 200 items", interval_s=0.1)
    assert sum(size * count for size, count in batches.items()) == 200  # every item once, no more
    assert max(size for size, count in batches.items() if count > 0) > 1


def test_torchserve_batch_size_metric_appears_on_metrics(local_servers):
    spec, port = get_spec("cnn"), local_servers.ports.ts_inference
    data = random_input("cnn", 1)
    burst(lambda: torchserve_infer(port, spec, data), requests=120)
    text = scrape(f"http://127.0.0.1:{local_servers.ports.ts_metrics}/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    batches = [s for s in families["InferloadBatches"].samples if s.labels["ModelName"] == "cnn"]
    assert batches and all(s.name == "InferloadBatches_total" for s in batches)
    assert {"ModelName", "Level", "BatchSize", "Hostname"} <= set(batches[0].labels)
    assert max(int(s.labels["BatchSize"]) for s in batches) > 1
    for name in (
        "InferloadItems",
        "InferloadRequests",
        "InferloadHandlerMicroseconds",
        "InferloadRequestHandlerMicroseconds",
        "ts_inference_requests",
        "ts_queue_latency_microseconds",
        "ts_inference_latency_microseconds",
    ):
        assert families[name].type == "counter", name
