"""Item 8 of `make bench` (issue 14): the gRPC send path, side by side with its baselines and ceiling.

In interleaved rounds, at a paced load (250 req/s, 4 users) and at saturation (closed loop,
16 users), each in its own process:

- ``grpc-inferload``: the Triton gRPC user as a run makes it (the native engine when it is built);
- ``grpc-inferload-python``: the same user on the Python transport (``INFERLOAD_TRANSPORT=python``:
  each call blocks its greenlet through gRPC's own gevent integration);
- ``grpc-plain``: Locust's documented gRPC user (interceptor + raw stub);
- ``grpc-aio-ceiling``: `bench.grpc_ceiling`, a `grpc.aio` client with the same pre-built request
  and concurrency, no Locust, no gevent.

Then the scale-out: N = 1 and 2 client processes at once (closed loop, 16 users each) against the
same Triton, total req/s and where the limit is (client cores, server, machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.client import MeasureSpec
from inferload.paths import REPO_ROOT

VARIANTS = ("grpc-inferload", "grpc-inferload-python", "grpc-plain", "grpc-aio-ceiling")
LOADS: dict[str, dict[str, Any]] = {
    "paced": {"users": 4, "rate_rps": 250.0, "requests": 2000},
    "saturation": {"users": 16, "rate_rps": None, "requests": 6000},
}
SCALE_SECONDS = 8.0
SCALE_USERS = 16


def _ceiling(address: str, model: str, users: int, requests: int, rate: float | None, work: Path) -> dict[str, Any]:
    out = work / "ceiling.json"
    subprocess.run(
        [sys.executable, "-m", "bench.grpc_ceiling", address, model, str(users), str(requests), str(rate or "none"), str(out)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return dict(json.loads(out.read_text()))


def _median(values: list[float]) -> float | None:
    ordered = sorted(v for v in values if v)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return round(ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2, 1)


def send_path(
    measure: Callable[[MeasureSpec], dict[str, Any]],
    spec: Callable[..., MeasureSpec],
    address: str,
    model: str,
    rounds: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    log(f"[8] gRPC send path: {', '.join(VARIANTS)}; paced and saturated; {rounds} interleaved rounds")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {load: {v: [] for v in VARIANTS} for load in LOADS}
    with tempfile.TemporaryDirectory(prefix="inferload-bench-grpc-") as tmp:
        for round_no in range(rounds):
            log(f" round {round_no + 1}")
            for load, settings in LOADS.items():
                order = VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    if variant == "grpc-aio-ceiling":
                        result = _ceiling(
                            address, model, settings["users"], settings["requests"], settings["rate_rps"], Path(tmp)
                        )
                        log(f"  {variant:22s} {result['rps']:8.1f}/s {result['client_cpu_us_per_request']:7.1f} us CPU/req")
                    else:
                        warmup = 300 if load == "paced" else 500
                        result = measure(spec(variant, warmup_requests=warmup, **settings))
                    runs[load][variant].append(result)
    us = {load: {v: _median([r["client_cpu_us_per_request"] for r in rs]) for v, rs in by.items()} for load, by in runs.items()}
    rps = {load: {v: _median([r["rps"] for r in rs]) for v, rs in by.items()} for load, by in runs.items()}

    def ratio(load: str, a: str, b: str) -> float | None:
        x, y = us[load].get(a), us[load].get(b)
        return round(x / y, 3) if x and y else None

    ratios = {
        load: {
            "inferload_vs_python_transport": ratio(load, "grpc-inferload", "grpc-inferload-python"),
            "python_transport_vs_plain": ratio(load, "grpc-inferload-python", "grpc-plain"),
            "inferload_vs_plain": ratio(load, "grpc-inferload", "grpc-plain"),
            "inferload_vs_aio_ceiling": ratio(load, "grpc-inferload", "grpc-aio-ceiling"),
            "plain_vs_aio_ceiling": ratio(load, "grpc-plain", "grpc-aio-ceiling"),
        }
        for load in LOADS
    }
    return {
        "loads": LOADS,
        "rounds": rounds,
        "us_per_request_median": us,
        "rps_median": rps,
        "ratios": ratios,
        "runs": runs,
    }


def scale_out(spec: Callable[..., MeasureSpec], log: Callable[[str], None]) -> dict[str, Any]:
    """N = 1, 2 client processes at once, each closed loop with 16 users, for 8 s."""
    log(f"[8] scale-out: N = 1, 2 client processes at once, closed loop, {SCALE_USERS} users each, {SCALE_SECONDS:g} s")
    out: dict[str, Any] = {"users_per_process": SCALE_USERS, "seconds": SCALE_SECONDS, "processes": {}}
    with tempfile.TemporaryDirectory(prefix="inferload-bench-scale-") as tmp:
        for n in (1, 2):
            procs = []
            for i in range(n):
                s = spec(
                    "grpc-inferload", users=SCALE_USERS, rate_rps=None, warmup_requests=500, requests=None, seconds=SCALE_SECONDS
                )
                spec_path, out_path = Path(tmp) / f"spec-{n}-{i}.json", Path(tmp) / f"out-{n}-{i}.json"
                spec_path.write_text(json.dumps(asdict(s)))
                command = [sys.executable, "-m", "bench.client", str(spec_path), str(out_path)]
                procs.append(
                    (subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out_path)
                )
            results = []
            for proc, out_path in procs:
                _, err = proc.communicate(timeout=180)
                if proc.returncode != 0:
                    raise RuntimeError(f"bench.client (scale-out N={n}) failed: {err.decode()[-2000:]}")
                results.append(json.loads(out_path.read_text()))
            total = round(sum(r["rps"] for r in results), 1)
            row = {
                "total_rps": total,
                "per_process_rps": [r["rps"] for r in results],
                "client_core_util": [r["client_core_util"] for r in results],
                "client_cpu_us_per_request": [r["client_cpu_us_per_request"] for r in results],
                "server_core_util": results[0]["server_core_util"],
                "machine_idle_frac": min(r["machine_idle_frac"] for r in results),
                "client_mean_ms": [r["client_mean_ms"] for r in results],
            }
            out["processes"][str(n)] = row
            log(
                f"  N={n}: {total:8.1f} req/s total {row['per_process_rps']}, client cores {row['client_core_util']}, "
                f"server {row['server_core_util']} cores, idle {row['machine_idle_frac']:.2f}"
            )
    one, two = out["processes"]["1"]["total_rps"], out["processes"]["2"]["total_rps"]
    out["speedup_2_vs_1"] = round(two / one, 3) if one else None
    return out
