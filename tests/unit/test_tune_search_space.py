"""`inferload tune`'s search space without a server: the Triton max_batch_size and preferred batch
sizes it searches, the options that set them (bad values named), and how a candidate becomes the
config override loaded through Triton's model-control API and is checked against what Triton reports."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psutil
import pytest

from inferload.cli import build_parser
from inferload.errors import InferloadError
from inferload.run import server_changes
from inferload.run.server_changes import ServerJournal
from inferload.tune import server_config
from inferload.tune.server_config import (
    ChangesRefused,
    ConfigError,
    SearchSpace,
    TorchServeCandidate,
    TritonCandidate,
    TritonConfigurator,
)
from inferload.tune.tune import config_fragment
from inferload.tune.tune_cli import search_space


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
        (["--triton-max-batch-sizes", "0"], "--triton-max-batch-sizes: expected numbers from 1 to 65,536; got '0'"),
        (["--triton-max-batch-sizes", "8,x"], "--triton-max-batch-sizes: expected whole numbers separated by commas"),
        (["--triton-preferred-batch-sizes", "0"], "--triton-preferred-batch-sizes: expected numbers from 1 to"),
        (["--triton-preferred-batch-sizes", "8,4"], "--triton-preferred-batch-sizes: expected increasing sizes; got '8,4'"),
        (
            ["--triton-max-batch-sizes", "4,16", "--triton-preferred-batch-sizes", "8"],
            "--triton-preferred-batch-sizes: 8 is above --triton-max-batch-sizes 4",
        ),
        (["--triton-instances", "0"], "--triton-instances: expected numbers from 1 to"),
        (["--triton-delays-us", "-5"], "--triton-delays-us: expected numbers from 0 to"),
        (["--torchserve-batch-sizes", "0"], "--torchserve-batch-sizes: expected numbers from 1 to"),
        (["--torchserve-workers", "0,2"], "--torchserve-workers: expected numbers from 1 to"),
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
        self.repository = json.loads(json.dumps(config))  # its config.pbtxt
        self.loaded: list[dict[str, Any]] = []
        self.drop = drop  # a key of dynamic_batching/top level this server ignores on load
        self.unloaded = 0

    def http_json(self, method: str, url: str, body: bytes | None = None, headers: Any = None, timeout: float = 30.0) -> Any:
        """`server_changes.http_json`'s form: (status, answer); unload, and a load without a config, read the repository."""
        if url.endswith("/unload"):
            self.unloaded += 1
            return 200, {}
        if url.endswith("/load") and "config" not in json.loads(body or b"{}").get("parameters", {}):
            self.config = json.loads(json.dumps(self.repository))
            return 200, {}
        return 200, self(method, url, body, headers, timeout)

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
    monkeypatch.setattr(server_changes, "http_json", triton.http_json)
    configurator = TritonConfigurator("http://t:8000", "cnn")
    applied = configurator.apply(TritonCandidate(True, 500, 2, (2, 4), max_batch_size=8))
    assert triton.loaded[-1]["max_batch_size"] == 8
    assert triton.loaded[-1]["dynamic_batching"] == {"max_queue_delay_microseconds": 500, "preferred_batch_size": [2, 4]}
    assert applied["max_batch_size"] == 8 and applied["preferred_batch_size"] == [2, 4] and applied["instance_count"] == 2
    configurator.restore()
    assert triton.config == ORIGINAL  # the model's own max_batch_size back
    assert triton.unloaded == 1 and len(triton.loaded) == 1  # from its config.pbtxt: no override left loaded


def test_a_server_that_does_not_run_the_asked_max_batch_size_stops_the_tune(monkeypatch):
    monkeypatch.setattr(server_config, "_call", FakeTriton(dict(ORIGINAL), drop="max_batch_size"))
    with pytest.raises(ConfigError) as error:
        TritonConfigurator("http://t:8000", "cnn").apply(TritonCandidate(True, 500, 1, max_batch_size=8))
    assert "Triton loaded max_batch_size=8 for 'cnn' but its config then says max_batch_size=0" in str(error.value)


def test_a_model_that_sets_its_own_dynamic_batching_is_said_so(monkeypatch):
    """A Python model's auto_complete_config turns dynamic batching back on (python_backend's batch_model)."""
    batching = {**ORIGINAL, "dynamic_batching": {"max_queue_delay_microseconds": 0}}

    class AutoComplete(FakeTriton):
        def __call__(self, method: str, url: str, body: bytes | None = None, *args: Any, **kwargs: Any) -> Any:
            answer = super().__call__(method, url, body, *args, **kwargs)
            self.config.setdefault("dynamic_batching", {"max_queue_delay_microseconds": 0})
            return answer

    monkeypatch.setattr(server_config, "_call", AutoComplete(batching))
    with pytest.raises(ConfigError) as error:
        TritonConfigurator("http://t:8000", "cnn").apply(TritonCandidate(False))
    message = str(error.value)
    assert message.startswith("Triton loaded dynamic_batching=False for 'cnn' but its config then says dynamic_batching=True")
    assert "auto_complete_config" in message


