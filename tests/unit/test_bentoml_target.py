"""The ``bentoml-http`` kind: its keys validated at their paths, the bodies its user sends, the
start check on a capture of the real service's OpenAPI document, and its /metrics parsed from a
capture of the real endpoint (BentoML 1.4.40, tests/captures/bentoml_*)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferload.errors import ScrapeError
from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import BentoMLTarget
from inferload.servermetrics.bentoml import bentoml_metrics_url, parse_bentoml_metrics
from inferload.servermetrics.figures import server_figures
from inferload.users.bentoml import BentoMLHttpUser, api_path, encode_bentoml_body
from inferload.users.request_pool import RequestPool, RequestSource
from tests.support.scenario_factory import key_problems, steady_one_user, targets_of, tiny_target, write_scenario

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


def bento(**keys: Any) -> dict[str, Any]:
    target = tiny_target("bento", "bentoml-http", "127.0.0.1:3000")
    target.update(keys)
    return target


def load(folder: Path, target: dict[str, Any]) -> Scenario:
    return load_scenario(write_scenario(folder, steady_one_user(target, name="bento", duration="5s")))


def problems(folder: Path, target: dict[str, Any]) -> list[tuple[str, str]]:
    return key_problems(folder, steady_one_user(target, name="bento", duration="5s"))


# --- the scenario keys --------------------------------------------------------------------------


def test_a_bentoml_target_loads_with_its_defaults(tmp_path: Path) -> None:
    (target,) = targets_of(BentoMLTarget, load(tmp_path, bento()))
    assert (target.server, target.protocol) == ("bentoml", "http")
    assert target.address == "http://127.0.0.1:3000"
    assert (target.content_type, target.response_check) == ("json", "status")
    assert api_path(target) == "/tiny"


@pytest.mark.parametrize(
    ("keys", "key_path", "message"),
    [
        ({"content_type": "npy"}, "targets[0].content_type", "a bentoml-http target sends json"),
        (
            {"content_type": "raw", "batch_size": 2},
            "targets[0].content_type",
            "raw bodies carry one file each: batch_size must be 1; got 2",
        ),
        ({"address": "http://127.0.0.1:3000/tiny"}, "targets[0].address", "expected http://host:port without a path"),
        ({"management_url": "http://127.0.0.1:3001"}, "targets[0].management_url", "only applies to torchserve-rest"),
        (
            {"sequence": {"length": 2}},
            "targets[0].sequence",
            "only applies to triton-grpc, triton-http and torchserve-rest targets",
        ),
        ({"media_type": "image/png"}, "targets[0].media_type", "only applies to torchserve-rest"),
    ],
)
def test_a_bad_bentoml_key_is_reported_at_its_key(tmp_path: Path, keys: dict[str, Any], key_path: str, message: str) -> None:
    found = problems(tmp_path, bento(**keys))
    assert [(path, message in text) for path, text in found] == [(key_path, True)], found


def test_a_raw_body_takes_one_input(tmp_path: Path) -> None:
    two = bento(content_type="raw")
    two["inputs"] = [*two["inputs"], {"name": "other", "shape": [1], "dtype": "FP32"}]
    assert problems(tmp_path, two) == [
        ("targets[0].content_type", "raw bodies carry one file (one input); this target has 2 (use json)")
    ]


# --- the bodies --------------------------------------------------------------------------------


def test_a_json_body_has_one_field_per_input_with_the_batch_first(tmp_path: Path) -> None:
    (target,) = targets_of(BentoMLTarget, load(tmp_path, bento(batch_size=2)))

    class User(BentoMLHttpUser):
        pass

    User.target = target
    pool = RequestPool(RequestSource(target, tmp_path), User.encode_request)
    _, request = pool.next()
    assert request.content_type == "application/json"
    body = json.loads(request.body)
    assert list(body) == ["INPUT__0"]
    assert np.asarray(body["INPUT__0"]).shape == (2, 16)


def test_a_raw_body_is_one_multipart_file_in_the_inputs_field() -> None:
    encoded = encode_bentoml_body("raw", ["image"], [np.frombuffer(b"\x89PNG", dtype=np.uint8)], "file.png", "image/png")
    boundary = encoded.content_type.split("boundary=", 1)[1]
    assert encoded.content_type.startswith("multipart/form-data; boundary=")
    assert encoded.body == (
        f"--{boundary}\r\n".encode()
        + b'Content-Disposition: form-data; name="image"; filename="file.png"\r\nContent-Type: image/png\r\n\r\n'
        + b"\x89PNG"
        + f"\r\n--{boundary}--\r\n".encode()
    )


def test_bytes_inputs_travel_as_json_strings() -> None:
    array = np.array([[b"hello"], [b"world"]], dtype=object)
    assert json.loads(encode_bentoml_body("json", ["text"], [array]).body) == {"text": [["hello"], ["world"]]}


# --- the start check on the real service's OpenAPI document -------------------------------------


def test_the_start_check_finds_the_api_and_its_parameters(tmp_path: Path) -> None:
    from inferload.startchecks.bentoml import openapi_problems, served_apis

    document = json.loads((CAPTURES / "bentoml_docs.json").read_text())
    assert sorted(served_apis(document)) == ["cnn", "identity", "tiny"]
    (fits,) = targets_of(BentoMLTarget, load(tmp_path, bento()))
    assert openapi_problems(fits, document) == []
    (missing,) = targets_of(BentoMLTarget, load(tmp_path, bento(model="resnet")))
    assert openapi_problems(missing, document) == [
        "target 'bento': BentoML at http://127.0.0.1:3000 does not expose API 'resnet' (POST /resnet);"
        " it exposes: cnn, identity, tiny"
    ]
    wrong = bento()
    wrong["inputs"] = [{"name": "x", "shape": [16], "dtype": "FP32"}]
    (renamed,) = targets_of(BentoMLTarget, load(tmp_path, wrong))
    assert openapi_problems(renamed, document) == [
        "target 'bento': BentoML at http://127.0.0.1:3000: input 'x' is not a parameter of API 'tiny' (it takes: INPUT__0)",
        "target 'bento': BentoML at http://127.0.0.1:3000: API 'tiny' requires parameter 'INPUT__0', which the scenario does not give",
    ]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "0.png").write_bytes(b"\x89PNG0")
    image = [{"name": "INPUT__0", "shape": [-1], "dtype": "UINT8", "data": {"dataset": "images"}}]
    (raw,) = targets_of(BentoMLTarget, load(tmp_path, bento(content_type="raw", inputs=image)))
    assert openapi_problems(raw, document) == [
        "target 'bento': BentoML at http://127.0.0.1:3000: API 'tiny' takes application/json, not multipart/form-data"
        " (content_type raw; use json)"
    ]


# --- /metrics ----------------------------------------------------------------------------------


def test_the_metrics_of_one_api_are_read_from_the_real_page() -> None:
    text = (CAPTURES / "bentoml_metrics.txt").read_text()
    tiny = parse_bentoml_metrics(text, "tiny", taken_at=10.0)
    assert tiny.server == "bentoml"
    assert tiny.counters["requests"] == 99.0  # 2xx only
    assert tiny.counters["failures"] == 2.0  # one 500, one 503
    assert tiny.counters["request_us"] == pytest.approx(7160549.15, rel=1e-6)
    assert (tiny.counters["inferences"], tiny.counters["executions"]) == (100.0, 31.0)
    assert tiny.pending == 0.0
    assert "queue_us" not in tiny.counters and "compute_us" not in tiny.counters
    untouched = parse_bentoml_metrics(text, "identity")
    assert untouched.counters == {}


def test_what_bentoml_does_not_report_is_null_with_the_reason() -> None:
    text = (CAPTURES / "bentoml_metrics.txt").read_text()
    before = parse_bentoml_metrics(text.replace(" 99.0", " 90.0"), "tiny", taken_at=0.0)
    after = parse_bentoml_metrics(text, "tiny", taken_at=1.0)
    side = server_figures(before, after).server_side()
    assert side["queue_ms_avg"] is None and side["compute_ms_avg"] is None and side["batch_size_histogram"] is None
    assert side["avg_batch_size"] is None  # the batch counters did not move between these two readings
    assert set(side["unknown"]) == {"queue_ms_avg", "compute_ms_avg", "batch_size_histogram"}
    assert "queue time" in side["unknown"]["queue_ms_avg"]
    whole = server_figures(parse_bentoml_metrics("bentoml_service_request_total 0\n", "tiny", 0.0), after)
    assert whole.avg_batch_size == pytest.approx(100 / 31, rel=1e-5)


def test_a_page_that_is_not_bentomls_is_an_error() -> None:
    with pytest.raises(ScrapeError, match="no bentoml_service_"):
        parse_bentoml_metrics("nv_inference_count 1\n", "tiny")
    assert bentoml_metrics_url("http://127.0.0.1:3000", None) == "http://127.0.0.1:3000/metrics"
    assert bentoml_metrics_url("http://127.0.0.1:3000", "http://h:9/m") == "http://h:9/m"


# --- the collector ---------------------------------------------------------------------------


class Pages:
    """A PageClient that answers the captured page, then the same page with more requests served."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def text(self, url: str) -> str:
        return self.texts.pop(0)

    def close(self) -> None:
        pass


