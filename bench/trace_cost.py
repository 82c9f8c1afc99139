"""The cost of the trace join (issue 15, item 5): throughput and CPU with and without ``trace``.

    python -m bench.trace_cost [--rounds 8] [--seconds 8] [--users 16] [--rate 0.01] [--out DIR]

Starts the local Triton (model ``identity``, free loopback ports, a temporary state dir; its trace
file set at start, tracing off, as ``inferload servers up`` does), then runs the same closed-loop
scenario (gRPC, ``--users`` users, 2 s warm-up excluded) as real ``inferload run --headless`` runs in
three variants: without ``trace`` (``plain``), with ``trace: {rate: R}`` (``traced``, the default
rate) and with ``trace: {rate: 1}`` (``traced-all``: every request traced, the most the server can
be made to pay, so that the measurement shows it can see a cost). The variants' order rotates
round by round. Per run it takes the steady throughput and, sampled every 0.25 s over the steady
span only, Triton's and the client's CPU per inference (psutil, each side's process tree, over
Triton's own inference count from its statistics API). The cost
is reported two ways: the median of the per-round paired ratios traced / plain of throughput, and
the added CPU per inference (client + server) as a share of the plain run's: on a machine where
client and server share the cores and the load is closed-loop, the throughput drop is that share.
Also item 9 of ``python -m bench.run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.cpu_accounting import tree_cpu_s

MODEL = "identity"
WARMUP_S = 2
VARIANTS: tuple[tuple[str, float | None], ...] = (("plain", None), ("traced", 0.01), ("traced-all", 1.0))


def identity_target(address: str) -> dict[str, Any]:
    """A gRPC target on the local Triton's ``identity`` model (the trace cost's and the soak's)."""
    return {
        "name": "t",
        "kind": "triton-grpc",
        "address": address,
        "model": MODEL,
        "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 1}}],
        "timeout": "5s",
    }


def scenario(address: str, users: int, seconds: float, rate: float | None) -> dict[str, Any]:
    target = identity_target(address)
    if rate is not None:
        target["trace"] = {"rate": rate}
    return {
        "name": "trace-cost",
        "duration": f"{WARMUP_S + seconds:g}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [target],
        "shape": {"kind": "steady", "users": users},
    }


def _inference_count(http_url: str) -> int:
    """Triton's own count of successful inferences of the model (statistics API)."""
    base = http_url if "://" in http_url else f"http://{http_url}"
    with urllib.request.urlopen(f"{base}/v2/models/{MODEL}/stats", timeout=10) as answer:
        stats = json.loads(answer.read())
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


def _steady_slopes(samples: list[tuple[float, int, float, float]]) -> tuple[float | None, float | None]:
    """Client and server CPU µs per inference over the samples taken while the load was steady.

    A sample is (time, Triton's inference count, client tree CPU s, server tree CPU s). Steady: from
    ``WARMUP_S`` after the count first moved to the last sample before it stopped moving, so the
    client's start-up (imports, model checks) and shutdown are not charged to the requests.
    """
    moving = [i for i in range(1, len(samples)) if samples[i][1] > samples[i - 1][1]]
    if not moving:
        return None, None
    first_t = samples[moving[0] - 1][0]
    steady = [s for s in samples[moving[0] - 1 : moving[-1] + 1] if s[0] >= first_t + WARMUP_S]
    if len(steady) < 2 or steady[-1][1] <= steady[0][1]:
        return None, None
    count = steady[-1][1] - steady[0][1]
    return (steady[-1][2] - steady[0][2]) / count * 1e6, (steady[-1][3] - steady[0][3]) / count * 1e6


def run_one(folder: Path, data: dict[str, Any], triton_pid: int, http_url: str) -> dict[str, Any]:
    """One real ``inferload run --headless``; CPU sampled every 0.25 s (client tree and Triton's)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = folder / "results"
    with open(folder / "run.log", "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inferload.cli", "run", str(path), "--headless", "--out", str(out)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        samples: list[tuple[float, int, float, float]] = []
        while proc.poll() is None:
            client_cpu = tree_cpu_s([proc.pid])
            if proc.poll() is not None:  # it ended while sampled: its tree is gone, not idle
                break
            samples.append((time.monotonic(), _inference_count(http_url), client_cpu, tree_cpu_s([triton_pid])))
            time.sleep(0.25)
        returncode = proc.wait(timeout=300)
    if returncode != 0:
        raise RuntimeError(f"inferload run failed ({returncode}): {(folder / 'run.log').read_text()[-2000:]}")
    figures = json.loads((out / "summary.json").read_text())["targets"]["t"]
    tail = figures.get("tail") or {}
    client_us, server_us = _steady_slopes(samples)
    return {
        "throughput_rps": figures["throughput_rps"],
        "p99_ms": figures["latency_ms"]["p99"],
        "joined": tail.get("joined"),
        "server_cpu_us": round(server_us, 2) if server_us is not None else None,
        "client_cpu_us": round(client_us, 2) if client_us is not None else None,
    }


def _paired(runs: dict[str, list[dict[str, Any]]], variant: str, key: str) -> list[float]:
    return [t[key] / p[key] for t, p in zip(runs[variant], runs["plain"], strict=True) if p[key]]


def summarize(runs: dict[str, list[dict[str, Any]]], rate: float) -> dict[str, Any]:
    """Medians per variant, paired ratios to the same round's plain run, and the CPU share added."""
    med = {
        v: {k: statistics.median(r[k] for r in rs) for k in ("throughput_rps", "server_cpu_us", "client_cpu_us")}
        for v, rs in runs.items()
    }
    out: dict[str, Any] = {"rate": rate, "medians": med}
    plain_cpu = med["plain"]["server_cpu_us"] + med["plain"]["client_cpu_us"]
    for variant in runs:
        if variant == "plain":
            continue
        ratios = _paired(runs, variant, "throughput_rps")
        added = med[variant]["server_cpu_us"] + med[variant]["client_cpu_us"] - plain_cpu
        out[variant] = {
            "throughput_ratio_median": round(statistics.median(ratios), 4),
            "throughput_ratio_min": round(min(ratios), 4),
            "throughput_ratio_max": round(max(ratios), 4),
            "server_cpu_ratio_median": round(statistics.median(_paired(runs, variant, "server_cpu_us")), 4),
            "client_cpu_ratio_median": round(statistics.median(_paired(runs, variant, "client_cpu_us")), 4),
            "added_cpu_us_per_inference": round(added, 2),
            "added_cpu_share": round(added / plain_cpu, 4) if plain_cpu else None,
        }
    return out


