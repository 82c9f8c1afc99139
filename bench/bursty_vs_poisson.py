"""Issue 26's comparison: the same mean rate sent as Poisson and as a recorded bursty trace, on the sample CNN.

    python -m bench.bursty_vs_poisson [--rate 200] [--cv 3] [--seconds 40] [--out DIR]

Starts the local Triton (sample model ``cnn``: dynamic batching, preferred sizes 8 and 16, 1 ms
queue delay, two instances) on free loopback ports, then, each run through `inferload run
--headless` as a user runs it (gRPC, 32 senders, 5 s warm-up excluded):

1. **records** production-like traffic: a run of gamma arrivals at ``--rate`` req/s with burstiness
   ``--cv``, every request traced (``trace: {rate: 1}``); `inferload trace-to-replay` turns
   Triton's trace file into ``recorded.csv`` (the recording path of docs/scenarios.md);
2. **Poisson** at ``--rate`` req/s;
3. **the recording replayed** at the same mean rate (``shape: {kind: replay, file: recorded.csv,
   rate: R, loop: true}``);

2 and 3 alternate ``--rounds`` times (default 2), so a busy spell of a shared machine shows as one
run out of line rather than as the difference between the two.

Writes ``bursty_vs_poisson.json`` and ``.md`` (p50/p99/p999, Triton's average batch and batch-size
histogram, queue time, sent burstiness, send lag) into ``--out``, and stops the server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from bench.machine import describe as describe_machine
from inferload.local.models.build import ensure_models
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts

WARMUP_S = 5
SENDERS = 32


def scenario(address: str, shape: dict[str, Any], seconds: float, traced: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {
        "name": "cnn",
        "kind": "triton-grpc",
        "address": address,
        "model": "cnn",
        "inputs": [{"name": "INPUT__0", "shape": [3, 32, 32], "dtype": "FP32", "data": {"generator": "random", "seed": 0}}],
        "timeout": "10s",
    }
    if traced:
        target["trace"] = {"rate": 1}
    return {
        "name": "bursty-vs-poisson",
        "duration": f"{seconds + WARMUP_S:g}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [target],
        "shape": {**shape, "max_in_flight": SENDERS},
    }


def run(folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    command = [sys.executable, "-m", "inferload.cli", "run", str(path), "--headless", "--out", str(folder / "results")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    (folder / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{folder.name}: exit {done.returncode}; see {folder / 'run.log'}")
    summary: dict[str, Any] = json.loads((folder / "results" / "summary.json").read_text())
    return summary


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    target = summary["targets"]["cnn"]
    latency, server, open_loop = target["latency_ms"], target["server_side"] or {}, target["open_loop"]
    return {
        "achieved_rps": round(open_loop["achieved_rps"], 1),
        "requests": target["requests"],
        "failures": target["failures"],
        "p50_ms": latency["p50"],
        "p99_ms": latency["p99"],
        "p999_ms": latency["p999"],
        "avg_batch": server.get("avg_batch_size"),
        "queue_ms": server.get("queue_ms_avg"),
        "compute_ms": server.get("compute_ms_avg"),
        "batch_size_histogram": server.get("batch_size_histogram"),
        "sent_cv": open_loop["burstiness"]["sent_cv"],
        "send_lag_p99_ms": open_loop["send_lag_ms"]["p99"],
        "unsent": open_loop["unsent"],
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        ("achieved req/s", "achieved_rps", "{:.1f}"),
        ("burstiness sent (CV)", "sent_cv", "{:.2f}"),
        ("p50 (ms)", "p50_ms", "{:.2f}"),
        ("p99 (ms)", "p99_ms", "{:.2f}"),
        ("p999 (ms)", "p999_ms", "{:.2f}"),
        ("avg batch (Triton)", "avg_batch", "{:.2f}"),
        ("queue (ms, Triton)", "queue_ms", "{:.2f}"),
        ("compute (ms, Triton)", "compute_ms", "{:.2f}"),
        ("send lag p99 (ms)", "send_lag_p99_ms", "{:.2f}"),
        ("unsent", "unsent", "{}"),
        ("load average (1 min) before, after", "load_average_1m", "{}, {}"),
    ]
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, key, spec in rows:
        cells = [
            "n/a"
            if results[n][key] is None
            else spec.format(*results[n][key])
            if key == "load_average_1m"
            else spec.format(results[n][key])
            for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    sizes = sorted({int(size) for n in names for size in (results[n]["batch_size_histogram"] or {})})
    for n in names:
        histogram = results[n]["batch_size_histogram"] or {}
        total = sum(histogram.values()) or 1
        shares = ", ".join(f"{size}: {histogram.get(str(size), 0) / total:.0%}" for size in sizes if histogram.get(str(size)))
        lines.append(f"\n{n}: executions by batch size (share of executions): {shares}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bursty_vs_poisson", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--cv", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=40.0, help="steady seconds of each run (default 40)")
    parser.add_argument("--rounds", type=int, default=2, help="Poisson and replay runs, interleaved (default 2 each)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or Path("results") / f"bench-bursty-vs-poisson-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    ensure_models(("cnn",))
    machine_before = describe_machine()
    with tempfile.TemporaryDirectory(prefix="inferload-bursty-") as state:
        servers = LocalServers(Path(state), ServerPorts.free(), ("cnn",))
        servers.up(("triton",), timeout_s=180)
        try:
            address = f"127.0.0.1:{servers.ports.triton_grpc}"
            gamma = {"kind": "gamma", "rate": args.rate, "cv": args.cv, "seed": 1}
            run(out / "record", scenario(address, gamma, args.seconds, traced=True))
            recorded = out / "recorded.csv"
            trace_file = Path(state) / "triton" / "trace.json"
            done = subprocess.run(
                [sys.executable, "-m", "inferload.cli", "trace-to-replay", str(trace_file), "--out", str(recorded)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            print(done.stdout + done.stderr)
            if done.returncode != 0:
                raise RuntimeError("trace-to-replay failed")
            poisson = {"kind": "poisson", "rate": args.rate, "seed": 2}
            replay = {"kind": "replay", "file": str(recorded), "rate": args.rate, "loop": True}
            results: dict[str, dict[str, Any]] = {}
            for round_index in range(1, args.rounds + 1):  # interleaved: a busy spell of the machine shows in one run
                for name, shape in (("Poisson", poisson), ("recorded bursty trace", replay)):
                    label = f"{name} #{round_index}" if args.rounds > 1 else name
                    load_before = os.getloadavg()[0]
                    measured = figures(
                        run(out / label.replace(" ", "-").replace("#", ""), scenario(address, shape, args.seconds))
                    )
                    measured["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
                    results[label] = measured
        finally:
            servers.down()
    document = {
        "rate_rps": args.rate,
        "recorded_with": {"kind": "gamma", "cv": args.cv},
        "recording": json.loads((out / "recorded.summary.json").read_text()),
        "results": results,
        "machine_before": machine_before,
        "machine_after": describe_machine(),
    }
    (out / "bursty_vs_poisson.json").write_text(json.dumps(document, indent=2) + "\n")
    text = table(results)
    (out / "bursty_vs_poisson.md").write_text(text + "\n")
    print(text)
    print(f"written {out / 'bursty_vs_poisson.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
