"""The KServe kinds (``kserve-v2-http``, ``kserve-v2-grpc``, ``kserve-v1-http``): their keys
validated at their paths, the bodies their users send, the start check's comparison with the
v2 metadata, and KServe's /metrics parsed from a capture of the real server (kserve 0.21.0,
tests/captures/kserve_metrics.txt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferload.errors import BadOutputShape, ScrapeError
from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario
from inferload.servermetrics.figures import server_figures
from inferload.servermetrics.kserve import kserve_metrics_url, parse_kserve_metrics
from inferload.startchecks.kserve import check_target_against_v2, v2_model_batches, v2_output_shapes
from inferload.users.kserve import (
    response_size,
    v1_predict_path,
    v1_predictions,
    v1_request_body,
    v2_answer,
    v2_infer_path,
    v2_output_arrays,
    v2_request_body,
)
from tests.support.scenario_factory import key_problems, steady_one_user, tiny_target, write_scenario

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
#: what the real KServe model server answers for the tiny sample model (GET /v2/models/tiny)
TINY_METADATA = {
    "name": "tiny",
    "versions": None,
    "platform": "",
    "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 16]}],
    "outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 4]}],
}


def load(folder: Path, *targets: dict[str, Any]) -> Scenario:
    return load_scenario(write_scenario(folder, steady_one_user(*targets, name="kserve", duration="5s")))


def problems(folder: Path, target: dict[str, Any]) -> list[tuple[str, str]]:
    return key_problems(folder, steady_one_user(target, name="kserve", duration="5s"))


# --- the scenario keys --------------------------------------------------------------------------


def test_the_kserve_kinds_load_with_their_addresses_server_and_protocol(tmp_path: Path) -> None:
    v2_http, v2_grpc, v1_http = load(
        tmp_path,
        tiny_target("a", "kserve-v2-http", "127.0.0.1:8090/", version="2"),
        tiny_target("b", "kserve-v2-grpc", "127.0.0.1:8091"),
        tiny_target("c", "kserve-v1-http", "http://127.0.0.1:8090"),
    ).targets
    assert (v2_http.address, v2_http.server, v2_http.protocol, v2_http.version) == (
        "http://127.0.0.1:8090",
        "kserve",
        "http",
        "2",
    )
    assert (v2_grpc.address, v2_grpc.server, v2_grpc.protocol) == ("127.0.0.1:8091", "kserve", "grpc")
    assert (v1_http.address, v1_http.server, v1_http.protocol) == ("http://127.0.0.1:8090", "kserve", "http")
    assert {t.response_check for t in (v2_http, v2_grpc, v1_http)} == {"shape"}


def test_an_https_address_on_a_kserve_rest_kind_turns_tls_on(tmp_path: Path) -> None:
    (target,) = load(tmp_path, tiny_target("a", "kserve-v1-http", "https://127.0.0.1:8443")).targets
    assert target.tls is not None and target.address == "https://127.0.0.1:8443"


@pytest.mark.parametrize(
    ("kind", "keys", "where", "message"),
    [
        ("kserve-v2-grpc", {"address": "http://127.0.0.1:8091"}, "targets[0].address", "without a scheme"),
        ("kserve-v2-http", {"address": "http://127.0.0.1:8090/v2"}, "targets[0].address", "without a path"),
        ("kserve-v1-http", {"version": "1"}, "targets[0].version", "no model versions"),
        ("kserve-v2-http", {"content_type": "npy"}, "targets[0].content_type", "only applies to torchserve-rest"),
        (
            "kserve-v2-grpc",
            {"sequence": {"length": 4}},
            "targets[0].sequence",
            "only applies to triton-grpc, triton-http and torchserve-rest targets",
        ),
        ("kserve-v1-http", {"management_url": "http://127.0.0.1:8081"}, "targets[0].management_url", "torchserve-rest"),
        ("kserve-v2-http", {"token_file": "key_file.json"}, "targets[0].token_file", "torchserve-rest"),
        (
            "kserve-v2-grpc",
            {"headers": {"X~Odd": "1"}},
            "targets[0].headers.X~Odd",
            "a kserve-v2-grpc target sends headers as gRPC",
        ),
        ("kserve-v2-grpc", {"tls": {"insecure_skip_verify": True}}, "targets[0].tls.insecure_skip_verify", "gRPC cannot skip"),
        ("kserve-v2-http", {"response_check": "bytes"}, "targets[0].response_check", "expected one of"),
        ("kserve-v2-http", {"body_template": '{"x": $data}'}, "targets[0].body_template", "torchserve-rest"),
    ],
)
def test_bad_kserve_keys_are_reported_at_their_path(
    tmp_path: Path, kind: str, keys: dict[str, Any], where: str, message: str
) -> None:
    target = tiny_target("k", kind, "127.0.0.1:8091" if kind == "kserve-v2-grpc" else "http://127.0.0.1:8090")
    target.update(keys)
    found = problems(tmp_path, target)
    assert any(path == where and message in text for path, text in found), found


# --- bodies ---------------------------------------------------------------------------------------


def test_a_v2_body_is_the_standard_json_form_with_flat_data() -> None:
    spec = load_spec()
    array = np.arange(32, dtype=np.float32).reshape(2, 16) / 4
    body = json.loads(v2_request_body([(spec, array)], ("OUTPUT__0",)))
    assert body == {
        "inputs": [{"name": "INPUT__0", "shape": [2, 16], "datatype": "FP32", "data": (np.arange(32) / 4).tolist()}],
        "outputs": [{"name": "OUTPUT__0"}],
    }


def test_a_v1_body_has_one_instance_per_item_and_several_inputs_by_name() -> None:
    spec = load_spec()
    array = np.ones((3, 16), dtype=np.float32)
    assert json.loads(v1_request_body([(spec, array)])) == {"instances": [[1.0] * 16] * 3}
    other = spec.model_copy(update={"name": "MASK", "dtype": "INT32", "shape": (2,)})
    mask = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int32)
    instances = json.loads(v1_request_body([(spec, array), (other, mask)]))["instances"]
    assert [item["MASK"] for item in instances] == [[1, 2], [3, 4], [5, 6]] and len(instances[0]["INPUT__0"]) == 16


def test_bytes_elements_travel_as_strings() -> None:
    spec = load_spec().model_copy(update={"dtype": "BYTES", "shape": (2,)})
    array = np.array([[b"a", b"bc"]], dtype=object)
    assert json.loads(v2_request_body([(spec, array)]))["inputs"][0]["data"] == ["a", "bc"]
    assert json.loads(v1_request_body([(spec, array)])) == {"instances": [["a", "bc"]]}


def test_a_v2_answer_decodes_to_arrays_of_its_datatype_and_shape() -> None:
    body = json.dumps(
        {"model_name": "tiny", "outputs": [{"name": "OUTPUT__0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    )
    arrays = v2_output_arrays(v2_answer(body.encode()))
    assert arrays["OUTPUT__0"].dtype == np.float32 and arrays["OUTPUT__0"].shape == (1, 4)
    with pytest.raises(BadOutputShape, match="expected a v2 answer"):
        v2_answer(b'{"predictions": []}')


def test_v1_predictions_are_checked_against_the_batch() -> None:
    assert v1_predictions(b'{"predictions": [[1, 2], [3, 4]]}', 2) == [[1, 2], [3, 4]]
    with pytest.raises(
        BadOutputShape, match=r'expected \{"predictions": a list of 2 items\}; got predictions is a list of 1 item'
    ):
        v1_predictions(b'{"predictions": [[1, 2]]}', 2)
    with pytest.raises(BadOutputShape, match=r"got an object with keys \[error\]"):
        v1_predictions(b'{"error": "boom"}', 1)


def test_the_standard_paths() -> None:
    assert v2_infer_path("tiny", None) == "/v2/models/tiny/infer"
    assert v2_infer_path("a/b", "3") == "/v2/models/a%2Fb/versions/3/infer"
    assert v1_predict_path("tiny") == "/v1/models/tiny:predict"


def test_a_grpc_answer_in_typed_contents_reports_their_encoded_size() -> None:
    from tritonclient.grpc import service_pb2

    typed = service_pb2.ModelInferResponse()
    output = typed.outputs.add(name="OUTPUT__0", datatype="FP32", shape=[1, 4])
    output.contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])
    raw = service_pb2.ModelInferResponse(raw_output_contents=[b"\0" * 16])
    assert response_size(raw) == 16
    assert response_size(typed) == output.contents.ByteSize() > 16


# --- the start check ----------------------------------------------------------------------------


def test_the_v2_metadata_fits_the_scenario_and_gives_the_output_shapes(tmp_path: Path) -> None:
    (target,) = load(tmp_path, tiny_target("a", "kserve-v2-http", "127.0.0.1:8090", batch_size=4)).targets
    assert check_target_against_v2(target, TINY_METADATA) == []
    assert v2_output_shapes(target, TINY_METADATA) == {"OUTPUT__0": (4, 4)}


def test_inputs_that_do_not_fit_the_v2_metadata_are_named(tmp_path: Path) -> None:
    target = tiny_target("a", "kserve-v2-grpc", "127.0.0.1:8091")
    target["inputs"] = [
        {"name": "INPUT__0", "shape": [8], "dtype": "FP16"},
        {"name": "EXTRA", "shape": [1], "dtype": "FP32"},
    ]
    (loaded,) = load(tmp_path, target).targets
    found = check_target_against_v2(loaded, TINY_METADATA)
    assert any("dtype FP16 does not match the model's FP32" in line for line in found)
    assert any("shape [8] (per item) does not match the model 'tiny''s [-1, 16]" in line for line in found)
    assert any("'EXTRA' is not an input of the model 'tiny' (it has: INPUT__0)" in line for line in found)


#: what Triton answers for its python_backend example add_sub (max_batch_size 0: no batch dimension)
ADD_SUB_METADATA = {
    "name": "add_sub",
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4]}, {"name": "INPUT1", "datatype": "FP32", "shape": [4]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]}, {"name": "OUTPUT1", "datatype": "FP32", "shape": [4]}],
}


def _add_sub_target(**extra: Any) -> dict[str, Any]:
    target = tiny_target("a", "kserve-v2-http", "127.0.0.1:8000", **extra)
    target["model"] = "add_sub"
    target["inputs"] = [{"name": "INPUT0", "shape": [4], "dtype": "FP32"}, {"name": "INPUT1", "shape": [4], "dtype": "FP32"}]
    return target


def test_metadata_without_a_batch_dimension_means_the_users_send_the_full_shape(tmp_path: Path) -> None:
    (target,) = load(tmp_path, _add_sub_target()).targets
    assert v2_model_batches(target, ADD_SUB_METADATA) is False
    assert check_target_against_v2(target, ADD_SUB_METADATA) == []
    assert v2_output_shapes(target, ADD_SUB_METADATA) == {"OUTPUT0": (4,), "OUTPUT1": (4,)}
    (batched,) = load(tmp_path, tiny_target("a", "kserve-v2-http", "127.0.0.1:8090")).targets
    assert v2_model_batches(batched, TINY_METADATA) is True
    assert v2_model_batches(batched, {"inputs": []}) is True  # nothing to tell by: as before


def test_a_batch_size_on_metadata_without_a_batch_dimension_is_a_problem(tmp_path: Path) -> None:
    (target,) = load(tmp_path, _add_sub_target(batch_size=2)).targets
    (problem,) = check_target_against_v2(target, ADD_SUB_METADATA)
    assert "batch_size 2 needs a model that batches" in problem
    assert "no batch dimension ('INPUT0' [4], 'INPUT1' [4]): use batch_size 1" in problem


# --- KServe's /metrics --------------------------------------------------------------------------


def test_kserve_metrics_from_a_capture_of_the_real_server() -> None:
    text = (CAPTURES / "kserve_metrics.txt").read_text()
    reading = parse_kserve_metrics(text, "tiny", taken_at=10.0)
    assert reading.server == "kserve" and not reading.has_batch_stats
    assert reading.counters["requests"] == reading.counters["computed"] > 0
    assert reading.counters["request_us"] > reading.counters["compute_us"] > 0
    assert parse_kserve_metrics(text, "not-served", taken_at=10.0).counters == {}


def test_kserve_figures_leave_out_what_it_does_not_report_with_the_reason() -> None:
    text = (CAPTURES / "kserve_metrics.txt").read_text()
    before = parse_kserve_metrics(text, "tiny", taken_at=0.0)
    after = before.__class__("kserve", "tiny", 2.0, {k: v * 3 for k, v in before.counters.items()}, {}, has_batch_stats=False)
    side = server_figures(before, after).server_side()
    assert side["compute_ms_avg"] == pytest.approx(before.counters["compute_us"] / before.counters["computed"] / 1000, rel=1e-5)
    assert side["request_ms_avg"] is not None and side["queue_ms_avg"] is None and side["avg_batch_size"] is None
    assert set(side["unknown"]) == {"queue_ms_avg", "avg_batch_size", "batch_size_histogram"}
    assert "does not batch" in side["unknown"]["avg_batch_size"]


def test_a_page_without_kserve_metrics_is_a_scrape_error_and_grpc_needs_a_metrics_url() -> None:
    with pytest.raises(ScrapeError, match="not KServe's model server metrics"):
        parse_kserve_metrics((CAPTURES / "triton_metrics.txt").read_text(), "tiny")
    assert kserve_metrics_url("kserve-v2-http", "http://127.0.0.1:8090", None) == "http://127.0.0.1:8090/metrics"
    assert kserve_metrics_url("kserve-v2-grpc", "127.0.0.1:8091", None) is None
    assert kserve_metrics_url("kserve-v2-grpc", "127.0.0.1:8091", "http://h:1/metrics") == "http://h:1/metrics"


def load_spec() -> Any:
    from inferload.scenario.inputs import InputSpec

    return InputSpec(name="INPUT__0", shape=(16,), dtype="FP32")


# --- the collector ------------------------------------------------------------------------------


class CapturePage:
    """A PageClient that answers every URL with the capture of the real /metrics page."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def text(self, url: str) -> str:
        self.urls.append(url)
        return (CAPTURES / "kserve_metrics.txt").read_text()

    def close(self) -> None:
        pass


