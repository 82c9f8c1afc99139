"""Memory soak of a real run (issue 14, goal 4): each process's RSS over a long distributed run.

    python -m bench.soak [--minutes 30] [--workers 2] [--rate 200] [--interval 10] [--out DIR]

Starts the local Triton (model ``identity``, free loopback ports, a temporary state dir) and a
throwaway InfluxDB, then runs a real ``inferload run --headless --workers N --requests-csv`` with
streaming on (``-- --influx-url``): an open-loop ``constant-rate`` shape of ``--rate`` req/s over
gRPC for ``--minutes``. Every ``--interval`` s it samples the resident memory (RSS, psutil) of each
process in the run's tree (the CLI, Locust's master, each worker) and of InfluxDB (the sink's
receiver, for context: not the generator's memory).

Warm-up: the first 10 % of the run, at least 60 s (at most half the run). Per process it reports
RSS at the end of the warm-up (the first sample at or after it), at the end (the last sample
while the run was still sending), the maximum, the growth after warm-up ``(end - warm) / warm``
and ``(max - warm) / warm``, and the least-squares slope of RSS over the samples after warm-up
(MiB/hour). Goal: growth < 5 % for every generator process. Writes ``soak.json`` and ``soak.md``
to ``--out`` (default ``results/soak-<UTC time>``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench import machine
from bench.trace_cost import identity_target
from inferload.paths import REPO_ROOT

MODEL = "identity"
GOAL_GROWTH = 0.05
MIB = 2**20


def scenario(address: str, rate: float, minutes: float) -> dict[str, Any]:
    """An open-loop constant-rate run over gRPC against the identity model."""
    return {
        "name": "soak",
        "duration": f"{minutes * 60:g}s",
        "warmup": "10s",
        "targets": [identity_target(address)],
        "shape": {"kind": "constant-rate", "rate": rate, "max_in_flight": 32},
    }


def role(proc: psutil.Process, root_pid: int) -> str:
    """What a process of the run's tree is: cli, master, worker-<pid> or other-<pid>."""
    if proc.pid == root_pid:
        return "cli"
    try:
        words = proc.cmdline()
    except psutil.Error:
        return f"other-{proc.pid}"
    if "--master" in words:
        return "master"
    if "--worker" in words:
        return f"worker-{proc.pid}"
    return f"other-{proc.pid}"


def sample_tree(root_pid: int) -> dict[str, float]:
    """RSS in MiB of every process in the tree of ``root_pid``, by role."""
    out: dict[str, float] = {}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in procs:
        try:
            out[role(proc, root_pid)] = proc.memory_info().rss / MIB
        except psutil.Error:
            continue
    return out


def slope_mib_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) points, in MiB/hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (m - mean_m) for t, m in points)
    return cov / var * 3600


def analyse(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, Any]]:
    """Per process: RSS at warm-up end, at the end, max after warm-up, growth and slope."""
    names = sorted({name for s in samples for name in s["rss_mib"]})
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        points = [(s["t"], s["rss_mib"][name]) for s in samples if name in s["rss_mib"]]
        after = [(t, m) for t, m in points if t >= warmup_s]
        if not after:
            continue
        warm, end = after[0][1], after[-1][1]
        peak = max(m for _, m in after)
        slope = slope_mib_per_hour(after)
        out[name] = {
            "samples": len(after),
            "rss_warm_mib": round(warm, 1),
            "rss_end_mib": round(end, 1),
            "rss_max_mib": round(peak, 1),
            "growth": round((end - warm) / warm, 4),
            "growth_max": round((peak - warm) / warm, 4),
            "slope_mib_per_hour": round(slope, 2) if slope is not None else None,
        }
    return out


