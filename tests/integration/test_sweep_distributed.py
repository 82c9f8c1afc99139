"""`inferload sweep --workers 1` against the real local Triton: each step a master and one local
worker, two short steps, both rows written with requests and no failure; the load-generating
process measured is the worker; the server's memory read from the local servers' state.json; no
GPU on this machine, so the GPU columns stay empty (a GPU host fills them)."""

from __future__ import annotations

import csv
import json
import time

from inferload.observe.sources.nvml import NvmlSource
from tests.support.cli import inferload
from tests.support.scenario_factory import tiny_target, write_scenario

SHORT = ["--window", "1s", "--warmup", "1s", "--stable-windows", "2", "--tolerance", "50", "--max-windows", "3"]


def test_a_distributed_sweep_writes_a_row_per_step_with_no_failures(local_servers, tmp_path):
    target = tiny_target("tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    scenario = write_scenario(
        tmp_path, {"name": "dist", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    out = tmp_path / "out"
    started = time.monotonic()
    options = ["--users", "1,2", "--workers", "1", "--server-state", str(local_servers.state_dir), "--out", str(out)]
    done = inferload("sweep", str(scenario), *options, *SHORT, timeout_s=120)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "sweep.json").read_text())
    assert result["plan"]["workers"] == 1
    assert result["stopped"]["rule"] == "levels", result["stopped"]
    steps = result["steps"]
    assert [s["level"] for s in steps] == [1, 2]
    for step in steps:
        summary = json.loads((tmp_path / step["results_dir"] / "summary.json").read_text())
        assert summary["targets"]["tiny"]["requests"] > 0 and summary["targets"]["tiny"]["failures"] == 0
        assert step["error_rate"] == 0 and step["requests"] == summary["targets"]["tiny"]["requests"]
        assert step["client_cpu_per_worker"] is not None  # the worker process, sampled
        assert step["server_memory_mib"] is not None and step["server_memory_mib"] > 50  # Triton with its models
    with open(out / "sweep.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["level"]) for r in rows] == [1, 2] and all(float(r["server_memory_mib"]) > 50 for r in rows)
    if NvmlSource().unavailable_reason is not None:  # no GPU here: empty, not zero
        assert all(r["gpu_util_pct"] == "" and r["gpu_memory_mib"] == "" for r in rows)
    assert "server memory" in done.stdout
    print(f"distributed sweep: {took:.1f} s")
