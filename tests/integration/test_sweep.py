"""`inferload sweep`: it stops on an SLO breach (against the reference server, whose scripted slots
make each step's latency known) and says when the load generator is the limit (the real Triton, the
client's CPU measured). The capacity search (`--find-max-rps`: its interval, binding constraint,
verification runs and files) is held against a server whose truth is known:
tests/integration/test_capacity.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import inferload
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import tiny_target, write_scenario

#: the reference server's slots and hold: one user's calls take one hold; 32 users queue 16 rounds deep
SLOTS, HOLD_MS = 2, 10.0
FAST = ["--window", "1s", "--warmup", "1s", "--stable-windows", "3", "--tolerance", "25", "--max-windows", "5"]


def sweep_scenario(folder: Path, target: dict[str, Any]) -> Path:
    return write_scenario(
        folder, {"name": "sweep", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )


def sweep(scenario: Path, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = inferload("sweep", str(scenario), "--out", str(out), *FAST, *args, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "sweep.json").read_text()), done.stdout


def test_a_sweep_steps_up_the_users_and_stops_at_the_first_slo_breach(tmp_path):
    # one user's p99 is one hold (10 ms); 32 users on 2 slots wait about 15 holds more (~160 ms)
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        scenario = sweep_scenario(tmp_path, reference_target("reference", "triton-grpc", server.grpc_address, timeout="10s"))
        result, output = sweep(scenario, tmp_path / "out", "--users", "1,32", "--slo", "p99_ms=30")
    first, last = result["steps"][0], result["steps"][-1]
    assert result["stopped"]["rule"] == "slo", (result["stopped"], result["steps"])
    assert len(result["steps"]) == 2 and last["level"] == 32
    assert first["p99_ms"] <= 30 < last["p99_ms"]
    assert f"p99_ms {last['p99_ms']:g} ms > 30 ms" in result["stopped"]["reason"]
    assert result["best"]["level"] == 1  # the only step within the SLO
    assert "[step 2/2] 32 users" in output and "stopped: slo" in output
    rows = (tmp_path / "out" / "sweep.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("step,level,")
    page = (tmp_path / "out" / "sweep.html").read_text()
    assert "latency against load" in page and "Sweep of reference (users)" in page


def test_a_sweep_says_when_the_load_generator_is_the_limit(local_servers, tmp_path):
    """The client's CPU is measured per load-generating process over each step's steady part. On this
    2-core machine the local Triton saturates before one Locust process does, so the bound is set
    below what the process really uses at 16 users: the rule fires on the real measurement."""
    scenario = sweep_scenario(tmp_path, tiny_target("tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}"))
    result, output = sweep(scenario, tmp_path / "out", "--users", "16,32", "--max-client-cpu", "0.05")
    measured = result["steps"][0]["client_cpu_per_worker"]
    assert measured is not None and 0.05 <= measured <= 1.1
    assert result["stopped"]["rule"] == "generator", result["stopped"]
    assert f"the client used {measured:.2f} cores per load-generating process" in result["stopped"]["reason"]
    assert len(result["steps"]) == 1 and result["best"] is None  # a generator-bound step says nothing of the server
    assert "stopped: generator" in output
