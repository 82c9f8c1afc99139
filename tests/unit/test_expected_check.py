"""``response_check: expected``: the ``expected`` key's validation, reading its files, and comparing answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from inferload.errors import ScenarioError
from inferload.scenario.expected import ExpectedSpec, ExpectedValues, read_expected
from inferload.scenario.loader import load_scenario
from inferload.users.expected import ExpectedCheck, UnexpectedOutput, compare_arrays, compare_json, grpc_outputs


def target(kind: str = "triton-grpc", **keys: Any) -> dict[str, Any]:
    address = "http://127.0.0.1:8080" if kind == "torchserve-rest" else "127.0.0.1:8001"
    data: dict[str, Any] = {
        "name": "t",
        "kind": kind,
        "address": address,
        "model": "m",
        "inputs": [{"name": "INPUT__0", "shape": [4], "dtype": "FP32"}],
    }
    data.update(keys)
    return data


def write(tmp_path: Path, *targets: dict[str, Any]) -> Path:
    np.savez(tmp_path / "out.npz", OUTPUT__0=np.zeros((1, 4), np.float32))
    (tmp_path / "out.json").write_text(json.dumps({"OUTPUT__0": [[0, 0, 0, 0]]}))
    (tmp_path / "answers.jsonl").write_text('{"label": 1}\n{"label": 2}\n')
    (tmp_path / "answer.bin").write_bytes(b"\x00\x01")
    (tmp_path / "bad.json").write_text("{not json")
    path = tmp_path / "scenario.yaml"
    data = {"name": "unit", "duration": "10s", "targets": list(targets), "shape": {"kind": "steady", "users": 1}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems(tmp_path: Path, *targets: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, *targets))
    return [str(p) for p in caught.value.problems]


def test_an_expected_file_sets_the_check_and_its_path_is_made_absolute(tmp_path: Path) -> None:
    loaded = load_scenario(write(tmp_path, target(expected="out.npz"))).targets[0]

    assert loaded.response_check == "expected"
    assert loaded.expected == ExpectedSpec(path=str(tmp_path / "out.npz"), atol=1e-8, rtol=1e-5)


@pytest.mark.parametrize(
    ("keys", "where", "message"),
    [
        ({"response_check": "expected"}, "targets[0].expected", "required with response_check: expected"),
        ({"response_check": "shape", "expected": "out.npz"}, "targets[0].response_check", "an expected file is given"),
        ({"expected": {"path": "out.npz", "atol": -1}}, "targets[0].expected.atol", "must be at least 0; got -1"),
        ({"expected": {"path": "out.npz", "rtol": -0.5}}, "targets[0].expected.rtol", "must be at least 0; got -0.5"),
        ({"expected": {"atol": 0.1}}, "targets[0].expected.path", "required key is missing"),
        ({"expected": "missing.npz"}, "targets[0].expected.path", "missing.npz does not exist"),
        ({"expected": "answer.bin"}, "targets[0].expected.path", "an .npz or .json file of output name -> values"),
        ({"expected": "bad.json"}, "targets[0].expected.path", "bad.json is not JSON"),
        ({"expected": "out.npz", "outputs": ["SCORES"]}, "targets[0].expected.path", "has output 'OUTPUT__0', which this target"),
        ({"expected": {"path": "out.npz", "tolerance": 1}}, "targets[0].expected.tolerance", "unknown key 'tolerance'"),
    ],
)
def test_bad_expected_values_are_reported_at_their_key(tmp_path: Path, keys: dict[str, Any], where: str, message: str) -> None:
    found = problems(tmp_path, target(**keys))

    assert len(found) == 1 and f"scenario.yaml: {where}: " in found[0] and message in found[0], found


def test_torchserve_takes_json_jsonl_or_raw_bytes_but_not_npz(tmp_path: Path) -> None:
    npz = problems(tmp_path, target("torchserve-rest", expected="out.npz"))
    many = problems(tmp_path, target("torchserve-rest", expected="answers.jsonl"))

    assert len(npz) == 1 and "compared as JSON (.json, .jsonl) or as raw bytes" in npz[0]
    assert len(many) == 1 and "has 2 answers; without a data set give one" in many[0]
    raw = load_scenario(write(tmp_path, target("torchserve-rest", expected="answer.bin"))).targets[0]
    assert raw.response_check == "expected"
    assert read_expected(Path(raw.expected.path if raw.expected else ""), "torchserve-rest").raw == b"\x00\x01"


def test_read_expected_decodes_json_text_as_bytes_and_refuses_ragged_lists(tmp_path: Path) -> None:
    (tmp_path / "text.json").write_text(json.dumps({"OUT": [["ab", "c"]], "N": [[1, 2]]}))
    (tmp_path / "ragged.json").write_text(json.dumps({"OUT": [[1, 2], [3]]}))

    arrays = read_expected(tmp_path / "text.json", "triton-http").arrays

    assert arrays["OUT"].dtype == object and arrays["OUT"].tolist() == [[b"ab", b"c"]]
    assert arrays["N"].tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="output 'OUT' is not a rectangular nested list"):
        read_expected(tmp_path / "ragged.json", "triton-http")


def test_compare_arrays_names_the_first_difference_and_never_the_whole_tensor() -> None:
    want = np.zeros((2, 1000), np.float32)
    got = want.copy()
    got[1, 7] = 0.5
    got[1, 9] = 0.25

    assert compare_arrays("OUT", want + 1e-9, want, atol=1e-8, rtol=0) is None
    message = compare_arrays("OUT", got, want, atol=1e-8, rtol=0)
    assert message == "'OUT': got float32 [2, 1000]; at [1, 7] got 0.5, expected 0 (2 of 2000 differ)"
    assert compare_arrays("OUT", got, want[:, :10], 0, 0) == "'OUT': got float32 [2, 1000]; expected shape [2, 10]"
    long_text = np.array([b"x" * 500], dtype=object)
    text_message = compare_arrays("T", long_text, np.array([b"y"], dtype=object), 0, 0)
    assert text_message is not None and len(text_message) < 160 and "..." in text_message
    assert compare_arrays("N", np.array([float("nan")]), np.array([float("nan")]), 0, 0) is None


def test_compare_json_walks_lists_and_objects() -> None:
    assert compare_json({"label": 3, "scores": [0.1, 0.2]}, {"label": 3, "scores": [0.1, 0.2000001]}, 1e-6, 0) is None
    assert compare_json([[1, 2], [3, 4.5]], [[1, 2], [3, 4]], 0, 0) == "at $[1][1] got 4.5, expected 4"
    assert compare_json({"a": 1}, {"b": 1}, 0, 0) == "at $ got an object with keys [a], expected an object with keys [b]"
    assert compare_json(7, [1, 2], 0, 0) == "at $ got 7, expected a list of 2 items"
    assert compare_json("cat", "dog", 0, 0) == 'at $ got "cat", expected "dog"'
    assert compare_json(True, 1, 0, 0) == "at $ got true, expected 1"


def test_triton_answers_are_compared_per_sample_with_a_data_set() -> None:
    per_sample = np.arange(12, dtype=np.float32).reshape(6, 2)  # 6 samples, 2 values each
    check = ExpectedCheck(ExpectedValues("arrays", Path("e.npz"), arrays={"OUT": per_sample}), atol=0, rtol=0)

    check.arrays({"OUT": per_sample[[4, 5]]}, samples=(4, 5))
    with pytest.raises(
        UnexpectedOutput, match=r"^unexpected output 'OUT' for sample 4: got float32 \[2, 2\]; at \[0, 0\] got 0, expected 8"
    ):
        check.arrays({"OUT": per_sample[[0, 1]]}, samples=(4, 5))
    wrong_second = per_sample[[4, 5]].copy()
    wrong_second[1, 1] = -1.0
    check.sample_label = lambda sample: f"sample {sample} ({sample}.png)"  # as a folder data set names them
    with pytest.raises(
        UnexpectedOutput, match=r"^unexpected output 'OUT' for sample 5 \(5.png\): got float32 \[2, 2\]; at \[1, 1\]"
    ):
        check.arrays({"OUT": wrong_second}, samples=(4, 5))  # the sample whose row differs
    with pytest.raises(UnexpectedOutput, match=r"no output 'OUT' in the answer \(got: OTHER\)"):
        check.arrays({"OTHER": per_sample}, samples=())
    with pytest.raises(UnexpectedOutput, match="the expected file has 6 samples; this request sent sample 9"):
        check.arrays({"OUT": per_sample[[0]]}, samples=(9,))


def test_torchserve_bodies_are_compared_as_json_per_sample_or_as_bytes() -> None:
    jsonl = ExpectedCheck(ExpectedValues("jsonl", Path("a.jsonl"), answers=({"label": 1}, {"label": 2})), 0, 0)
    raw = ExpectedCheck(ExpectedValues("raw", Path("a.bin"), raw=b"abcd"), 0, 0)

    jsonl.body(b'{"label": 2}', samples=(1,))
    jsonl.body(b'[{"label": 1}, {"label": 2}]', samples=(0, 1))
    with pytest.raises(UnexpectedOutput, match=r"^unexpected answer for sample 1: at \$.label got 1, expected 2$"):
        jsonl.body(b'{"label": 1}', samples=(1,))
    with pytest.raises(UnexpectedOutput, match="got a body that is not JSON"):
        jsonl.body(b"<html>", samples=(0,))
    raw.body(b"abcd")
    with pytest.raises(UnexpectedOutput, match="got 4 bytes, expected 4; first difference at byte 2"):
        raw.body(b"abXd")


def test_grpc_outputs_are_decoded_by_datatype() -> None:
    response = service_pb2.ModelInferResponse()
    numbers = response.outputs.add(name="N", datatype="INT32")
    numbers.shape.extend([1, 3])
    response.raw_output_contents.append(np.array([[1, 2, 3]], np.int32).tobytes())
    text = response.outputs.add(name="T", datatype="BYTES")
    text.shape.extend([2])
    response.raw_output_contents.append(serialize_byte_tensor(np.array([b"a", b"bc"], dtype=object)).item())

    decoded = grpc_outputs(response)

    assert decoded["N"].dtype == np.int32 and decoded["N"].tolist() == [[1, 2, 3]]
    assert decoded["T"].tolist() == [b"a", b"bc"]


def test_the_start_check_names_expected_outputs_the_model_does_not_have(tmp_path: Path) -> None:
    from inferload.startchecks.triton import check_target_against_triton

    loaded = load_scenario(write(tmp_path, target(expected="out.npz"))).targets[0]
    metadata = {
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "SCORES", "datatype": "FP32", "shape": [-1, 4]}],
    }

    problems = check_target_against_triton(loaded, metadata, {"max_batch_size": 8})

    assert problems == [
        "target 't': expected: out.npz has output 'OUTPUT__0', which is not an output of the model 'm' (it has: SCORES)"
    ]


def test_a_triton_http_answer_is_compared_from_its_body_alone_as_the_engine_hands_it_back() -> None:
    """The engine gives back the body without its Inference-Header-Content-Length: the JSON header's
    end is found by parsing it, then the binary outputs it names are read and compared."""
    import tritonclient.http as httpclient

    from inferload.users.triton import TritonHttpUser, http_answer_outputs

    values = np.array([[0.5, 1.5, -2.0, 4.0]], np.float32)
    header = {"outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]}
    body = json.dumps(header).encode() + values.tobytes()
    assert http_answer_outputs(body)["OUT"].tolist() == values.tolist()
    as_json = json.dumps({"outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 4], "data": values.ravel().tolist()}]})
    assert http_answer_outputs(as_json.encode())["OUT"].tolist() == values.tolist()  # no binary part
    result = httpclient.InferResult.from_response_body(body, False, len(json.dumps(header)))
    assert result.as_numpy("OUT").tolist() == http_answer_outputs(body)["OUT"].tolist()  # as tritonclient reads it

    check = ExpectedCheck(ExpectedValues("arrays", Path("e.npz"), arrays={"OUT": values}), atol=0, rtol=0)
    TritonHttpUser.check_expected(check, body, ())
    wrong = values.copy()
    wrong[0, 2] = 3.0
    with pytest.raises(UnexpectedOutput, match=r"at \[0, 2\] got -2, expected 3"):
        TritonHttpUser.check_expected(
            ExpectedCheck(ExpectedValues("arrays", Path("e.npz"), arrays={"OUT": wrong}), atol=0, rtol=0), body, ()
        )
    with pytest.raises(UnexpectedOutput, match="no JSON header in its 6 bytes"):
        http_answer_outputs(b"<html>")


def test_expected_answers_go_through_the_engine_except_where_only_python_can_compare_them(tmp_path: Path) -> None:
    """The engine sends and times a target with expected answers (Python checks each answer it hands
    back); a decoupled stream's, a sequence model's and a traced target's stay on their own client."""
    from locust.env import Environment

    from inferload.users import user_class_for
    from inferload.users.base import ModelFit
    from inferload.users.engine import answers_checked_in_python
    from inferload.users.sequence import SequenceSettings

    scenario = load_scenario(
        write(
            tmp_path,
            target("triton-grpc", name="grpc", expected="out.npz"),
            target("triton-http", name="http", address="127.0.0.1:8000", expected="out.npz"),
            target("torchserve-rest", name="ts", response_check="expected", expected="answer.bin"),
            target("triton-grpc", name="traced", expected="out.npz", trace={"rate": 1}),
        )
    )
    grpc, http, ts, traced = (user_class_for(t, tmp_path) for t in scenario.targets)
    for cls in (grpc, http, ts):
        assert cls.python_only_reason(cls.wiring_in(Environment())) is None, cls.target.name
        assert answers_checked_in_python(cls)
    assert "traced" in (traced.python_only_reason(traced.wiring_in(Environment())) or "")
    decoupled = ModelFit(decoupled=True)
    assert "decoupled" in (grpc.expected_python_only_reason(None, decoupled) or "")
    sequenced = ModelFit(sequence_settings=SequenceSettings(length=3, concurrent=1, string_ids=False))
    assert "sequence" in (grpc.expected_python_only_reason(None, sequenced) or "")


