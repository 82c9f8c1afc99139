"""``bentoml-http`` against the real local BentoML service (bentoml from PyPI in its own venv,
the sample TorchScript models, adaptive batching on): a headless run with no failures and BentoML's
own figures, an API the service does not expose stopped at start (exit 2), cold start recorded,
and nothing left running after ``down``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferload.local.servers.bentoml_local import descendants
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, is_port_open
from inferload.local.servers.procs import is_alive
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario


@pytest.fixture(scope="module")
def bentoml_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServers, dict[str, Any]]]:
    servers = LocalServers(tmp_path_factory.mktemp("bentoml-state"), ServerPorts.free(), models=("tiny", "cnn"))
    try:
        started = servers.up(which=("bentoml",), timeout_s=600.0)  # the first use makes its venv
        yield servers, started
    finally:
        servers.down()


def scenario(folder: Path, servers: LocalServers, **keys: Any) -> Path:
    target = tiny_target("bento", "bentoml-http", f"http://127.0.0.1:{servers.ports.bentoml_http}", batch_size=2, **keys)
    data = {"name": "bento", "duration": "4s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": 4}}
    return write_scenario(folder, data)


def test_a_headless_run_has_no_failures_and_bentomls_own_figures(
    bentoml_service: tuple[LocalServers, dict[str, Any]], tmp_path: Path
) -> None:
    servers, started = bentoml_service
    entry = started["servers"]["bentoml"]
    assert entry["cold_start_s"] > 0 and set(entry["models_cold_start_s"]) == {"tiny", "cnn"}

    run = run_locust(scenario(tmp_path, servers, response_check="shape"), tmp_path)

    assert run.returncode == 0, run.output
    target = run.summary["targets"]["bento"]
    assert target["server"] == "bentoml" and target["protocol"] == "http"
    assert target["requests"] > 10 and target["failures"] == 0, target
    side = target["server_side"]
    assert side["request_ms_avg"] is not None and side["request_ms_avg"] > 0, side
    # 2 items per request, batched by BentoML with other requests' items; its batches may split a
    # request's items (CI once: 1.998), so more than one item per batch on average is the check
    assert side["avg_batch_size"] is not None and side["avg_batch_size"] > 1.5, side
    assert side["queue_ms_avg"] is None and "queue time" in side["unknown"]["queue_ms_avg"], side
    assert run.stats_json and run.stats_json[0]["total_content_length"] > 0  # the answers' real sizes


def test_an_api_the_service_does_not_expose_stops_the_run_at_start(
    bentoml_service: tuple[LocalServers, dict[str, Any]], tmp_path: Path
) -> None:
    servers, _ = bentoml_service
    path = scenario(tmp_path, servers)
    path.write_text(path.read_text().replace("model: tiny", "model: resnet"))

    run = run_locust(path, tmp_path)

    assert run.returncode == 2, run.output
    assert "does not expose API 'resnet' (POST /resnet); it exposes: cnn, identity, tiny" in run.output


def test_down_leaves_nothing_running(bentoml_service: tuple[LocalServers, dict[str, Any]]) -> None:
    """Last in this file: it stops the module's service (the fixture's own down is then a no-op)."""
    servers, _ = bentoml_service
    pid = servers.status()["servers"]["bentoml"]["pid"]
    workers = descendants(pid)
    assert workers, "BentoML runs its API in worker processes"

    servers.down()

    assert not is_port_open(servers.ports.bentoml_http)
    assert [p for p in [pid, *workers] if is_alive(p)] == []