def soak(work: Path, grpc: str, influx_url: str, influx_pid: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """Run the real ``inferload run`` and sample every process's RSS until it exits."""
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(grpc, args.rate, args.minutes), sort_keys=False))
    results = work / "results"
    command = [
        sys.executable, "-m", "inferload.cli", "run", str(path), "--headless", "--workers", str(args.workers),
        "--requests-csv", "--out", str(results), "--run-id", "soak", "--", "--influx-url", influx_url,
        "--loglevel", "WARNING",
    ]  # fmt: skip
    samples: list[dict[str, Any]] = []
    log_path = work / "run.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT)
        start = time.monotonic()
        while proc.poll() is None:
            t = time.monotonic() - start
            rss = sample_tree(proc.pid)
            if influx_pid is not None:
                with contextlib.suppress(psutil.Error):
                    rss["influxdb"] = psutil.Process(influx_pid).memory_info().rss / MIB
            if t <= args.minutes * 60 + 5:  # while sending: not the shutdown's report writing
                samples.append({"t": round(t, 1), "rss_mib": {k: round(v, 2) for k, v in rss.items()}})
                print(f"  {t:7.0f} s  " + "  ".join(f"{k} {v:.1f}" for k, v in sorted(rss.items())), flush=True)
            deadline = time.monotonic() + args.interval
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        returncode = proc.wait()
    if returncode != 0:
        raise RuntimeError(f"inferload run exited {returncode}: {log_path.read_text()[-3000:]}")
    summary = json.loads((results / "summary.json").read_text())
    figures = summary["targets"]["t"]
    csv_bytes = (results / "requests.csv").stat().st_size if (results / "requests.csv").exists() else None
    return {
        "samples": samples,
        "run": {
            "requests": figures["requests"],
            "failures": figures["failures"],
            "throughput_rps": figures["throughput_rps"],
            "configured_rps": args.rate,
            "achieved_ratio": round(figures["throughput_rps"] / args.rate, 4),
            "streaming": summary.get("streaming"),
            "requests_csv_bytes": csv_bytes,
            "open_loop": figures.get("open_loop"),
        },
    }


def markdown(result: dict[str, Any]) -> str:
    run, mc = result["run"], result["machine"]
    streamed, loop = run.get("streaming") or {}, run.get("open_loop") or {}
    lines = [
        f"Soak: {result['minutes']:g} min, {result['workers']} workers, constant-rate {run['configured_rps']:g} req/s, "
        f"`--requests-csv`, streaming to InfluxDB; warm-up {result['warmup_s']:g} s; RSS sampled every "
        f"{result['interval_s']:g} s.",
        "",
        f"Run: {run['requests']:,} requests, {run['failures']} failures, {run['throughput_rps']:.1f} req/s "
        f"(achieved/configured {run['achieved_ratio']:.4f}); requests.csv {run['requests_csv_bytes'] or 0:,} bytes; "
        f"streamed points written {streamed.get('points_written')}, dropped {streamed.get('points_dropped')}; "
        f"open-loop unsent {loop.get('unsent')}, send lag p99 {(loop.get('send_lag_ms') or {}).get('p99')} ms. "
        f"Machine: {mc['cpu_model']}, {mc['usable_cores']} cores; load average at start {mc['load_average_at_start']}, "
        f"at end {result['load_average_at_end']}.",
        "",
        "| process | RSS at warm-up end (MiB) | at end (MiB) | max (MiB) | growth end | growth max | slope (MiB/h) | < 5 % |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, p in result["processes"].items():
        ok = "n/a (not the generator)" if name == "influxdb" else ("met" if p["growth_max"] < GOAL_GROWTH else "missed")
        lines.append(
            f"| {name} | {p['rss_warm_mib']:.1f} | {p['rss_end_mib']:.1f} | {p['rss_max_mib']:.1f} | "
            f"{p['growth'] * 100:+.2f} % | {p['growth_max'] * 100:+.2f} % | {p['slope_mib_per_hour']} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or REPO_ROOT / "results" / f"soak-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    warmup_s = min(max(60.0, args.minutes * 6), args.minutes * 30)

    from inferload.local.influxdb import LocalInfluxDB
    from inferload.local.models.build import build_models
    from inferload.local.servers.manager import LocalServers, urls
    from inferload.local.servers.ports import ServerPorts

    build_models((MODEL,))
    described = machine.describe()
    with tempfile.TemporaryDirectory(prefix="inferload-soak-") as tmp:
        servers = LocalServers(Path(tmp) / "servers", ServerPorts.free(), models=(MODEL,))
        influx = LocalInfluxDB(Path(tmp) / "influx")
        try:
            servers.up(which=("triton",), timeout_s=180)
            influx.start()
            influx.create_database("inferload")
            measured = soak(Path(tmp), urls("triton", servers.ports)["grpc"], influx.url, influx.pid, args)
        finally:
            influx.stop()
            servers.down()
    result: dict[str, Any] = {
        "minutes": args.minutes,
        "workers": args.workers,
        "interval_s": args.interval,
        "warmup_s": warmup_s,
        "goal_growth": GOAL_GROWTH,
        "machine": described,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "run": measured["run"],
        "processes": analyse(measured["samples"], warmup_s),
        "samples": measured["samples"],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2))
    (out / "soak.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
