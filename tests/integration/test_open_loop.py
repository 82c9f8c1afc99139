"""Open-loop runs against the real Triton: the rate is kept, and a stall shows instead of hiding.

Latency counts from the intended send time, so a stalled server shows as rising latency and,
once every sender is busy and the waiting queue is full, as counted unsent arrivals.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import threading
import time

import pytest
import requests

from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario


def test_a_poisson_run_achieves_its_rate_and_sends_every_arrival(local_servers, tmp_path):
    target = tiny_target("triton", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    scenario = write_scenario(
        tmp_path,
        {
            "name": "poisson",
            "duration": "32s",
            "warmup": "2s",
            "window": "1s",
            "targets": [target],
            "shape": {"kind": "poisson", "rate": 250, "max_in_flight": 16, "seed": 7},
        },
    )
    run = run_locust(scenario, tmp_path)

    assert run.returncode == 0, run.output
    figures = run.summary["targets"]["triton"]
    open_loop = figures["open_loop"]
    assert open_loop["configured_rps"] == 250
    assert open_loop["unsent"] == 0
    assert open_loop["achieved_ratio"] == pytest.approx(1.0, abs=0.02)
    assert figures["requests"] == pytest.approx(open_loop["arrivals"], abs=16)  # all sent, all answered
    assert open_loop["send_lag_ms"]["p99"] is not None
    # every 1 s window wholly inside the 32 s schedule had arrivals and sends (a last window that
    # starts as the run stops has neither, and may be there or not)
    rows = [r for r in csv.DictReader(io.StringIO(run.windows_csv)) if r["phase"] == "steady"]
    whole = [r for r in rows if float(r["elapsed_s"]) + 1 <= 32]
    assert len(whole) >= 25, rows
    assert all(r["target_rps"] and r["send_lag_p99_ms"] for r in whole), whole


def test_a_stalled_server_shows_as_rising_latency_and_unsent_arrivals(local_servers, tmp_path):
    target = tiny_target("triton", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}", timeout="20s")
    scenario = write_scenario(
        tmp_path,
        {
            "name": "stall",
            "duration": "12s",
            "warmup": "1s",
            "targets": [target],
            "shape": {"kind": "constant-rate", "rate": 100, "max_in_flight": 8, "max_queue": 20},
        },
    )
    triton_pid = local_servers.up_result["servers"]["triton"]["pid"]
    stats_url = f"http://127.0.0.1:{local_servers.ports.triton_http}/v2/models/tiny/stats"
    done = threading.Event()

    def served() -> int:
        return int(requests.get(stats_url, timeout=5).json()["model_stats"][0]["inference_stats"]["success"]["count"])

    def stall_triton() -> None:
        # stimulus: a 3 s stall once the run has sent ~3 s of its load (not at a fixed time after the
        # process started: a loaded machine can take longer than that to start Locust)
        before = served()
        while not done.is_set() and served() < before + 300:
            time.sleep(0.1)
        if done.is_set():
            return
        os.kill(triton_pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(triton_pid, signal.SIGCONT)

    stimulus = threading.Thread(target=stall_triton, daemon=True)
    stimulus.start()
    try:
        run = run_locust(scenario, tmp_path)
    finally:
        done.set()
        stimulus.join(timeout=10)
        os.kill(triton_pid, signal.SIGCONT)

    figures = run.summary["targets"]["triton"]
    open_loop = figures["open_loop"]
    # 3 s stalled at 100/s: 8 in flight + 20 waiting, the rest of ~300 arrivals could not be sent
    assert open_loop["unsent"] > 100, open_loop
    assert open_loop["arrivals"] == pytest.approx(1100, rel=0.03)  # the schedule itself kept going
    assert figures["latency_ms"]["max"] > 2000  # requests waited through the stall, and it shows
    assert figures["latency_ms"]["p99"] > 1000
    rows = [r for r in csv.DictReader(io.StringIO(run.windows_csv)) if r["unsent"] not in ("", "0")]
    assert rows, "the windows of the stall show their unsent arrivals"
