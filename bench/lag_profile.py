"""Where the engine's open-loop send lag goes (issue 20: the pacing goal's miss), from the engine's own
stamps of every send at 200 req/s on the reference server.

    python -m bench.lag_profile [--rounds 3] [--seconds 10] [--rate 200]

The engine, run with `INFERLOAD_ENGINE_LAG_PROFILE=1`, prints six times per send (CLOCK_MONOTONIC):
when it was due, when the pacer thread meant to let it go (a lead of up to 100 µs early), when it let
it go, when its sender task had it, when the sender's spin ended and the call began, and when the
request's first byte was written. The parts: `pacer_late` (let go − meant: the pacer thread's own
wake-up; negative since 42acf59 when it let an arrival go up to 100 µs before its hand-off), `wake` (had − let go: the hand-over through a channel to a tokio task on another thread),
`spin_late` (call began − the later of due and had: the thread not running while it spun), `write`
(written − call began: framing the request, the connection task's wake-up, the socket write). The
send lag (written − due) is about `max(0, pacer_late + wake − lead)` + `spin_late` + `write`. Prints p50, p99 and max of
each, per protocol and round, in ms, then the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.peers import inferload_scenario, reference_server
from inferload.paths import REPO_ROOT

#: the engine's line: six times in ns (Locust's log lines may run into it on the same stream)
LINE = re.compile(r"inferload engine lag: (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", re.MULTILINE)


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}

    def rank(q: float) -> float:
        return ordered[max(1, int(q * len(ordered) + 0.5)) - 1]

    return {"p50": round(rank(0.5), 4), "p99": round(rank(0.99), 4), "max": round(ordered[-1], 4)}


def profile(stderr: str) -> dict[str, dict[str, float]]:
    """The parts of the send lag, in ms, from the engine's lines."""
    parts: dict[str, list[float]] = {"send_lag": [], "pacer_late": [], "wake": [], "spin_late": [], "write": []}
    for match in LINE.finditer(stderr):
        intended, handoff, released, taken, called, sent = (int(field) for field in match.groups())
        parts["send_lag"].append((sent - intended) / 1e6)
        parts["pacer_late"].append((released - handoff) / 1e6)  # the pacer thread let it go late
        parts["wake"].append((taken - released) / 1e6)  # the sender task had it this long after
        parts["spin_late"].append((called - max(taken, intended)) / 1e6)  # the spin (or its start) overran
        parts["write"].append((sent - called) / 1e6)
    return {name: {**quantiles(values), "n": len(values)} for name, values in parts.items()}


def one_run(kind: str, address: str, seconds: float, rate: float, work: Path) -> dict[str, dict[str, float]]:
    scenario = work / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(inferload_scenario(kind, address, seconds, rate), sort_keys=False))
    command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(work / "results")]
    environment = {**os.environ, "INFERLOAD_ENGINE_LAG_PROFILE": "1"}
    done = subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0:
        raise SystemExit(f"inferload run exited {done.returncode}: {done.stderr[-2000:]}")
    return profile(done.stderr + done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args(argv)
    rows = []
    with reference_server() as server:
        for round_no in range(args.rounds):
            for kind, address in (("triton-grpc", server.grpc_address), ("triton-http", server.http_address)):
                with tempfile.TemporaryDirectory() as folder:
                    parts = one_run(kind, address, args.seconds, args.rate, Path(folder))
                rows.append({"round": round_no, "kind": kind, "load": round(os.getloadavg()[0], 2), **parts})
                line = "  ".join(f"{name} {q['p50']}/{q['p99']}/{q['max']}" for name, q in parts.items())
                print(f"round {round_no} {kind:12} n={parts['send_lag']['n']} (p50/p99/max ms) {line}", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
