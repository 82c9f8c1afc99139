"""Scenario files: what is valid, and what each kind of mistake is reported as.

Every problem is one line, `file: key.path: message`, where the key path is written in the YAML's
own keys and the message says what was expected and what was found.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from inferload.errors import Problem, ScenarioError
from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.schema import Scenario
from inferload.scenario.shapes import SteadyShape
from inferload.scenario.targets import TorchServeTarget, TritonTarget

SCENARIOS_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"


def valid_scenario() -> dict[str, Any]:
    """A small valid scenario; each malformed case below changes one thing in it."""
    return {
        "name": "unit",
        "duration": "60s",
        "warmup": "10s",
        "targets": [
            {
                "name": "triton-cnn",
                "kind": "triton-grpc",
                "address": "127.0.0.1:8001",
                "model": "cnn",
                "inputs": [
                    {"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32", "data": {"generator": "random", "seed": 0}},
                ],
                "outputs": ["OUTPUT__0"],
            },
            {
                "name": "torchserve-cnn",
                "kind": "torchserve-rest",
                "address": "http://127.0.0.1:8080",
                "model": "cnn",
                "inputs": [{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32"}],
            },
        ],
        "shape": {"kind": "steady", "users": 8},
    }


# --- editing helpers: a key path in the same syntax the problems use ---------------------------


def _steps(path: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", path)]


def set_key(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = _steps(path)
        node: Any = data
        for step in parents:
            node = node[step]
        node[last] = value

    return edit


def del_key(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = _steps(path)
        node: Any = data
        for step in parents:
            node = node[step]
        del node[last]

    return edit


def edits(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for change in changes:
            change(data)

    return edit


def write_scenario(tmp_path: Path, data: Any, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value.problems


# --- the examples shipped in scenarios/ --------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SCENARIOS_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_scenario_is_valid(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.source_path == path
    assert scenario.name == path.stem


def test_the_expected_examples_exist() -> None:
    names = {path.stem for path in SCENARIOS_DIR.glob("*.yaml")}
    assert {"steady", "ramp", "burst", "stages", "compare", "triton-http"} <= names


def test_compare_sends_the_same_payload_to_both_servers() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "compare.yaml")
    servers = {target.server for target in scenario.targets}
    assert servers == {"triton", "torchserve"}
    first, second = scenario.targets
    assert first.model == second.model and first.inputs == second.inputs


# --- what a valid file turns into ---------------------------------------------------------------


def test_durations_are_seconds_and_defaults_are_filled_in(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path, valid_scenario()))
    assert (scenario.duration, scenario.warmup, scenario.window) == (60.0, 10.0, 1.0)
    triton, torchserve = scenario.targets
    assert triton.timeout == 10.0 and triton.batch_size == 1 and triton.weight == 1
    assert isinstance(triton, TritonTarget) and isinstance(torchserve, TorchServeTarget)  # the kind's class
    assert "content_type" not in TritonTarget.model_fields and torchserve.content_type == "octet-stream"
    assert (triton.server, triton.protocol) == ("triton", "grpc")
    assert (torchserve.server, torchserve.protocol) == ("torchserve", "http")
    assert torchserve.inputs[0].data.generator == "random" and torchserve.inputs[0].data.seed == 0
    assert isinstance(scenario.shape, SteadyShape)  # narrows the shape union for the check below
    assert scenario.shape.spawn_rate == 8.0


@pytest.mark.parametrize(
    ("kind", "written", "normalised"),
    [
        ("triton-grpc", " localhost:8001 ", "localhost:8001"),
        ("triton-grpc", "[::1]:8001", "[::1]:8001"),
        ("triton-http", "http://127.0.0.1:8000/", "127.0.0.1:8000"),
        ("triton-http", "127.0.0.1:8000", "127.0.0.1:8000"),
        ("torchserve-rest", "127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("torchserve-rest", "HTTPS://ts.example.com:443/", "https://ts.example.com:443"),
    ],
)
def test_addresses_are_normalised(tmp_path: Path, kind: str, written: str, normalised: str) -> None:
    data = valid_scenario()
    data["targets"] = [data["targets"][0] | {"kind": kind, "address": written}]
    assert load_scenario(write_scenario(tmp_path, data)).targets[0].address == normalised


def test_version_numbers_become_strings_and_dtypes_are_case_insensitive(tmp_path: Path) -> None:
    data = valid_scenario()
    set_key("targets[0].version", 3)(data)
    set_key("targets[0].inputs[0].dtype", "fp16")(data)
    target = load_scenario(write_scenario(tmp_path, data)).targets[0]
    assert target.version == "3" and target.inputs[0].dtype == "FP16"


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ({"kind": "ramp", "from_users": 2, "to_users": 12, "over": "30s"}, {"steps": 5, "spawn_rate": 2.0}),
        (
            {"kind": "burst", "base_users": 2, "burst_users": 20, "burst_length": "5s", "period": "20s"},
            {"first_burst_at": 15.0, "spawn_rate": 20.0},
        ),
        (
            {"kind": "stages", "stages": [{"duration": "10s", "users": 4}, {"duration": "10s", "users": 1}]},
            {"stages": ({"duration": 10.0, "users": 4, "spawn_rate": 4.0}, {"duration": 10.0, "users": 1, "spawn_rate": 3.0})},
        ),
    ],
    ids=["ramp", "burst", "stages"],
)
def test_shape_defaults(tmp_path: Path, shape: dict[str, Any], expected: dict[str, Any]) -> None:
    data = valid_scenario() | {"shape": shape}
    dumped = load_scenario(write_scenario(tmp_path, data)).shape.model_dump()
    assert {key: dumped[key] if not isinstance(dumped[key], list) else tuple(dumped[key]) for key in expected} == expected


def test_a_scenario_survives_a_round_trip_through_a_dict_and_yaml(tmp_path: Path) -> None:
    np.save(tmp_path / "input.npy", np.ones((3, 32, 32), dtype=np.float32))
    data = valid_scenario()
    set_key("targets[1].inputs[0].data", {"generator": "npy", "path": "input.npy"})(data)
    scenario = load_scenario(write_scenario(tmp_path, data))

    as_dict = scenario_to_dict(scenario)
    assert Path(as_dict["targets"][1]["inputs"][0]["data"]["path"]).is_absolute()
    again = scenario_from_dict(yaml.safe_load(yaml.safe_dump(as_dict, sort_keys=False)))
    assert again.source_path is None
    assert again.model_copy(update={"source_path": None}) == scenario_from_dict(as_dict)
    assert again.targets[0] == scenario.targets[0] and again.shape == scenario.shape


def test_scenarios_can_be_built_in_code() -> None:
    scenario = scenario_from_dict(valid_scenario())
    assert isinstance(scenario, Scenario) and scenario.source_path is None


# --- malformed scenarios: one mistake each, reported at its key ---------------------------------

MALFORMED = [
    # unknown keys, at several levels
    pytest.param(
        set_key("durationn", "60s"), "durationn", "unknown key 'durationn' (did you mean 'duration'?)", id="unknown-top-key"
    ),
    pytest.param(
        set_key("targets[0].timout", "5s"),
        "targets[0].timout",
        "unknown key 'timout' (did you mean 'timeout'?)",
        id="unknown-target-key",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].dtyp", "FP32"),
        "targets[0].inputs[0].dtyp",
        "(did you mean 'dtype'?)",
        id="unknown-input-key",
    ),
    pytest.param(
        set_key("targets[0].slo", {"p99": 50}), "targets[0].slo.p99", "unknown key 'p99' (did you mean", id="unknown-slo-key"
    ),
    pytest.param(set_key("shape.user", 8), "shape.user", "unknown key 'user' (did you mean 'users'?)", id="unknown-shape-key"),
    pytest.param(  # Locust's float arithmetic gave all users to the lightest of 10**30 and 1
        set_key("targets[0].weight", 10**30), "targets[0].weight", "must be at most 1000000; got 10000000", id="weight-too-big"
    ),
    pytest.param(
        set_key("targets[0].zzz", 1), "targets[0].zzz", "expected one of name, kind, address", id="unknown-key-lists-keys"
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data.value", 1),
        "targets[0].inputs[0].data.value",
        "does not apply to generator 'random'",
        id="key-for-other-generator",
    ),
    # required keys
    pytest.param(del_key("name"), "name", "required key is missing", id="missing-name"),
    pytest.param(del_key("targets[0].model"), "targets[0].model", "required key is missing", id="missing-model"),
    pytest.param(
        del_key("shape.kind"),
        "shape.kind",
        "required key is missing (one of steady, ramp, burst, stages, constant-rate, poisson, ramping-rate, rate-bursts, gamma, replay)",
        id="missing-shape-kind",
    ),
    # wrong types and values
    pytest.param(
        set_key("name", "my scenario"),
        "name",
        "expected a name of letters, digits, '_', '.' or '-'; got 'my scenario'",
        id="bad-name",
    ),
    pytest.param(
        set_key("targets[0].batch_size", 2.5), "targets[0].batch_size", "expected an integer; got 2.5", id="float-batch-size"
    ),
    pytest.param(set_key("targets[0].batch_size", 0), "targets[0].batch_size", "must be at least 1; got 0", id="zero-batch-size"),
    pytest.param(set_key("shape.users", "eight"), "shape.users", "expected an integer; got 'eight'", id="string-users"),
    pytest.param(set_key("targets", {"name": "x"}), "targets", "expected a list; got a mapping", id="targets-not-a-list"),
    pytest.param(
        set_key("targets[0].inputs[0]", "INPUT__0"),
        "targets[0].inputs[0]",
        "expected a mapping; got 'INPUT__0'",
        id="input-not-a-mapping",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].dtype", "FP8"),
        "targets[0].inputs[0].dtype",
        "expected one of FP32, FP16, INT32, INT64, BYTES, BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, FP64, BF16;"
        " got 'FP8'",
        id="bad-dtype",
    ),
    pytest.param(
        set_key("targets[0].kind", "triton"),
        "targets[0].kind",
        "expected one of triton-grpc, triton-http, torchserve-rest, kserve-v2-http, kserve-v2-grpc, kserve-v1-http,"
        " bentoml-http, openai-chat, openai-completions, triton-generate; got 'triton'",
        id="bad-target-kind",
    ),
    pytest.param(
        # a misspelled generative kind: its inputs are not required, and not said to be
        edits(set_key("targets[0].kind", "openai-chatt"), del_key("targets[0].inputs")),
        "targets[0].kind",
        "got 'openai-chatt'",
        id="bad-target-kind-without-inputs",
    ),
    pytest.param(
        set_key("shape.kind", "spike"),
        "shape.kind",
        "expected one of steady, ramp, burst, stages, constant-rate, poisson, ramping-rate, rate-bursts, gamma, replay; got 'spike'",
        id="bad-shape-kind",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data.generator", "gaussian"),
        "targets[0].inputs[0].data.generator",
        "expected one of random, zeros, constant, npy; got 'gaussian'",
        id="bad-generator",
    ),
    pytest.param(
        set_key("targets[0].slo", {"error_rate": 1.5}),
        "targets[0].slo.error_rate",
        "must be at most 1; got 1.5",
        id="error-rate-above-1",
    ),
    # open-loop shapes
    pytest.param(
        set_key("shape", {"kind": "poisson", "rate": 0}), "shape.rate", "must be greater than 0; got 0", id="poisson-zero-rate"
    ),
    pytest.param(
        set_key("shape", {"kind": "poisson", "rate": 10, "max_inflight": 4}),
        "shape.max_inflight",
        "did you mean 'max_in_flight'",
        id="open-loop-typo",
    ),
    pytest.param(
        set_key("shape", {"kind": "rate-bursts", "base_rate": 50, "burst_rate": 20, "burst_length": "2s", "period": "10s"}),
        "shape.burst_rate",
        "must be greater than base_rate",
        id="burst-rate-below-base",
    ),
    pytest.param(
        set_key("shape", {"kind": "ramping-rate", "from_rate": 1, "to_rate": 100, "over": "10m"}),
        "shape.over",
        "must not be longer than duration",
        id="rate-ramp-longer-than-run",
    ),
    pytest.param(
        set_key("shape", {"kind": "constant-rate", "rate": 10, "max_in_flight": 0}),
        "shape.max_in_flight",
        "must be at least 1; got 0",
        id="no-senders",
    ),
    # durations
    pytest.param(
        set_key("duration", "soon"), "duration", "expected a duration like '30s', '2m' or '1m30s'; got 'soon'", id="bad-duration"
    ),
    pytest.param(set_key("duration", 0), "duration", "must be longer than 0s; got 0s", id="zero-duration"),
    pytest.param(set_key("targets[0].timeout", "-5s"), "targets[0].timeout", "expected a duration like", id="negative-timeout"),
    pytest.param(set_key("warmup", "60s"), "warmup", "must be shorter than duration (1m); got 1m", id="warmup-equals-duration"),
    pytest.param(
        set_key("window", "2m"), "window", "must not be longer than duration (1m); got 2m", id="window-longer-than-duration"
    ),
    # shapes of tensors
    pytest.param(
        set_key("targets[0].inputs[0].shape", [3, -32, 32]),
        "targets[0].inputs[0].shape[1]",
        "must be greater than 0; got -32",
        id="negative-dim",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].shape", [3, 0, 32]),
        "targets[0].inputs[0].shape[1]",
        "must be greater than 0; got 0",
        id="zero-dim",
    ),
    pytest.param(set_key("targets[0].inputs[0].shape", []), "targets[0].inputs[0].shape", "must not be empty", id="empty-shape"),
    pytest.param(
        set_key("targets[0].inputs[0].shape", 16),
        "targets[0].inputs[0].shape",
        "expected a list of positive integers like [3, 32, 32]; got 16",
        id="scalar-shape",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].shape", [100000, 100000]),
        "targets[0].inputs[0].shape",
        "at most 67,108,864 (64 MiB) are allowed",
        id="impossible-shape",
    ),
    pytest.param(
        edits(set_key("targets[0].batch_size", 1024), set_key("targets[0].inputs[0].shape", [3, 128, 128])),
        "targets[0].inputs[0].shape",
        "1024 x [3, 128, 128] FP32 is 201,326,592 bytes per request",
        id="batch-makes-it-too-big",
    ),
    # names
    pytest.param(
        set_key("targets[1].name", "triton-cnn"),
        "targets[1].name",
        "duplicate target name 'triton-cnn' (also targets[0])",
        id="duplicate-target",
    ),
    pytest.param(
        lambda data: data["targets"][0]["inputs"].append({"name": "INPUT__0", "shape": [1], "dtype": "FP32"}),
        "targets[0].inputs[1].name",
        "duplicate input name 'INPUT__0' (also inputs[0])",
        id="duplicate-input",
    ),
    pytest.param(set_key("targets", []), "targets", "must not be empty", id="empty-targets"),
    pytest.param(set_key("targets[0].inputs", []), "targets[0].inputs", "must not be empty", id="empty-inputs"),
    # addresses
    pytest.param(
        set_key("targets[0].address", "localhost"),
        "targets[0].address",
        "expected host:port like '127.0.0.1:8001'; got 'localhost'",
        id="address-without-port",
    ),
    pytest.param(
        set_key("targets[0].address", "127.0.0.1:99999"),
        "targets[0].address",
        "the port must be a number from 1 to 65535; got 99999",
        id="port-out-of-range",
    ),
    pytest.param(
        set_key("targets[0].address", "http://127.0.0.1:8001"),
        "targets[0].address",
        "without a scheme",
        id="grpc-address-with-scheme",
    ),
    pytest.param(
        set_key("targets[1].address", "ftp://x:21"), "targets[1].address", "expected http:// or https://", id="torchserve-ftp"
    ),
    pytest.param(  # the password is never shown
        set_key("targets[1].address", "http://user:hunter2@127.0.0.1:8080"),
        "targets[1].address",
        "credentials in an address are not sent; got 'http://***@127.0.0.1:8080' (send them as a header instead",
        id="address-with-credentials",
    ),
    pytest.param(
        set_key("targets[1].address", "ftp://user:hunter2@x:21"),
        "targets[1].address",
        "got 'ftp://user:***@x:21'",
        id="other-scheme-with-credentials",
    ),
    pytest.param(
        set_key("targets[1].address", "http://127.0.0.1:8080/predictions/cnn"),
        "targets[1].address",
        "without a path",
        id="torchserve-with-path",
    ),
    pytest.param(
        set_key("targets[0].address", "bad host!:8001"), "targets[0].address", "invalid host 'bad host!'", id="garbage-host"
    ),
    pytest.param(
        set_key("targets[1].address", "http://127.0.0.1:x"),
        "targets[1].address",
        "the port must be a number from 1 to 65535; got 'x' in 'http://127.0.0.1:x' (for a torchserve-rest target)",
        id="url-quoted-whole",
    ),
    pytest.param(
        set_key("targets[1]", {"name": "chat", "kind": "openai-chat", "address": "http://[::1", "model": "m"}),
        "targets[1].address",
        "expected host:port like 'http://127.0.0.1:8080'; got 'http://[::1' (for an openai-chat target)",
        id="url-cut-short",
    ),
    pytest.param(
        set_key(
            "targets[1]",
            {"name": "chat", "kind": "openai-chat", "address": "http://127.0.0.1:1", "model": "m", "generation": {"prompt": ""}},
        ),
        "targets[1].generation.prompt",
        "expected a non-empty string; got ''",
        id="empty-prompt",
    ),
    pytest.param(
        set_key("targets[0].metrics_url", "127.0.0.1:8002"),
        "targets[0].metrics_url",
        "expected a URL like",
        id="metrics-url-without-scheme",
    ),
    # kind-specific keys
    pytest.param(
        set_key("targets[0].content_type", "json"),
        "targets[0].content_type",
        "only applies to torchserve-rest and bentoml-http targets; this target is triton-grpc",
        id="content-type-on-triton",
    ),
    pytest.param(
        set_key("targets[1].content_type", "protobuf"),
        "targets[1].content_type",
        "expected one of octet-stream, npy, json, raw, text; got 'protobuf'",
        id="bad-content-type",
    ),
    pytest.param(
        set_key("targets[0].version", "latest"),
        "targets[0].version",
        "expected a Triton model version number like 1; got 'latest'",
        id="triton-version-not-a-number",
    ),
    # data generators
    pytest.param(
        set_key("targets[0].inputs[0].data", {"generator": "constant"}),
        "targets[0].inputs[0].data.value",
        "required key is missing (generator 'constant' needs it)",
        id="constant-without-value",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data", {"generator": "constant", "value": "x"}),
        "targets[0].inputs[0].data.value",
        "expected a number for a FP32 input; got 'x'",
        id="string-constant-for-fp32",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data", {"generator": "random", "low": 1, "high": 0}),
        "targets[0].inputs[0].data.high",
        "must be greater than low (1); got 0",
        id="high-below-low",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data", {"generator": "npy", "path": "missing.npy"}),
        "targets[0].inputs[0].data.path",
        "npy file not found",
        id="missing-npy",
    ),
    pytest.param(
        set_key("targets[0].inputs[0].data", {"generator": "random", "length": 8}),
        "targets[0].inputs[0].data.length",
        "only applies to BYTES inputs; this input is FP32",
        id="length-on-fp32",
    ),
    pytest.param(
        edits(
            set_key("targets[0].inputs[0].dtype", "INT32"),
            set_key("targets[0].inputs[0].data", {"generator": "constant", "value": 2.5}),
        ),
        "targets[0].inputs[0].data.value",
        "expected an integer within INT32's range; got 2.5",
        id="fractional-int-constant",
    ),
    pytest.param(
        edits(
            set_key("targets[0].inputs[0].dtype", "BYTES"),
            set_key("targets[0].inputs[0].data", {"generator": "npy", "path": "x.npy"}),
        ),
        "targets[0].inputs[0].data.generator",
        "npy data is not supported for BYTES inputs",
        id="npy-for-bytes",
    ),
    # shapes of load
    pytest.param(
        set_key("shape", {"kind": "burst", "base_users": 10, "burst_users": 10, "burst_length": "5s", "period": "20s"}),
        "shape.burst_users",
        "must be greater than base_users (10); got 10",
        id="burst-not-above-base",
    ),
    pytest.param(
        set_key("shape", {"kind": "burst", "base_users": 1, "burst_users": 10, "burst_length": "20s", "period": "20s"}),
        "shape.period",
        "must be longer than burst_length (20s); got 20s",
        id="period-not-above-burst",
    ),
    pytest.param(
        set_key("shape", {"kind": "ramp", "from_users": 4, "to_users": 4, "over": "10s"}),
        "shape.to_users",
        "must differ from from_users (4)",
        id="flat-ramp",
    ),
    pytest.param(
        set_key("shape", {"kind": "ramp", "from_users": 1, "to_users": 4, "over": "2m"}),
        "shape.over",
        "must not be longer than duration (1m); got 2m",
        id="ramp-longer-than-run",
    ),
    pytest.param(
        set_key("shape", {"kind": "stages", "stages": [{"duration": "40s", "users": 1}, {"duration": "30s", "users": 2}]}),
        "shape.stages",
        "the stages last 1m10s in total, longer than duration (1m)",
        id="stages-exceed-duration",
    ),
    pytest.param(set_key("shape", {"kind": "stages", "stages": []}), "shape.stages", "must not be empty", id="no-stages"),
]


@pytest.mark.parametrize(("edit", "key_path", "message"), MALFORMED)
def test_malformed_scenario_is_reported_at_its_key(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], key_path: str, message: str
) -> None:
    data = valid_scenario()
    edit(data)
    path = write_scenario(tmp_path, data)

    problems = problems_of(path)

    assert [(p.key_path, message in p.message) for p in problems] == [(key_path, True)], problems
    assert str(problems[0]) == f"{path}: {key_path}: {problems[0].message}"
    assert "https://errors.pydantic.dev" not in problems[0].message
    assert "Input should be" not in problems[0].message


@pytest.mark.parametrize(
    ("written", "message"), [(0, "must be longer than 0s; got 0s"), ("0s", "must be longer than 0s; got '0s'")]
)
def test_a_duration_out_of_range_is_quoted_as_written(tmp_path: Path, written: object, message: str) -> None:
    data = valid_scenario()
    set_key("duration", written)(data)

    assert [(p.key_path, p.message) for p in problems_of(write_scenario(tmp_path, data))] == [("duration", message)]


def test_npy_data_must_match_the_dtype_and_shape(tmp_path: Path) -> None:
    np.save(tmp_path / "wrong_shape.npy", np.zeros((3, 64, 64), dtype=np.float32))
    np.save(tmp_path / "wrong_dtype.npy", np.zeros((3, 32, 32), dtype=np.float64))
    data = valid_scenario()
    set_key("targets[0].inputs[0].data", {"generator": "npy", "path": "wrong_shape.npy"})(data)
    set_key("targets[1].inputs[0].data", {"generator": "npy", "path": "wrong_dtype.npy"})(data)

    problems = problems_of(write_scenario(tmp_path, data))

    assert [(p.key_path, p.message) for p in problems] == [
        (
            "targets[0].inputs[0].data.path",
            "wrong_shape.npy has shape [3, 64, 64]; expected [1, 3, 32, 32] (batch_size x shape) or [3, 32, 32]",
        ),
        ("targets[1].inputs[0].data.path", "wrong_dtype.npy holds float64 values; expected float32 for FP32"),
    ]


# --- files that are not scenarios at all -------------------------------------------------------

RAW_FILES = [
    pytest.param(b"name: x\ntargets: [\n  - a\n", "invalid YAML at line", id="yaml-syntax-error"),
    pytest.param(b"name: x\n  bad: indent\n", "invalid YAML at line 2, column", id="bad-indentation"),
    pytest.param(b"", "the file is empty", id="empty-file"),
    pytest.param(b"# only a comment\n", "the file is empty", id="only-comments"),
    pytest.param(b"- name: x\n- name: y\n", "expected a mapping of scenario keys at the top level; got a list", id="list-at-top"),
    pytest.param(
        b"just a string\n", "expected a mapping of scenario keys at the top level; got 'just a string'", id="string-at-top"
    ),
    pytest.param(b"name: \xff\xfe\n", "not UTF-8 text (byte 0xff at offset 6)", id="not-utf8"),
    pytest.param(b"a: 1\n---\nb: 2\n", "expected a single document", id="two-documents"),
]


@pytest.mark.parametrize(("content", "message"), RAW_FILES)
def test_a_file_that_is_not_a_scenario_gives_one_problem(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)

    problems = problems_of(path)

    assert len(problems) == 1 and problems[0].file == str(path)
    assert message in problems[0].message, problems[0]


def test_a_missing_file_and_a_directory_are_problems_too(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "nope.yaml")[0].message == "no such file"
    assert "is a directory" in problems_of(tmp_path)[0].message


def test_duplicate_keys_are_not_silently_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("name: a\nduration: 60s\nduration: 30s\n")

    problems = problems_of(path)

    assert [(p.key_path, p.message) for p in problems] == [("duration", "duplicate key (line 3; first at line 2)")]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    data = valid_scenario()
    set_key("duration", "soon")(data)
    set_key("targets[0].timout", "5s")(data)
    set_key("targets[0].inputs[0].dtype", "FP8")(data)
    set_key("targets[1].address", "http://127.0.0.1:0")(data)
    set_key("shape.users", 0)(data)

    problems = problems_of(write_scenario(tmp_path, data))

    assert [p.key_path for p in problems] == [
        "duration",
        "targets[0].inputs[0].dtype",
        "targets[0].timout",
        "targets[1].address",
        "shape.users",
    ]


# --- never anything but ScenarioError -----------------------------------------------------------


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    scalars: list[Any] = [None, True, 0, -1, 1, 2.5, float("inf"), "", "x", "60s", "FP32", "steady", [3, 32, 32], {}, []]
    if depth > 2 or rng.random() < 0.6:
        return rng.choice(scalars)
    if rng.random() < 0.5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["name", "kind", "shape", "data", "users", "stages", "inputs", "x", 1]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _all_paths(node: Any, prefix: str = "") -> list[str]:
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _all_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths += _all_paths(value, f"{prefix}[{index}]")
    return paths


def test_arbitrary_values_anywhere_only_give_scenario_errors(tmp_path: Path) -> None:
    rng = random.Random(1234)
    paths = _all_paths(valid_scenario())
    for _ in range(300):
        data = valid_scenario()
        for path in rng.sample(paths, 2):
            with contextlib.suppress(KeyError, IndexError, TypeError):  # an earlier change removed the parent
                set_key(path, _random_value(rng))(data)
        try:
            scenario_from_dict(data, source_path=tmp_path / "fuzz.yaml")
        except ScenarioError as error:
            assert error.problems and all(p.key_path or p.message for p in error.problems)


@pytest.mark.parametrize(
    "text",
    [
        "a: &x [*x]\n",
        "[" * 5000,
        "? [a, b]\n: 1\n",
        "name: !!python/object:os.system x\n",
        "{1: 2, null: 3}\n",
        "duration: 2020-01-01\n",
    ],
    ids=["recursive-alias", "deep-nesting", "complex-key", "python-tag", "non-string-keys", "date"],
)
def test_odd_yaml_only_gives_scenario_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    assert problems_of(path)


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ({"kind": "steady", "users": 1}, "shape.users: 1 users for 2 targets"),
        ({"kind": "ramp", "from_users": 1, "to_users": 0, "over": "10s"}, "shape.from_users: 1 users for 2 targets"),
        (
            {"kind": "stages", "stages": [{"duration": "5s", "users": 1}, {"duration": "5s", "users": 0}]},
            "shape.stages[0].users: 1 users for 2 targets",
        ),
        ({"kind": "poisson", "rate": 10, "max_in_flight": 1}, "shape.max_in_flight: 1 senders for 2 targets"),
        ({"kind": "steady", "users": 2}, None),
        ({"kind": "ramp", "from_users": 0, "to_users": 2, "over": "10s"}, None),
        ({"kind": "burst", "base_users": 1, "burst_users": 2, "burst_length": "2s", "period": "10s"}, None),
    ],
    ids=lambda value: value.get("kind") if isinstance(value, dict) else value,
)
def test_a_run_with_fewer_users_than_targets_is_refused_at_its_start(shape: dict[str, Any], problem: str | None) -> None:
    """Locust shares the users among the targets by weight, in whole users: 2 targets and 1 user sent
    to one target only. The file itself stays valid (a sweep picks one of its targets)."""
    from inferload.scenario.schema import idle_targets_problem

    scenario = scenario_from_dict({**valid_scenario(), "shape": shape})
    found = idle_targets_problem(scenario)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found
        assert found.endswith("so 1 would never send; give at least 2")
