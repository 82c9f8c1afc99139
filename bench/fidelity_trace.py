"""Item 3's per-request residual (issue 14, goal 2): one real ``inferload run --headless`` at a paced
rate with every request traced (``trace: {rate: 1}``), and its ``tail.residual_ms``: each request's
client latency minus Triton's own span of it, as a distribution (docs/observability.md).

The local Triton of the bench starts with a trace file (as ``inferload servers up`` does), so the run
can turn tracing on for its model and join every request. The scenario is `bench.trace_cost`'s, with
an open-loop ``constant-rate`` shape at the given rate instead of its closed loop.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.trace_cost import scenario


def traced_residual(
    work_dir: Path, grpc_address: str, rate_rps: float, users: int, seconds: float, log: Callable[[str], None]
) -> dict[str, Any]:
    """The residual distribution of a traced run at ``rate_rps`` (and the run's own mean and joined count)."""
    folder = work_dir / "fidelity-traced"
    folder.mkdir(parents=True, exist_ok=True)
    data = scenario(grpc_address, users, seconds, 1.0)
    data["shape"] = {"kind": "constant-rate", "rate": rate_rps, "max_in_flight": users}
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = folder / "results"
    command = [sys.executable, "-m", "inferload.cli", "run", str(path), "--headless", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0:
        return {"measured": False, "note": f"inferload run failed ({done.returncode}): {(done.stdout + done.stderr)[-1000:]}"}
    figures = json.loads((out / "summary.json").read_text())["targets"]["t"]
    tail = figures.get("tail") or {}
    residual = tail.get("residual_ms")
    if not residual:
        return {"measured": False, "note": f"no residual: {tail.get('reason', 'no tail in the summary')}"}
    log(
        f"    traced run at {rate_rps:g} req/s: residual p50 {residual['p50']} p90 {residual['p90']} "
        f"p99 {residual['p99']} max {residual['max']} ms over {residual['n']} joined requests"
    )
    return {
        "measured": True,
        "rate_rps": rate_rps,
        "joined": tail.get("joined"),
        "client_requests": tail.get("client_requests"),
        "residual_ms": {k: residual[k] for k in ("n", "mean", "min", "p50", "p90", "p99", "max")},
        "summary_residual_ms": figures.get("residual_ms"),
    }