def measure_trace_cost(
    work_dir: Path,
    grpc_address: str,
    http_url: str,
    triton_pid: int,
    rounds: int,
    seconds: float,
    users: int,
    rate: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Interleaved rounds of the three variants against a running Triton; medians and ratios.

    A run that fails (Triton 2.51 has crashed tracing every request, docs/observability.md) ends the
    measurement: the rounds completed before it are summarized and the failure is in ``error``."""
    variants = [(name, rate if name == "traced" else r) for name, r in VARIANTS]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    error: str | None = None
    for round_no in range(rounds):
        shift = round_no % len(variants)
        for variant, variant_rate in variants[shift:] + variants[:shift]:
            try:
                result = run_one(
                    work_dir / f"trace-cost-{variant}-{round_no}",
                    scenario(grpc_address, users, seconds, variant_rate),
                    triton_pid,
                    http_url,
                )
            except (OSError, RuntimeError) as failure:
                error = f"round {round_no + 1}, {variant}: {type(failure).__name__}: {failure}"
                log(f"trace cost {error}")
                break
            runs[variant].append(result)
            log(
                f"trace cost round {round_no + 1} {variant:10s} {result['throughput_rps']:8.1f} req/s  "
                f"server {result['server_cpu_us']:6.1f} µs  client {result['client_cpu_us']:6.1f} µs  "
                f"p99 {result['p99_ms']:.2f} ms  joined {result['joined']}"
            )
        if error is not None:
            break
    complete = min(len(r) for r in runs.values())
    runs = {name: r[:complete] for name, r in runs.items()}
    summary: dict[str, Any] = {"users": users, "seconds": seconds, "rounds": complete, "error": error, "runs": runs}
    if complete:
        summary.update(summarize(runs, rate))
    return summary


def markdown(result: dict[str, Any], max_cost: float) -> list[str]:
    """The bench report's section: throughput and CPU per variant, the cost against ``max_cost``."""
    if "medians" not in result:
        return ["### 9. Trace join cost (issue 15)", "", f"Not measured: {result.get('error')}."]
    med = result["medians"]
    traced = result["traced"]
    drop = 1 - traced["throughput_ratio_median"]
    verdict = "met" if drop <= max_cost and (traced["added_cpu_share"] or 0) <= max_cost else "**missed**"
    lines = [
        f"### 9. Trace join cost (issue 15): {result['rounds']} rounds, closed loop, {result['users']} users, "
        f"{result['seconds']:g} s steady",
        "",
        "| variant | throughput (req/s) | Triton CPU µs/inference | client CPU µs/inference | throughput / plain (paired median, min–max) |",
        "|---|---|---|---|---|",
        f"| plain | {med['plain']['throughput_rps']:.0f} | {med['plain']['server_cpu_us']:.1f} | {med['plain']['client_cpu_us']:.1f} | |",
    ]
    for variant in ("traced", "traced-all"):
        v = result[variant]
        lines.append(
            f"| {variant} | {med[variant]['throughput_rps']:.0f} | {med[variant]['server_cpu_us']:.1f} | "
            f"{med[variant]['client_cpu_us']:.1f} | {v['throughput_ratio_median']:.3f} "
            f"({v['throughput_ratio_min']:.3f}–{v['throughput_ratio_max']:.3f}) |"
        )
    lines += [
        "",
        f"At the default rate ({result['rate']:g}) throughput changes by {-drop:+.1%} (paired median) and the client + "
        f"server CPU per inference by {traced['added_cpu_share']:+.1%}; bound: a cost of at most {max_cost:.0%}: {verdict}. "
        f"Every request traced (`rate: 1`): {result['traced-all']['throughput_ratio_median'] - 1:+.1%} and "
        f"{result['traced-all']['added_cpu_share']:+.1%}.",
    ]
    if result.get("error"):
        lines += ["", f"Ended early, after {result['rounds']} complete round(s): {result['error']}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from inferload.local.models.build import build_models
    from inferload.local.servers.manager import LocalServers, urls
    from inferload.local.servers.ports import ServerPorts

    build_models((MODEL,))
    with tempfile.TemporaryDirectory(prefix="inferload-trace-cost-") as tmp:
        servers = LocalServers(Path(tmp) / "servers", ServerPorts.free(), models=(MODEL,))
        try:
            up = servers.up(which=("triton",), timeout_s=180)
            triton = urls("triton", servers.ports)
            result = measure_trace_cost(
                Path(tmp),
                triton["grpc"],
                triton["http"],
                up["servers"]["triton"]["pid"],
                args.rounds,
                args.seconds,
                args.users,
                args.rate,
                lambda line: print(line, flush=True),
            )
        except Exception:
            from inferload.local.servers.procs import log_tail

            print(f"Triton's log, last lines:\n{log_tail(up['servers']['triton']['log'])}", file=sys.stderr)
            raise
        finally:
            servers.down()
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "trace-cost.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
