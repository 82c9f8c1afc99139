"""Where the CPU goes, thread by thread, when the engine saturates the reference server and when it
paces an open loop at a fraction of that rate, and with one process against two (issue 20: the
profile behind the 80 % pacing and the scale-out misses).

    python -m bench.cpu_split [--seconds 12] [--rounds 2] [--fraction 0.8]

Each run is a real `inferload run` (gRPC, 16 in flight, as in `make bench`). Over its steady middle
(from 3 s in to 1 s before its end) every thread of the client's process tree and of the reference
server is read from /proc (utime + stime, voluntary and involuntary context switches), grouped by
role: the pacer thread (`inferload-pacer`), the engine's tokio threads (`inferload-engine`), the
Python threads (the rest of a Locust process), the server's threads. Requests are the server's own
count over the same window. Prints, per run: the achieved rate, the cores each role used, the CPU
µs per request of each role, and the context switches per request; then the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.peers import ReferenceCount, inferload_scenario, open_loop_figures, reference_server
from inferload.paths import REPO_ROOT

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ThreadSample:
    cpu_s: float
    voluntary: int
    involuntary: int


def _thread(pid: int, tid: int) -> tuple[str, ThreadSample] | None:
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    switches = {key: int(value) for key, value in (line.split(":\t") for line in status.splitlines() if "ctxt_switches" in line)}
    return name, ThreadSample(cpu_s, switches["voluntary_ctxt_switches"], switches["nonvoluntary_ctxt_switches"])


def role(side: str, name: str) -> str:
    if side == "server":
        return "server"
    if name.startswith("inferload-pace"):
        return "pacer"
    if name.startswith("inferload-engi"):
        return "engine"
    return "python"


def sample(trees: dict[str, int]) -> dict[tuple[str, int, int], tuple[str, ThreadSample]]:
    """Every thread of each side's process tree: (side, pid, tid) -> (role, sample)."""
    seen: dict[tuple[str, int, int], tuple[str, ThreadSample]] = {}
    for side, root in trees.items():
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
            except OSError:
                continue
            for tid in tids:
                read = _thread(proc.pid, tid)
                if read is not None:
                    seen[(side, proc.pid, tid)] = (role(side, read[0]), read[1])
    return seen


def split(before: dict[Any, tuple[str, ThreadSample]], after: dict[Any, tuple[str, ThreadSample]]) -> dict[str, dict[str, float]]:
    """Per role: CPU seconds and context switches between two samples (threads seen in both)."""
    roles: dict[str, dict[str, float]] = {}
    for key, (name, end) in after.items():
        # a thread born inside the window: all of its time is the window's
        start = before[key][1] if key in before else ThreadSample(0.0, 0, 0)
        row = roles.setdefault(name, {"cpu_s": 0.0, "voluntary": 0, "involuntary": 0, "threads": 0})
        row["cpu_s"] += end.cpu_s - start.cpu_s
        row["voluntary"] += end.voluntary - start.voluntary
        row["involuntary"] += end.involuntary - start.involuntary
        row["threads"] += 1
    return roles


def one_run(
    server: ReferenceCount,
    server_pid: int,
    seconds: float,
    rate: float | None,
    workers: int,
    work: Path,
    max_in_flight: int | None = None,
) -> dict[str, Any]:
    body = inferload_scenario("triton-grpc", server.grpc_address, seconds, rate)
    if max_in_flight is not None:
        body["shape"]["max_in_flight"] = max_in_flight
    scenario = work / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(body, sort_keys=False))
    command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(work / "results")]
    if workers > 1:
        command += ["--workers", str(workers)]
    started = time.monotonic()
    client = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # the run's clock starts once Locust is up (a few seconds after the process): wait for the first
    # requests at the server, then 3 s more
    mark0 = server.mark()
    while server.since(mark0)[0] == 0 and client.poll() is None and time.monotonic() - started < 60:
        time.sleep(0.05)
    time.sleep(3.0)
    trees = {"client": client.pid, "server": server_pid}
    before, mark, t0 = sample(trees), server.mark(), time.monotonic()
    time.sleep(max(1.0, seconds - 4.0))
    after, requests, elapsed = sample(trees), server.since(mark)[0], time.monotonic() - t0
    _, stderr = client.communicate(timeout=seconds + 120)
    if client.returncode != 0:
        raise SystemExit(f"inferload run exited {client.returncode}: {stderr[-2000:]}")
    roles = split(before, after)
    return {
        "rate": rate,
        "max_in_flight": body["shape"].get("max_in_flight", body["shape"].get("users")),
        "open_loop": open_loop_figures(work),
        "workers": workers,
        "window_s": round(elapsed, 3),
        "requests": requests,
        "rps": round(requests / elapsed, 1),
        "load": round(os.getloadavg()[0], 2),
        "roles": {
            name: {
                "cores": round(row["cpu_s"] / elapsed, 3),
                "cpu_us_per_request": round(row["cpu_s"] / requests * 1e6, 2) if requests else None,
                "switches_per_request": round((row["voluntary"] + row["involuntary"]) / requests, 3) if requests else None,
                "involuntary_per_s": round(row["involuntary"] / elapsed, 1),
                "threads": row["threads"],
            }
            for name, row in sorted(roles.items())
        },
    }


def show(label: str, row: dict[str, Any]) -> None:
    parts = "  ".join(
        f"{name} {r['cores']:.2f} cores {r['cpu_us_per_request']} µs/req {r['switches_per_request']} sw/req"
        for name, r in row["roles"].items()
    )
    total = sum(r["cores"] for r in row["roles"].values())
    open_loop = row.get("open_loop") or {}
    if open_loop:
        lag = open_loop.get("send_lag_ms") or {}
        label += f" achieved {open_loop.get('achieved_ratio')} unsent {open_loop.get('unsent')} lag p99 {lag.get('p99')}"
    print(f"{label:22s} {row['rps']:>9.1f} req/s  all {total:.2f} cores  {parts}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.8)
    parser.add_argument("--open-in-flight", type=int, nargs="*", default=[16], help="max_in_flight of the open runs")
    parser.add_argument("--no-workers", action="store_true", help="leave out the 2-worker run")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with reference_server() as server:
        server_pid = server.server.pid
        for round_no in range(args.rounds):
            with tempfile.TemporaryDirectory() as folder:
                closed = one_run(server, server_pid, args.seconds, None, 1, Path(folder))
            show(f"r{round_no} closed, 1 process", closed)
            rate = round(closed["rps"] * args.fraction)
            rows.append({"round": round_no, "run": "closed-1", **closed})
            for in_flight in args.open_in_flight:
                with tempfile.TemporaryDirectory() as folder:
                    paced = one_run(server, server_pid, args.seconds, float(rate), 1, Path(folder), in_flight)
                show(f"r{round_no} open {rate}/s ≤{in_flight}", paced)
                rows.append({"round": round_no, "run": f"open-{in_flight}", **paced})
            if not args.no_workers:
                with tempfile.TemporaryDirectory() as folder:
                    two = one_run(server, server_pid, args.seconds, None, 2, Path(folder))
                show(f"r{round_no} closed, 2 workers", two)
                rows.append({"round": round_no, "run": "closed-2", **two})
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
