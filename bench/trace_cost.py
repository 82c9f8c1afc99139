"""The cost of the trace join (issue 15, item 5): closed-loop throughput with and without ``trace``.

    python -m bench.trace_cost [--rounds 3] [--seconds 10] [--users 16] [--rate 0.01] [--out DIR]

Starts the local Triton (model ``identity``, free loopback ports, a temporary state dir; its trace
file set at start, tracing off, as ``inferload servers up`` does), then runs the same closed-loop
scenario (gRPC, ``--users`` users, 2 s warm-up excluded) as real ``inferload run --headless`` runs,
once without ``trace`` and once with ``trace: {rate: R}``, interleaved round by round. Prints and
writes (``trace-cost.json``) each run's steady throughput and the median ratio traced / plain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

MODEL = "identity"
WARMUP_S = 2


def scenario(address: str, users: int, seconds: float, rate: float | None) -> dict[str, Any]:
    target: dict[str, Any] = {
        "name": "t",
        "kind": "triton-grpc",
        "address": address,
        "model": MODEL,
        "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 1}}],
        "timeout": "5s",
    }
    if rate is not None:
        target["trace"] = {"rate": rate}
    return {
        "name": "trace-cost",
        "duration": f"{WARMUP_S + seconds:g}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [target],
        "shape": {"kind": "steady", "users": users},
    }


def run_one(folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = folder / "results"
    done = subprocess.run(
        [sys.executable, "-m", "inferload.cli", "run", str(path), "--headless", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"inferload run failed ({done.returncode}): {done.stderr[-2000:]}")
    figures = json.loads((out / "summary.json").read_text())["targets"]["t"]
    tail = figures.get("tail") or {}
    return {"throughput_rps": figures["throughput_rps"], "p99_ms": figures["latency_ms"]["p99"], "joined": tail.get("joined")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from inferload.local.models.build import build_models
    from inferload.local.servers.manager import LocalServers, urls
    from inferload.local.servers.ports import ServerPorts

    build_models((MODEL,))
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "traced": []}
    with tempfile.TemporaryDirectory(prefix="inferload-trace-cost-") as tmp:
        servers = LocalServers(Path(tmp) / "servers", ServerPorts.free(), models=(MODEL,))
        try:
            servers.up(which=("triton",), timeout_s=180)
            address = urls("triton", servers.ports)["grpc"]
            for round_no in range(args.rounds):
                for variant, rate in (("plain", None), ("traced", args.rate)):
                    result = run_one(Path(tmp) / f"{variant}-{round_no}", scenario(address, args.users, args.seconds, rate))
                    runs[variant].append(result)
                    print(
                        f"round {round_no + 1} {variant:7s} {result['throughput_rps']:8.1f} req/s  p99 {result['p99_ms']:.2f} ms  joined {result['joined']}",
                        flush=True,
                    )
        finally:
            servers.down()
    plain = statistics.median(r["throughput_rps"] for r in runs["plain"])
    traced = statistics.median(r["throughput_rps"] for r in runs["traced"])
    summary = {
        "rate": args.rate,
        "users": args.users,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "plain_rps_median": plain,
        "traced_rps_median": traced,
        "ratio": traced / plain,
        "runs": runs,
    }
    print(f"median throughput: plain {plain:.1f} req/s, traced {traced:.1f} req/s: ratio {traced / plain:.3f}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "trace-cost.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