def test_kserve_and_bentoml_answers_are_compared_from_the_bytes_the_engine_hands_back() -> None:
    """Each kind's `check_expected` reads the answer as its wire carried it: KServe v1's predictions,
    v2's JSON tensors, v2 gRPC's response message, BentoML's body."""
    from inferload.users.bentoml import BentoMLHttpUser
    from inferload.users.kserve import KServeV1HttpUser, KServeV2GrpcUser, KServeV2HttpUser

    values = np.array([[1.0, 2.0]], np.float32)
    arrays = ExpectedCheck(ExpectedValues("arrays", Path("e.npz"), arrays={"OUT": values}), atol=0, rtol=0)
    v2 = {"outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]}
    KServeV2HttpUser.check_expected(arrays, json.dumps(v2).encode(), ())
    v2["outputs"][0]["data"] = [1.0, 2.5]
    with pytest.raises(UnexpectedOutput, match=r"at \[0, 1\] got 2.5, expected 2"):
        KServeV2HttpUser.check_expected(arrays, json.dumps(v2).encode(), ())

    response = service_pb2.ModelInferResponse()
    output = response.outputs.add(name="OUT", datatype="FP32")
    output.shape.extend([1, 2])
    response.raw_output_contents.append(values.tobytes())
    KServeV2GrpcUser.check_expected(arrays, response.SerializeToString(), ())
    response.raw_output_contents[0] = np.array([[7.0, 2.0]], np.float32).tobytes()
    with pytest.raises(UnexpectedOutput, match=r"at \[0, 0\] got 7, expected 1"):
        KServeV2GrpcUser.check_expected(arrays, response.SerializeToString(), ())

    answers = ExpectedCheck(ExpectedValues("jsonl", Path("a.jsonl"), answers=({"label": 1}, {"label": 2})), 0, 0)
    KServeV1HttpUser.check_expected(answers, b'{"predictions": [{"label": 2}]}', (1,))
    with pytest.raises(UnexpectedOutput, match=r"^unexpected answer for sample 0: at \$.label got 2, expected 1$"):
        KServeV1HttpUser.check_expected(answers, b'{"predictions": [{"label": 2}]}', (0,))
    BentoMLHttpUser.check_expected(answers, b'[{"label": 1}, {"label": 2}]', (0, 1))
    with pytest.raises(UnexpectedOutput, match="got a body that is not JSON"):
        BentoMLHttpUser.check_expected(answers, b"<html>", (0,))
