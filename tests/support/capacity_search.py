"""What the capacity tests share (test_capacity.py, test_capacity_of_streams_and_users.py): the
reference server they search (4 slots of a fixed 20 ms hold), the sweep's step and search options, and
how an answer is read: the holds the server really made, the answer's evidence for a failed
assertion, and whether an interval reaches a truth band."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.cli import inferload
from tests.support.reference_server import reference_target
from tests.support.scenario_factory import write_scenario

SLOTS, SERVICE_MS, BOUND_MS = 4, 20.0, 150.0
WARMUP_S, WINDOW_S, STABLE_WINDOWS = 1.0, 1.0, 2
STEPS = ["--window", f"{WINDOW_S:g}s", "--warmup", f"{WARMUP_S:g}s", "--stable-windows", str(STABLE_WINDOWS)]
STEPS += ["--tolerance", "50", "--max-windows", "4"]
#: the Python transport's pacer (gevent timers) lags by tens of ms on a loaded machine; a run that lags
#: more (a stall) is measured again, and the truth band allows for this share of the latency
CLIENT_SHARE_MS = 60.0
STEPS += ["--max-send-lag", f"{CLIENT_SHARE_MS:g}"]
SEARCH = [
    "--find-max-rps",
    "--start-rate",
    "120",  # under the truth (about 190) for both laws: one doubling brackets it
    "--precision",
    "15",
    "--max-steps",
    "10",
    "--max-unsent",
    "0.05",
    "--max-client-cpu",
    "1.5",
]
SERVER: dict[str, Any] = {"delay": {"law": "fixed", "ms": SERVICE_MS}, "concurrency": SLOTS, "max_batch_size": 8, "threads": 2}


def served_hold_ms(server: Any) -> float:
    """The mean hold the server really made (ms), over every request it served."""
    records = server.records()
    served = records.with_status("ok")
    return float(np.mean(records.service_ns[served])) / 1e6


def reference_scenario(folder: Path, address: str, kind: str) -> Path:
    target = reference_target("reference", "triton-grpc", address, timeout="10s")
    shape = (
        {"kind": kind, "rate": 50, "max_in_flight": 128, "seed": 3}
        if kind == "poisson"
        else {"kind": kind, "rate": 50, "max_in_flight": 128}
    )
    return write_scenario(folder, {"name": "capacity", "duration": "30s", "targets": [target], "shape": shape})


def sweep(scenario: Path, out: Path, *options: str) -> tuple[dict[str, Any], str]:
    done = inferload("sweep", str(scenario), "--out", str(out), "--no-gpu", *STEPS, *options, timeout_s=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "sweep.json").read_text()), done.stdout


def evidence(result: dict[str, Any]) -> str:
    """What the answer was made of, whole, for a failed assertion (pytest shortens a dict)."""
    capacity = result["capacity"]
    lines = [f"interval {capacity['interval_rps']}, binding {capacity['binding']}, ended {capacity['ended']}"]
    for level in capacity["levels"]:
        p99 = f"p99 {level.get('p99_ms')} [{level.get('p99_ms_low')}, {level.get('p99_ms_high')}]"
        lines.append(f"  {level['rate']:g} req/s {level['verdict']}: {p99} steps {level['steps']} broken {level.get('broken')}")
    for step in result["steps"]:
        lines.append(
            f"  step {step['step']} {step['level']:g} {step.get('role')}: p99 {step.get('p99_ms')} send lag p99"
            f" {step.get('send_lag_p99_ms')} unsent {step.get('unsent')}/{step.get('arrivals')}"
        )
    return "\n".join(lines)


def reaches(interval: list[float | None], low: float, high: float) -> bool:
    """The interval [a, b] (b None: open) overlaps the truth band [low, high]."""
    a, b = interval
    return a is not None and a <= high and (b is None or b >= low)
