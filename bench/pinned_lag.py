"""Is the engine's send-lag tail the server's doing? Its send lag at 200 req/s on the reference server,
with the machine's cores shared as usual, and with the server pinned to core 1 and the client (the
CLI and Locust with the engine) to core 0, interleaved (issue 20: the pacing goal's miss).

    python -m bench.pinned_lag [--rounds 3] [--seconds 10]

Prints one line per run (round, pinned, transport, send-lag p50 and p99 in ms, load average) and the
rows as JSON. Needs `taskset` (util-linux) and two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.peers import inferload_scenario, reference_server
from inferload.paths import REPO_ROOT

RATE_RPS = 200.0


def send_lag(kind: str, address: str, pinned: bool, seconds: float, work: Path) -> tuple[float, float]:
    """(p50, p99) send lag in ms of one `inferload run` at 200 req/s."""
    scenario = work / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(inferload_scenario(kind, address, seconds, RATE_RPS), sort_keys=False))
    command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(work / "results")]
    if pinned:
        command = ["taskset", "-c", "0", *command]
    subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=seconds + 120, check=True)
    summary = json.loads((work / "results" / "summary.json").read_text())
    lag = summary["targets"]["t"]["open_loop"]["send_lag_ms"]
    return float(lag["p50"]), float(lag["p99"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    rows = []
    with reference_server() as server:
        pid = server.server.pid
        for round_no in range(args.rounds):
            for pinned in (False, True):
                subprocess.run(["taskset", "-a", "-cp", "1" if pinned else "0,1", str(pid)], capture_output=True, check=True)
                for kind, address in (("triton-grpc", server.grpc_address), ("triton-http", server.http_address)):
                    with tempfile.TemporaryDirectory() as folder:
                        p50, p99 = send_lag(kind, address, pinned, args.seconds, Path(folder))
                    rows.append({"round": round_no, "pinned": pinned, "kind": kind, "p50_ms": p50, "p99_ms": p99,
                                 "load": round(os.getloadavg()[0], 2)})  # fmt: skip
                    print(rows[-1], flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
