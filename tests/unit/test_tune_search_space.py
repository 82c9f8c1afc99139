"""`inferload tune`'s search space without a server: the Triton max_batch_size and preferred batch
sizes it searches, the options that set them (bad values named), and how a candidate becomes the
config override loaded through Triton's model-control API and is checked against what Triton reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferload.cli import build_parser
from inferload.errors import InferloadError
from inferload.tune import server_config
from inferload.tune.candidates import SearchSpace, TritonCandidate
from inferload.tune.server_config import ConfigError, TritonConfigurator
from inferload.tune.tune_cli import search_space
from inferload.tune.tune_report import config_fragment


def tune_args(*options: str) -> Any:
    return build_parser().parse_args(["tune", "s.yaml", "--slo", "p99_ms=50", *options])


def test_the_batching_stage_tries_each_max_batch_size_with_each_delay():
    space = SearchSpace(triton_delays_us=(100, 1000), triton_max_batch_sizes=(8, 32), triton_preferred=(4, 8))
    tried = space.batching("triton", space.baseline("triton"))
    assert [(c.max_batch_size, c.max_queue_delay_us) for c in tried] == [(8, 100), (8, 1000), (32, 100), (32, 1000)]
    assert tried[0].name == "batching 100 us, max batch 8, preferred 4/8, 1 instance"
    assert tried[0].settings()["max_batch_size"] == 8 and tried[0].settings()["preferred_batch_size"] == [4, 8]
    # scale-out keeps the best's batch sizes
    scaled = space.scale_out(tried[2])
    assert [(c.max_batch_size, c.instances) for c in scaled] == [(32, 2)]


def test_without_max_batch_sizes_the_models_own_is_kept():
    space = SearchSpace(triton_delays_us=(100,))
    (candidate,) = space.batching("triton", space.baseline("triton"))
    assert candidate.settings()["max_batch_size"] is None and "max batch" not in candidate.name
    assert space.baseline("triton").settings()["max_batch_size"] is None  # no batching: never changed


def test_the_options_set_the_search_space():
    space = search_space(tune_args("--triton-max-batch-sizes", "8,16", "--triton-preferred-batch-sizes", "2,4"))
    assert space.triton_max_batch_sizes == (8, 16) and space.triton_preferred == (2, 4)
    default = search_space(tune_args())
    assert default.triton_max_batch_sizes == () and default.triton_preferred == () and default.triton_delays_us == (100, 1000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--triton-max-batch-sizes", "0"], "--triton-max-batch-sizes: expected numbers of 1 or more; got '0'"),
        (["--triton-max-batch-sizes", "8,x"], "--triton-max-batch-sizes: expected whole numbers separated by commas"),
        (["--triton-preferred-batch-sizes", "0"], "--triton-preferred-batch-sizes: expected numbers of 1 or more"),
        (["--triton-preferred-batch-sizes", "8,4"], "--triton-preferred-batch-sizes: expected increasing sizes; got '8,4'"),
        (
            ["--triton-max-batch-sizes", "4,16", "--triton-preferred-batch-sizes", "8"],
            "--triton-preferred-batch-sizes: 8 is above --triton-max-batch-sizes 4",
        ),
        (["--triton-instances", "0"], "--triton-instances: expected numbers of 1 or more"),
        (["--triton-delays-us", "-5"], "--triton-delays-us: expected numbers of 0 or more"),
        (["--torchserve-batch-sizes", "0"], "--torchserve-batch-sizes: expected numbers of 1 or more"),
        (["--torchserve-workers", "0,2"], "--torchserve-workers: expected numbers of 1 or more"),
        (["--torchserve-delays-ms", "5,,20"], "--torchserve-delays-ms: expected whole numbers"),
    ],
)
def test_bad_search_space_options_are_refused_naming_the_option(options: list[str], message: str):
    with pytest.raises(InferloadError) as error:
        search_space(tune_args(*options))
    assert message in str(error.value)


class FakeTriton:
    """Triton's model config API as server_config calls it: GET the config, POST a load with an override."""

    def __init__(self, config: dict[str, Any], drop: str | None = None) -> None:
        self.config = config
        self.loaded: list[dict[str, Any]] = []
        self.drop = drop  # a key of dynamic_batching/top level this server ignores on load

    def __call__(self, method: str, url: str, body: bytes | None = None, headers: Any = None, timeout: float = 30.0) -> Any:
        if method == "GET" and url.endswith("/config"):
            return json.loads(json.dumps(self.config))
        assert method == "POST" and url.endswith("/v2/repository/models/cnn/load"), (method, url)
        override = json.loads(json.loads(body or b"{}")["parameters"]["config"])
        self.loaded.append(override)
        if self.drop:
            override.pop(self.drop, None)
            override.get("dynamic_batching", {}).pop(self.drop, None)
        self.config = override
        return {}


ORIGINAL = {"name": "cnn", "max_batch_size": 32, "instance_group": [{"kind": "KIND_CPU", "count": 1}]}


def test_a_candidates_max_and_preferred_batch_sizes_are_loaded_and_read_back(monkeypatch):
    triton = FakeTriton(dict(ORIGINAL))
    monkeypatch.setattr(server_config, "_call", triton)
    configurator = TritonConfigurator("http://t:8000", "cnn")
    applied = configurator.apply(TritonCandidate(True, 500, 2, (2, 4), max_batch_size=8))
    assert triton.loaded[-1]["max_batch_size"] == 8
    assert triton.loaded[-1]["dynamic_batching"] == {"max_queue_delay_microseconds": 500, "preferred_batch_size": [2, 4]}
    assert applied["max_batch_size"] == 8 and applied["preferred_batch_size"] == [2, 4] and applied["instance_count"] == 2
    configurator.restore()
    assert triton.config == ORIGINAL  # the model's own max_batch_size back


def test_a_server_that_does_not_run_the_asked_max_batch_size_stops_the_tune(monkeypatch):
    monkeypatch.setattr(server_config, "_call", FakeTriton(dict(ORIGINAL), drop="max_batch_size"))
    with pytest.raises(ConfigError) as error:
        TritonConfigurator("http://t:8000", "cnn").apply(TritonCandidate(True, 500, 1, max_batch_size=8))
    assert "Triton runs max_batch_size=0 for 'cnn'; 8 was loaded" in str(error.value)


def test_preferred_sizes_above_the_models_own_max_batch_size_are_refused_naming_the_option(monkeypatch):
    triton = FakeTriton({**ORIGINAL, "max_batch_size": 4})
    monkeypatch.setattr(server_config, "_call", triton)
    with pytest.raises(ConfigError) as error:
        TritonConfigurator("http://t:8000", "cnn").apply(TritonCandidate(True, 500, 1, (2, 8)))
    assert "--triton-preferred-batch-sizes: 8 is above the max_batch_size 4 of model 'cnn'" in str(error.value)
    assert triton.loaded == []  # nothing was loaded


def test_the_winners_fragment_names_its_max_batch_size():
    settings = TritonCandidate(True, 500, 2, (4,), max_batch_size=16).settings()
    fragment = config_fragment("triton", settings, "cnn")
    assert fragment.splitlines()[0] == "max_batch_size: 16"
    assert "preferred_batch_size: [ 4 ]" in fragment and "count: 2" in fragment
    assert "max_batch_size" not in config_fragment("triton", TritonCandidate(False).settings(), "cnn")
