"""The tail anatomy against a real Triton: the trace join says where the slow requests spent their time.

Triton starts with a trace file and tracing off (``--trace-config triton,file=...``, ``level=OFF``,
as the local server does); a run with ``trace: {rate: 1}`` turns tracing on for its model, restores
the settings after, joins Triton's trace records with the client's request ids and writes the
anatomy into summary.json. Two models of our own (tests/examples/triton/tail_*):

- ``tail_queue``: one instance, no batching, 1 ms per request, 200 ms more for a request whose
  first value is above 0.9. The traced target sends only fast requests (4 users); a second,
  untraced target (1 user) sends the same model slow ones now and then (10 of its 100 samples):
  the traced requests that wait behind one in Triton's queue make the tail -> queueing.
- ``tail_slow``: the same slow path on the traced target itself (10 of 100 samples), 1 user
  (nothing queues) -> the slow tail is compute.

The slow path is far longer than the load generator's own hiccups on a busy 2-core machine (a
100 ms pause now and then), so the requests above the p99 are the ones the model made slow.

Afterwards the model's trace settings are back to what they were (level OFF). With two Locust
workers (``inferload run --workers 2``) the master joins both workers' requests.

Each test has a Triton of its own: Triton 2.51 crashes now and then with tracing on (CI once lost
the module's one Triton in its first test, and all three failed; once two Tritons in a row in one
test). A test whose Triton crashed (its log says so, or it ended on its own) runs again on a new one,
up to three; any other failure fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import requests

from inferload.local.servers.triton_local import trace_arguments
from tests.support.cli import inferload
from tests.support.example_triton import (
    TRACED_INPUT_LOST_MAX,
    ExampleTriton,
    on_triton_surviving_its_crash,
    traced_input_lost,
)
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario

#: the client's and Triton's times come from one monotonic clock, read in two processes
CLOCK_PRECISION_MS = 0.05
PARTS = ("network_client_ms", "frontend_ms", "queue_ms", "compute_input_ms", "compute_infer_ms", "compute_output_ms")


MODELS = {"tail_queue": "tail_queue", "tail_slow": "tail_slow"}


def on_traced_triton(tmp_path: Path, body: Callable[[ExampleTriton, Path], None]) -> None:
    """``body`` on a Triton of its own with a trace file; on a new one if Triton crashed (CRASH_ATTEMPTS)."""
    on_triton_surviving_its_crash(tmp_path, MODELS, lambda folder: trace_arguments(folder / "trace.json"), body)


def _rows(folder: Path, name: str, slow_every: int | None) -> str:
    rows = np.full((100, 4), 0.5, dtype=np.float32)
    if slow_every:
        rows[::slow_every, 0] = 0.95  # the slow path of the tail_* models
    np.save(folder / name, rows)
    return name


def _scenario(folder: Path, kind: str, address: str, model: str, users: int, blocker: bool = False, duration: str = "4s") -> Path:
    target: dict[str, Any] = {
        "name": "t",
        "kind": kind,
        "address": address,
        "model": model,
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [4],
                "dtype": "FP32",
                "data": {"dataset": _rows(folder, "t.npy", None if blocker else 10)},
            }
        ],
        "trace": {"rate": 1},
        "slo": {"error_rate": TRACED_INPUT_LOST_MAX},  # Triton's race tracing every request (TRACED_INPUT_LOST)
    }
    targets = [target]
    if blocker:  # the same model, untraced, a slow request now and then: the traced ones queue behind it
        slow = {
            **target,
            "name": "blocker",
            "weight": 1,
            "inputs": [{**target["inputs"][0], "data": {"dataset": _rows(folder, "b.npy", 10)}}],
        }
        del slow["trace"]
        target["weight"] = users - 1
        targets.append(slow)
    data = {"name": "tail", "duration": duration, "warmup": "1s", "targets": targets, "shape": {"kind": "steady", "users": users}}
    return write_scenario(folder, data)


def _tail(folder: Path, kind: str, address: str, model: str, users: int, blocker: bool = False) -> dict[str, Any]:
    run = run_locust(_scenario(folder, kind, address, model, users, blocker), folder)
    assert run.returncode == 0, run.output
    assert all(traced_input_lost(row["Error"]) for row in run.failures_csv), run.failures_csv
    tail = run.summary["targets"]["t"]["tail"]
    report = (run.results_dir / "report.html").read_text()
    assert f"the p99 is {tail['verdict']}" in report and "Per-request residual" in report
    assert tail["available"] is True, tail
    assert tail["joined"] > 20 and tail["joined"] <= tail["client_requests"], tail
    assert tail["batch_size_exact"] is True
    for group in ("above_p99", "around_p50"):
        assert tail[group]["count"] > 0 and set(tail[group]["median_share"]) == set(PARTS), tail
    residual = tail["residual_ms"]  # per joined request: client latency - Triton's REQUEST_START..response sent
    assert residual["n"] == tail["joined"], residual
    assert residual["min"] <= residual["p50"] <= residual["p90"] <= residual["p99"] <= residual["max"], residual
    assert residual["min"] >= -CLOCK_PRECISION_MS, residual
    assert sum(residual["histogram"]["counts"]) + residual["histogram"]["above"] == residual["n"], residual
    return tail


def test_queueing_tail_over_grpc(tmp_path: Path) -> None:
    def body(server: ExampleTriton, folder: Path) -> None:
        tail = _tail(folder, "triton-grpc", server.grpc, "tail_queue", users=5, blocker=True)
        assert tail["verdict"] == "queueing", tail
        assert tail["verdict_line"].startswith("the p99 is queueing"), tail
        assert tail["above_p99"]["median_ms"]["queue_ms"] > 100, tail  # behind a 200 ms execution
        assert tail["above_p99"]["median_ms"]["compute_infer_ms"] < 20, tail  # the traced requests are all fast
        assert tail["above_p99"]["batch_size_median"] == 1, tail  # no dynamic batching: each request alone
        settings = requests.get(f"http://{server.http}/v2/models/tail_queue/trace/setting", timeout=5).json()
        assert settings["trace_level"] == ["OFF"], settings  # restored after the run

    on_traced_triton(tmp_path, body)


def test_compute_tail_over_http(tmp_path: Path) -> None:
    def body(server: ExampleTriton, folder: Path) -> None:
        tail = _tail(folder, "triton-http", server.http, "tail_slow", users=1)
        assert tail["verdict"] == "compute", tail
        assert tail["above_p99"]["median_ms"]["compute_infer_ms"] > 150, tail  # the 200 ms slow path
        assert tail["around_p50"]["median_ms"]["compute_infer_ms"] < 20, tail
        assert tail["above_p99"]["median_ms"]["queue_ms"] < 20, tail

    on_traced_triton(tmp_path, body)


def test_the_master_joins_every_workers_requests(tmp_path: Path) -> None:
    def body(server: ExampleTriton, folder: Path) -> None:
        out = folder / "results"
        # over HTTP: a CLI that spoke gRPC before starting its workers has seen a rare gRPC abort at fork
        # (inferload/launch/die_with_parent.py)
        scenario = _scenario(folder, "triton-http", server.http, "tail_queue", users=3, blocker=True, duration="3s")
        done = inferload("run", str(scenario), "--headless", "--workers", "2", "--out", str(out), timeout_s=180)
        assert done.returncode == 0, done.stdout + done.stderr
        figures = json.loads((out / "summary.json").read_text())["targets"]["t"]
        tail = figures["tail"]
        assert tail["available"] is True, tail
        # every steady successful request was traced (rate 1) and each worker's half of them joined: a
        # worker's half not joined would leave about 0.5. The last ones may miss the trace file Triton
        # flushes at the restore (CI: 231 of 234 once, 240 of 252 once, 182 of 203 once: about the last
        # 0.3 s of a 3 s run), so the bound is 0.8, not all: still far from a worker's half missing.
        assert tail["client_requests"] >= tail["joined"] >= 0.8 * tail["client_requests"], (tail, figures["requests"])
        assert tail["client_requests"] >= 0.9 * figures["requests"] > 0, (tail, figures["requests"])
        assert tail["verdict"] == "queueing", tail
        assert tail["residual_ms"]["n"] == tail["joined"], tail  # both workers' requests in the distribution

    on_traced_triton(tmp_path, body)
