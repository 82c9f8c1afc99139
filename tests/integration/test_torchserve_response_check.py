"""``response_check`` against a real TorchServe whose handler answers a bare number (as TorchServe's
MNIST example does): the default ``status`` check counts every answer a success; ``shape`` fails
every request with one message that says what came instead.

The handler (tests/support/torchserve_handler.py) is archived with torch-model-archiver around the
sample ``tiny`` TorchScript model and served by a TorchServe of the tests' own (the session fixture
``bare_number_server`` in conftest.py).
"""

from __future__ import annotations

from pathlib import Path

from inferload.local.servers.ports import ServerPorts
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

MODEL = "bare_number"


def bare_number_scenario(folder: Path, ports: ServerPorts, **keys: object) -> Path:
    target = tiny_target(
        "bare",
        "torchserve-rest",
        f"http://127.0.0.1:{ports.ts_inference}",
        batch_size=4,
        management_url=f"http://127.0.0.1:{ports.ts_management}",
        metrics_url=f"http://127.0.0.1:{ports.ts_metrics}/metrics",
        **keys,
    )
    target["model"] = MODEL  # tiny_target names the sample model; the archive here wraps the same model.pt
    return write_scenario(
        folder, {"name": "bare-number", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    )


def test_the_default_status_check_takes_a_bare_number_answer(bare_number_server: ServerPorts, tmp_path: Path) -> None:
    run = run_locust(bare_number_scenario(tmp_path, bare_number_server), tmp_path)

    assert run.returncode == 0, run.output
    target = run.summary["targets"]["bare"]
    assert target["requests"] > 5 and target["failures"] == 0, target
    assert run.failures_csv == []


def test_the_shape_check_fails_every_request_saying_what_came(bare_number_server: ServerPorts, tmp_path: Path) -> None:
    run = run_locust(bare_number_scenario(tmp_path, bare_number_server, response_check="shape"), tmp_path)

    assert run.returncode == 1, run.output
    target = run.summary["targets"]["bare"]
    assert target["requests"] > 5 and target["failures"] == target["requests"], target
    errors = {row["Error"] for row in run.failures_csv}
    assert len(errors) == 1 and "bad output: expected a JSON list of 4 items; got a number" in errors.pop(), run.failures_csv


def test_when_every_request_fails_torchserve_times_are_null_with_the_reason(
    bare_number_server: ServerPorts, tmp_path: Path
) -> None:
    """15 floats per item cannot be read as the handler's rows of 16: every request fails in the handler
    (HTTP 500). TorchServe counts them in ts_inference_requests_total but adds no latency for them, so
    queue and request time are no measurement (before: 0.0 ms, as if the server were instant)."""
    scenario = bare_number_scenario(tmp_path, bare_number_server)
    text = scenario.read_text().replace("- 16", "- 15")
    assert text != scenario.read_text()
    scenario.write_text(text)

    run = run_locust(scenario, tmp_path)

    assert run.returncode == 1, run.output
    target = run.summary["targets"]["bare"]
    assert target["requests"] > 5 and target["failures"] == target["requests"], target
    side = target["server_side"]
    assert side["queue_ms_avg"] is None and side["request_ms_avg"] is None, side
    for figure in ("queue_ms_avg", "request_ms_avg"):
        assert "no request succeeded in the interval: TorchServe times successful requests only" in side["unknown"][figure]
    assert target["residual_ms"] is None
