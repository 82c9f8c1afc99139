"""`inferload sweep` against the real Triton: it stops on an SLO breach, says when the load generator
is the limit, and a capacity search gives its answer with an interval, a binding constraint and
verification runs (its truth against a known server: tests/integration/test_capacity.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import inferload
from tests.support.scenario_factory import cnn_target, tiny_target, write_scenario

FAST = ["--window", "1s", "--warmup", "1s", "--stable-windows", "3", "--tolerance", "25", "--max-windows", "5"]


def sweep_scenario(folder: Path, address: str, shape: dict[str, Any], model: str = "tiny") -> Path:
    target = (tiny_target if model == "tiny" else cnn_target)(model, "triton-grpc", address)
    return write_scenario(folder, {"name": "sweep", "duration": "30s", "targets": [target], "shape": shape})


def sweep(scenario: Path, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = inferload("sweep", str(scenario), "--out", str(out), *FAST, *args, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "sweep.json").read_text()), done.stdout


def test_a_sweep_steps_up_the_users_and_stops_at_the_first_slo_breach(local_servers, tmp_path):
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    scenario = sweep_scenario(tmp_path, address, {"kind": "steady", "users": 1}, model="cnn")
    # the CNN keeps the server busy and the client light: one user gets a few ms; 32 users queue on
    # two cores (the server runs a few hundred req/s): tens of ms
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
    assert "latency against load" in page and "Sweep of cnn (users)" in page


def test_a_sweep_says_when_the_load_generator_is_the_limit(local_servers, tmp_path):
    """The client's CPU is measured per load-generating process over each step's steady part. On this
    2-core machine the local Triton saturates before one Locust process does, so the bound is set
    below what the process really uses at 16 users: the rule fires on the real measurement."""
    scenario = sweep_scenario(tmp_path, f"127.0.0.1:{local_servers.ports.triton_grpc}", {"kind": "steady", "users": 1})
    result, output = sweep(scenario, tmp_path / "out", "--users", "16,32", "--max-client-cpu", "0.05")
    measured = result["steps"][0]["client_cpu_per_worker"]
    assert measured is not None and 0.05 <= measured <= 1.1
    assert result["stopped"]["rule"] == "generator", result["stopped"]
    assert f"the client used {measured:.2f} cores per load-generating process" in result["stopped"]["reason"]
    assert len(result["steps"]) == 1 and result["best"] is None  # a generator-bound step says nothing of the server
    assert "stopped: generator" in output


def test_a_capacity_search_on_triton_gives_an_interval_a_binding_constraint_and_its_verification(local_servers, tmp_path):
    """The real Triton and the CNN, as a user runs it. The machine's noise moves the number (the truth
    here is unknown: tests/integration/test_capacity.py asserts the answer against the reference
    server's known capacity), so this checks what the answer is made of: every rate judged with its
    interval, an interval around the estimate, the constraint named, two verification runs on either
    side of it, and the files."""
    address = f"127.0.0.1:{local_servers.ports.triton_grpc}"
    shape = {"kind": "constant-rate", "rate": 10, "max_in_flight": 128}
    scenario = sweep_scenario(tmp_path, address, shape, model="cnn")
    search = ["--find-max-rps", "--slo", "p99_ms=30", "--start-rate", "150", "--precision", "40", "--max-client-cpu", "1.5"]
    search += ["--max-unsent", "0.05", "--max-steps", "6"]
    result, output = sweep(scenario, tmp_path / "out", *search)
    capacity = result["capacity"]
    assert capacity["levels"], result["stopped"]
    for level in capacity["levels"]:
        assert level["verdict"] in ("pass", "fail", "unsure")
        low, high = level["p99_ms_low"], level["p99_ms_high"]
        assert low is not None and low <= level["p99_ms"] and (high is None or level["p99_ms"] <= high)
    low, high = capacity["interval_rps"]
    if capacity["estimate_rps"] is not None:
        assert low <= capacity["estimate_rps"] and (high is None or capacity["estimate_rps"] <= high)
        assert capacity["binding"]["constraint"] in ("p99_ms", "error_rate", "saturated", "queue", "generator")
        sides = [run["side"] for run in capacity["verification"]["runs"]]
        assert sides[0] == "below" and set(sides) <= {"below", "above"}
        assert [s["role"] for s in result["steps"]][-len(sides) :] == ["verify"] * len(sides)
    assert "capacity under the SLO" in output and "precision" in output
    assert len([s for s in result["steps"] if s["role"] == "search"]) <= 6
    assert "p99 against the offered rate, the SLO and the boundary" in (tmp_path / "out" / "sweep.html").read_text()