def test_an_ensemble_is_refused_before_anything_is_loaded_naming_its_steps(monkeypatch):
    ensemble = {
        "name": "pipeline",
        "platform": "ensemble",
        "max_batch_size": 0,
        "ensemble_scheduling": {"step": [{"model_name": "preprocess"}, {"model_name": "resnet50"}]},
    }
    triton = FakeTriton(ensemble)
    monkeypatch.setattr(server_config, "_call", triton)
    configurator = TritonConfigurator("http://t:8000", "pipeline")
    with pytest.raises(server_config.ChangesRefused) as error:
        configurator.apply(TritonCandidate(False))
    assert "model 'pipeline' is an ensemble (platform: ensemble)" in str(error.value)
    assert "Tune its steps instead: preprocess, resnet50" in str(error.value)
    configurator.restore()
    assert triton.loaded == []  # nothing loaded, nothing to put back


class SlowWorkersTorchServe:
    """A TorchServe management API whose registration answers before its workers are READY: the
    describe-model after it says no worker for ``not_ready_reads`` reads (seen under load)."""

    def __init__(self, not_ready_reads: int) -> None:
        self.not_ready_reads = not_ready_reads
        self.registered: dict[str, Any] | None = None

    def __call__(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "POST":
            self.registered = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
            return {"status": "registered"}
        if method == "DELETE":
            return {"status": "unregistered"}
        described: dict[str, Any] = {"modelName": "m", "modelVersion": "1.0", "modelUrl": "m.mar", "responseTimeout": 120}
        if self.registered is None:
            return [{**described, "batchSize": 1, "maxBatchDelay": 100, "workers": [{"status": "READY"}]}]
        workers = int(self.registered["initial_workers"])
        ready = self.not_ready_reads <= 0
        self.not_ready_reads -= 1
        batching = {"batchSize": int(self.registered["batch_size"]), "maxBatchDelay": int(self.registered["max_batch_delay"])}
        return [{**described, **batching, "workers": [{"status": "READY"}] * workers if ready else []}]


def test_a_torchserve_registration_is_read_back_once_its_workers_are_ready(monkeypatch):
    server = SlowWorkersTorchServe(not_ready_reads=3)
    monkeypatch.setattr(server_config, "_call", server)
    now = [0.0]
    applied = server_config.TorchServeConfigurator("http://ts:9081", "m").apply(
        TorchServeCandidate(8, 10, 1), clock=lambda: now[0], pause=lambda s: now.__setitem__(0, now[0] + s)
    )
    assert applied == {"batch_size": 8, "max_batch_delay_ms": 10, "workers": 1}
    assert now[0] == 3 * server_config.WORKERS_POLL_S  # it waited for the workers, no longer


def test_a_torchserve_whose_workers_never_come_up_is_refused_after_the_wait(monkeypatch):
    monkeypatch.setattr(server_config, "_call", SlowWorkersTorchServe(not_ready_reads=10_000))
    now = [0.0]
    with pytest.raises(ConfigError, match="with workers=1 but describe-model then says workers=0"):
        server_config.TorchServeConfigurator("http://ts:9081", "m").apply(
            TorchServeCandidate(8, 10, 1), clock=lambda: now[0], pause=lambda s: now.__setitem__(0, now[0] + s)
        )
    assert server_config.WORKERS_READY_S <= now[0] < server_config.WORKERS_READY_S + 1


def test_torchserve_refusals_say_what_to_do(monkeypatch):
    def refuse(status: int, kind: str, message: str) -> Any:
        def call(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method == "GET" and status != 400:
                return [{"modelName": "m", "modelVersion": "1.0", "modelUrl": "m.mar", "responseTimeout": 300}]
            body = json.dumps({"code": status, "type": kind, "message": message})
            raise server_config.HttpRefusal(method, url, status, body)

        return call

    model_api_off = refuse(405, "MethodNotAllowedException", "Requested method is not allowed, please refer to API document.")
    monkeypatch.setattr(server_config, "_call", model_api_off)
    configurator = server_config.TorchServeConfigurator("http://ts:9081", "m")
    with pytest.raises(server_config.ChangesRefused) as error:
        configurator.apply(TorchServeCandidate())
    assert str(error.value).startswith(
        "TorchServe at http://ts:9081 refuses to change model 'm' (DELETE /models/m/1.0 answered HTTP 405"
        " MethodNotAllowedException: Requested method is not allowed"
    )
    assert "enable_model_api=true" in str(error.value)
    configurator.restore()  # nothing was unregistered: nothing to register again
    monkeypatch.setattr(server_config, "_call", refuse(400, "InvalidKeyException", "Token Authorization failed."))
    with pytest.raises(server_config.ChangesRefused) as error:
        server_config.TorchServeConfigurator("http://ts:9081", "m").apply(TorchServeCandidate())
    assert "wants its management key (GET /models/m answered HTTP 400 InvalidKeyException" in str(error.value)
    assert "token_file" in str(error.value)


def test_the_torchserve_fragment_keeps_the_response_timeout_and_the_real_management_address():
    settings = TorchServeCandidate(8, 10, 2).settings()
    fragment = config_fragment("torchserve", settings, "cnn", "http://10.0.0.5:9081", 300, management_key=True)
    entry, register = fragment.splitlines()
    assert '"responseTimeout":300' in entry and '"batchSize":8' in entry
    assert (
        "curl -H 'Authorization: Bearer <management key of key_file.json>' -X DELETE 'http://10.0.0.5:9081/models/cnn'"
        in register
    )
    assert (
        "'http://10.0.0.5:9081/models?url=cnn.mar&batch_size=8&max_batch_delay=10&initial_workers=2&response_timeout=300"
        in register
    )
    assert "8081" not in fragment


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


def test_a_server_that_refuses_every_candidate_ends_its_search_once_and_the_tune_exits_2(tmp_path):
    from pathlib import Path

    from inferload.measure.windows import StabilityRule
    from inferload.tune.stop_rules import StopRules
    from inferload.tune.sweep import SweepSettings
    from inferload.tune.tune import ServerTune, Tune, TuneSettings

    class Refusing:
        changed = False
        restored = 0

        def apply(self, candidate: Any) -> dict[str, Any]:
            raise server_config.ChangesRefused("TorchServe at http://ts:8081 refuses to change model 'm' (...)")

        def restore(self) -> None:
            self.restored += 1

        def fragment_options(self) -> dict[str, Any]:
            return {}

    lines: list[str] = []
    sweep = SweepSettings(Path(tmp_path) / "s.yaml", Path(tmp_path), StabilityRule(3, 10, 10), StopRules(slo={}))
    settings = TuneSettings(Path(tmp_path) / "s.yaml", Path(tmp_path), sweep=sweep, space=SearchSpace(), printer=lines.append)
    refusing = Refusing()
    tuned = Tune(settings, [ServerTune("torchserve", "t", "m", refusing)])
    assert tuned.run() == 2
    assert tuned.results == [] and "refuses to change model 'm'" in tuned.server_stops["torchserve"]
    assert sum("no candidate can be applied" in line for line in lines) == 1, lines
    assert not any("did not beat" in line for line in lines)
    assert refusing.restored == 1  # it decides itself whether anything is to be put back


def test_a_stage_with_nothing_measured_says_so_instead_of_did_not_beat():
    from inferload.tune.tune import CandidateResult, stage_outcome

    best = CandidateResult("triton", "no batching, 1 instance", {}, {}, None, None)
    refused = CandidateResult("triton", "batching 100 us, 1 instance", {}, None, None, None, error="HTTP 400")
    no_rate = CandidateResult("triton", "batching 1000 us, 1 instance", {}, {}, None, None)
    assert stage_outcome("batching", [refused, no_rate], best, 5) == (
        "batching: no candidate measured (1 refused by the server, 1 passed the SLO at no rate)"
    )
    cut = CandidateResult("triton", "batching 100 us, 1 instance", {}, {}, None, None, error="interrupted")
    assert stage_outcome("batching", [cut], best, 5) == "batching: no candidate measured (1 interrupted)"
    measured = CandidateResult("triton", "no batching, 1 instance", {}, {}, 200.0, 250.0)
    slower = CandidateResult("triton", "batching 100 us, 1 instance", {}, {}, 190.0, 250.0)
    assert stage_outcome("batching", [slower], measured, 5) == (
        "batching did not beat the best (no batching, 1 instance: 200 req/s) beyond the noise and by 5 %"
    )


def test_a_journal_held_by_another_inferload_refuses_every_candidate_and_blames_no_server(tmp_path: Path):
    """The journal cannot take the original (another running inferload changes the model): the
    search of that server ends at once, in the journal's words, and nothing on the server changed."""
    journal = ServerJournal(tmp_path / "journal")
    entry = journal.record("triton-model-config", "http://127.0.0.1:1", "cnn", {"max_batch_size": 8})
    parent = entry.owner.model_copy(update={"pid": os.getppid(), "started": psutil.Process(os.getppid()).create_time()})
    journal.path_of(entry.kind, entry.server, entry.model).write_text(
        entry.model_copy(update={"owner": parent}).model_dump_json()
    )
    configurator = TritonConfigurator("http://127.0.0.1:1", "cnn", original={"max_batch_size": 8}, journal=journal)
    with pytest.raises(ChangesRefused, match=f"being changed by another inferload.*pid {os.getppid()}.*; nothing was changed"):
        configurator.apply(TritonCandidate(batching=True, max_queue_delay_us=100))
    assert not configurator.changed and configurator.entry is None