def test_the_collector_reads_kserve_targets_on_their_rest_port(tmp_path: Path) -> None:
    from inferload.observe.collector import KServeSourceConfig, sources_from_scenario
    from inferload.observe.sources import KServeSource

    scenario = load(
        tmp_path,
        tiny_target("rest", "kserve-v1-http", "http://127.0.0.1:8090"),
        tiny_target("grpc", "kserve-v2-grpc", "127.0.0.1:8091"),  # no metrics_url: nothing to read
    )
    configs = sources_from_scenario(scenario, gpu=False)
    assert configs == (
        KServeSourceConfig(kind="kserve", target="rest", model="tiny", metrics_url="http://127.0.0.1:8090/metrics"),
    )
    page = CapturePage()
    source = KServeSource("rest", "tiny", "http://127.0.0.1:8090/metrics", http=page)
    reading = source.read(1.0)
    assert reading is not None and reading.counters["computed"] > 0 and page.urls == ["http://127.0.0.1:8090/metrics"]


# --- response_check: expected -------------------------------------------------------------------


def test_expected_answers_take_the_triton_forms_on_v2_and_the_json_forms_on_v1(tmp_path: Path) -> None:
    from inferload.users.expected import ExpectedCheck, UnexpectedOutput

    np.savez(tmp_path / "want.npz", OUTPUT__0=np.ones((3, 4), dtype=np.float32))
    (tmp_path / "want.json").write_text("[3, 4]")
    v2, v1 = load(
        tmp_path,
        tiny_target("v2", "kserve-v2-http", "127.0.0.1:8090", expected="want.npz"),
        tiny_target("v1", "kserve-v1-http", "127.0.0.1:8090", expected="want.json"),
    ).targets
    assert v2.response_check == v1.response_check == "expected"
    found = problems(tmp_path, tiny_target("v1", "kserve-v1-http", "127.0.0.1:8090", expected="want.npz"))
    assert found and found[0][0] == "targets[0].expected.path" and "a KServe v1 answer is compared as JSON" in found[0][1]
    v2_check = ExpectedCheck.for_target(v2, tmp_path)
    assert v2_check is not None
    answer = {"outputs": [{"name": "OUTPUT__0", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]}]}
    v2_check.arrays(v2_output_arrays(answer), samples=(2,))
    with pytest.raises(UnexpectedOutput, match="'OUTPUT__0'"):
        v2_check.arrays(v2_output_arrays({"outputs": [{**answer["outputs"][0], "data": [1, 1, 1, 2]}]}), samples=(0,))
    v1_check = ExpectedCheck.for_target(v1, tmp_path)
    assert v1_check is not None
    v1_check.body(json.dumps(v1_predictions(b'{"predictions": [[3, 4]]}', 1)[0]).encode())
    with pytest.raises(UnexpectedOutput):
        v1_check.body(json.dumps(v1_predictions(b'{"predictions": [[3, 5]]}', 1)[0]).encode())
