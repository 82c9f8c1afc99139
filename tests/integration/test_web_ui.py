"""The scenario runs from Locust's web UI too: start from the UI's API, watch stats, stop, results."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.support.locust_runner import locust_command, python_env
from tests.support.ports import free_port
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.system_tools import HEADLESS_CHROMIUM, REPO
from tests.support.waiting import wait_until


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def web_locust(local_servers, tmp_path):
    scenario = write_scenario(
        tmp_path,
        {
            "name": "web-ui",
            "duration": "60s",
            "targets": [tiny_target("triton-tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")],
            "shape": {"kind": "steady", "users": 2},
        },
    )
    port = free_port()
    results = tmp_path / "results"
    process = subprocess.Popen(
        locust_command(scenario, "--web-host", "127.0.0.1", "--web-port", str(port), "--results-dir", str(results)),
        cwd=REPO,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", process, results
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def rendered_page(url: str, tmp_path) -> str:
    """The page as headless Chromium renders it (after its scripts ran)."""
    done = subprocess.run(
        [
            *HEADLESS_CHROMIUM,
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--virtual-time-budget=8000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_run_started_and_stopped_from_the_web_ui_measures_and_writes_results(web_locust, tmp_path):
    base, process, results = web_locust
    wait_until(lambda: urllib.request.urlopen(base + "/", timeout=2).status == 200, 30, "the web UI", interval_s=0.3)

    form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()
    with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=5) as response:
        assert json.loads(response.read())["success"] is True

    def target_requests():
        stats = get_json(base + "/stats/requests")
        return next((s["num_requests"] for s in stats["stats"] if s["name"] == "triton-tiny" and s["num_requests"] > 50), None)

    assert wait_until(target_requests, 30, "requests in the UI's stats", interval_s=0.3) > 50
    page = rendered_page(base + "/", tmp_path)
    assert "triton-tiny" in page and "gRPC" in page  # the browser shows our target in Locust's table
    urllib.request.urlopen(urllib.request.Request(base + "/stop", data=b"", method="POST"), timeout=5).read()
    process.send_signal(signal.SIGTERM)  # quitting writes the results, as Ctrl+C would
    output, _ = process.communicate(timeout=30)

    summary = json.loads((results / "summary.json").read_text())
    assert summary["targets"]["triton-tiny"]["requests"] > 50, output
    assert summary["targets"]["triton-tiny"]["failures"] == 0