def test_the_collector_reads_a_bentoml_target_from_its_own_port(tmp_path: Path) -> None:
    from inferload.observe.collector import BentoMLSourceConfig, sources_from_scenario
    from inferload.observe.sources import BentoMLSource

    (config,) = sources_from_scenario(load(tmp_path, bento()), gpu=False)
    assert config == BentoMLSourceConfig(
        kind="bentoml", target="bento", model="tiny", metrics_url="http://127.0.0.1:3000/metrics"
    )

    text = (CAPTURES / "bentoml_metrics.txt").read_text()
    later = text.replace(
        'code="200",runner_name="inferload_models",service_name="inferload_models",service_version="not available"} 99.0',
        'code="200",runner_name="inferload_models",service_name="inferload_models",service_version="not available"} 109.0',
    )
    source = BentoMLSource("bento", "tiny", config.metrics_url, http=Pages([text, later]))
    assert source.scrape(100.0) == []  # the first reading is the baseline
    (point,) = source.scrape(101.0)
    assert point.measurement == "server"
    assert point.tags == {"target": "bento", "server": "bentoml", "model": "tiny"}
    assert point.fields["pending"] == 0.0 and point.fields["queue_ms"] is None


# --- the local service's venv ------------------------------------------------------------------


def test_the_venv_is_named_by_a_hash_of_its_pinned_requirements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inferload.local.servers import bentoml_local
    from inferload.local.servers.server_venv import VenvSpec, venv_dir

    monkeypatch.setenv("INFERLOAD_VENVS", str(tmp_path))
    venv = venv_dir(bentoml_local.BENTOML_VENV)
    assert venv.parent == tmp_path and venv.name.startswith("bentoml-")
    assert "bentoml==1.4.40" in bentoml_local.REQUIREMENTS
    assert all("==" in pin for pin in bentoml_local.REQUIREMENTS)  # exact pins: installed with --no-deps
    other = VenvSpec("bentoml", (*bentoml_local.REQUIREMENTS[:-1], "yarl==0.0"))
    assert venv_dir(other) != venv
    command = bentoml_local.bentoml_command(venv, 3123)
    assert command[:3] == [str(venv / "bin" / "bentoml"), "serve", "bentoml_service:InferloadModels"]
    assert command[-4:] == ["--host", "127.0.0.1", "--port", "3123"]
    assert (Path(command[4]) / "bentoml_service.py").is_file()  # --working-dir holds the service file
