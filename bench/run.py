"""`make bench`: benchmarks of the load generator itself, against the real local servers.

    python -m bench.run [--quick] [--out DIR] [--rounds N] [--profile] [--items 10,11]

Starts Triton (identity model, free loopback ports, a temporary state dir; TorchServe too when an
item needs it), measures every client in its own process, side by side and interleaved round by
round, and writes `results/bench-<UTC time>/results.json` and `results.md`; results.json is
rewritten after every item, so an item that fails keeps what the others measured. Everything it
starts is stopped before it returns. The default items are issue 20's: 10, the peers side by side
(bench/peers.py: h2load, wrk, hey, grpc.aio, AIPerf, inferload's engine and Python
transport, against Triton and the reference server; pacing and scale-out) and 11, the engine's
traced per-request residual at 200 req/s; and 12, issue 34's stream fidelity (bench/streams.py: TTFT
and gaps against the reference server's scripted streams at 1, 100 and 1,000 concurrent streams).
Items 1–9 are issue 14's (`--items 1,2,...`).
`--quick`: one round, short runs (a few minutes on a quiet machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import machine
from bench.client import MeasureSpec
from bench.fidelity_trace import traced_residual
from bench.grpc_engine import scale_out, send_path
from bench.llm_join import llm_join
from bench.open_loop import open_loop_accuracy
from bench.peers import FIDELITY_RPS, FULL, QUICK, TritonCount, peers
from bench.profiles import profile_variant
from bench.report import render_markdown
from bench.streams import stream_fidelity
from bench.trace_cost import measure_trace_cost
from bench.wrk import ensure_wrk, lua_post_script, run_wrk
from inferload.paths import REPO_ROOT
from inferload.scenario.targets import DEFAULT_TRACE_RATE

MODEL = "identity"
CPU_RATE_RPS = 250.0  # item 1: the fixed load every variant is measured at
CPU_USERS = 4
CPU_REQUESTS = 2000
MAX_USERS = 16  # item 2: closed loop
MAX_SECONDS = 10.0
FIDELITY_FRACTIONS = (0.1, 0.5, 0.8)  # item 3: loads as fractions of the gRPC maximum
FIDELITY_USERS = 8
FIDELITY_SECONDS = 8.0
SINK_POINTS = 200_000
TARGETS = {
    "grpc_cpu_ratio": 0.7,
    "rest_cpu_ratio": 1.1,
    "fidelity_half_load_ms": 0.3,
    "open_loop_rate_error": 0.01,
    "open_loop_send_lag_p99_ms": 1.0,
    "sink_points_per_s": 100_000,
    "streaming_cost": 0.03,
    "data_set_cpu_cost": 0.10,
    "grpc_saturation_us_per_request": 80.0,
    "trace_cost": 0.03,
}
TRACE_COST_ROUNDS = 4  # item 9: interleaved rounds of plain / traced / traced-all (~30 s a run)
DATA_SET_SAMPLES = 10_000  # item 7: samples in the data set the rotating variant sends
DATA_SET_VARIANTS = ("grpc-inferload", "http-inferload")


@dataclass
class Bench:
    """One bench run: where servers listen, where files go, what was measured."""

    out_dir: Path
    work_dir: Path
    addresses: dict[str, str] = field(default_factory=dict)
    server_pids: dict[str, int] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    runs: int = 0

    def spec(self, variant: str, **overrides: Any) -> MeasureSpec:
        server = "torchserve" if variant.startswith("rest") else "triton"
        return MeasureSpec(
            variant=variant,
            model=MODEL,
            triton_grpc=self.addresses["triton_grpc"],
            triton_http=self.addresses["triton_http"],
            torchserve=self.addresses["torchserve"],
            server_pids=[self.server_pids[server]],
            **overrides,
        )

    def measure(self, spec: MeasureSpec) -> dict[str, Any]:
        """Run one `bench.client` process; its Measurement as a dict."""
        self.runs += 1
        spec_path = self.work_dir / f"spec-{self.runs}.json"
        out_path = self.work_dir / f"out-{self.runs}.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        done = subprocess.run(
            [sys.executable, "-m", "bench.client", str(spec_path), str(out_path)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=spec.timeout_s + 60,
        )
        if done.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"bench.client {spec.variant} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        result = json.loads(out_path.read_text())
        log(
            f"  {spec.variant:15s} {result['requests']:6d} req {result['rps']:8.1f}/s  "
            f"{result['client_cpu_us_per_request']:7.1f} us CPU/req  client {result['client_core_util']:.2f} core  "
            f"server {result['server_core_util']} core  idle {result['machine_idle_frac']:.2f}"
            + (f"  failures {result['failures']}" if result["failures"] else "")
        )
        return result


def log(message: str) -> None:
    print(message, flush=True)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


# ---- item 1 -----------------------------------------------------------------------------

CPU_VARIANTS = ("grpc-inferload", "grpc-plain", "http-inferload", "http-plain", "rest-inferload", "rest-plain")


def client_cpu(bench: Bench, rounds: int) -> dict[str, Any]:
    log(
        f"[1] client CPU per request: {CPU_REQUESTS} requests at {CPU_RATE_RPS:g} req/s, {CPU_USERS} users, "
        f"{rounds} interleaved rounds"
    )
    per_variant: dict[str, list[dict[str, Any]]] = {v: [] for v in (*CPU_VARIANTS, "wrk")}
    wrk, wrk_note = ensure_wrk()
    script = bench.work_dir / "post.lua"
    import numpy as np

    body = np.random.default_rng(1).random((1, 16), dtype=np.float32).tobytes()
    script.write_text(lua_post_script(body, "application/octet-stream"))
    for round_no in range(rounds):
        log(f" round {round_no + 1}")
        for variant in CPU_VARIANTS:
            spec = bench.spec(variant, users=CPU_USERS, rate_rps=CPU_RATE_RPS, warmup_requests=300, requests=CPU_REQUESTS)
            per_variant[variant].append(bench.measure(spec))
        if wrk:
            result = run_wrk(wrk, f"{bench.addresses['torchserve']}/predictions/{MODEL}", script, CPU_USERS, 5.0)
            log(
                f"  wrk             {result['requests']:6d} req {result['rps']:8.1f}/s  "
                f"{result['client_cpu_us_per_request']:7.1f} us CPU/req"
            )
            per_variant["wrk"].append(result)
    us = {v: median([r["client_cpu_us_per_request"] for r in runs]) for v, runs in per_variant.items() if runs}

    def ratio(a: str, b: str) -> float | None:
        return round(us[a] / us[b], 3) if us.get(a) and us.get(b) else None

    return {
        "rate_rps": CPU_RATE_RPS,
        "users": CPU_USERS,
        "requests": CPU_REQUESTS,
        "rounds": rounds,
        "wrk": wrk_note,
        "us_per_request_median": us,
        "ratios": {
            "grpc_inferload_vs_plain": ratio("grpc-inferload", "grpc-plain"),
            "http_inferload_vs_plain": ratio("http-inferload", "http-plain"),
            "rest_inferload_vs_plain": ratio("rest-inferload", "rest-plain"),
            "rest_inferload_vs_wrk": ratio("rest-inferload", "wrk"),
        },
        "runs": per_variant,
    }


# ---- item 2 -----------------------------------------------------------------------------


def max_throughput(bench: Bench) -> dict[str, Any]:
    log(f"[2] max requests/s of one worker process: closed loop, {MAX_USERS} users, {MAX_SECONDS:g} s")
    out: dict[str, Any] = {"users": MAX_USERS, "seconds": MAX_SECONDS, "variants": {}}
    for variant in ("grpc-inferload", "http-inferload", "rest-inferload"):
        r = bench.measure(
            bench.spec(variant, users=MAX_USERS, rate_rps=None, warmup_requests=500, requests=None, seconds=MAX_SECONDS)
        )
        if r["client_core_util"] >= 0.85:
            r["limit"] = "client (its one core is busy)"
        elif r["machine_idle_frac"] < 0.10:
            r["limit"] = "machine (client + server + neighbours use both cores)"
        else:
            r["limit"] = "server (client and machine have headroom)"
        out["variants"][variant] = r
    return out


# ---- item 3 -----------------------------------------------------------------------------


def fidelity(bench: Bench, grpc_max_rps: float) -> dict[str, Any]:
    log(f"[3] fidelity over gRPC: client mean - Triton's request_ms_avg at {FIDELITY_FRACTIONS} of {grpc_max_rps:.0f} req/s")
    loads = []
    for fraction in FIDELITY_FRACTIONS:
        rate = round(grpc_max_rps * fraction)
        row: dict[str, Any] = {"fraction": fraction, "rate_rps": rate}
        variants = ("grpc-inferload", "grpc-inferload-python", "grpc-plain") if fraction == 0.5 else ("grpc-inferload",)
        for variant in variants:
            r = bench.measure(
                bench.spec(
                    variant,
                    users=FIDELITY_USERS,
                    rate_rps=rate,
                    warmup_requests=300,
                    requests=None,
                    seconds=FIDELITY_SECONDS,
                    triton_stats=True,
                )
            )
            gap = None
            if r["client_mean_ms"] is not None and r["server_request_ms_avg"] is not None:
                gap = round(r["client_mean_ms"] - r["server_request_ms_avg"], 4)
            row[variant] = {
                **{
                    k: r[k]
                    for k in (
                        "rps",
                        "client_mean_ms",
                        "server_request_ms_avg",
                        "server_queue_ms_avg",
                        "server_compute_ms_avg",
                        "server_avg_batch_size",
                        "client_core_util",
                        "machine_idle_frac",
                        "failures",
                    )
                },
                "gap_ms": gap,
            }
            log(f"    gap {gap} ms (client {r['client_mean_ms']} ms, Triton {r['server_request_ms_avg']} ms)")
        if fraction == 0.5:  # the per-request residual: a traced `inferload run` at the same rate
            row["traced_residual"] = traced_residual(
                bench.work_dir, bench.addresses["triton_grpc"], rate, FIDELITY_USERS, FIDELITY_SECONDS, log
            )
        loads.append(row)
    return {"users": FIDELITY_USERS, "seconds": FIDELITY_SECONDS, "loads": loads}


# ---- item 5 -------------------------------------------------------------------------


def streaming_cost(bench: Bench, rounds: int) -> dict[str, Any]:
    needed = ("inferload.observe.influx_export", "inferload.observe.sink")
    if any(importlib.util.find_spec(m) is None for m in needed):
        return {"measured": False, "note": "not measured yet: inferload/sink or inferload/observe/influx_export.py missing"}
    from inferload.local.influxdb import LocalInfluxDB

    log("[5] streaming cost: InfluxDB sink points/s, generator with streaming on vs off")
    influx = LocalInfluxDB(bench.work_dir / "influx")
    try:
        influx.start()
        influx.create_database("bench")
        out_path = bench.work_dir / "sink.json"
        subprocess.run(
            [sys.executable, "-m", "bench.sink_bench", influx.url, "bench", str(SINK_POINTS), str(out_path)],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            text=True,
            timeout=180,
        )
        sink = json.loads(out_path.read_text())
        log(f"  sink: {sink['points_written']} points in {sink['wall_s']} s = {sink['points_per_s']:.0f} points/s")
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        for _ in range(rounds):
            for mode in ("off", "on"):
                spec = bench.spec(
                    "grpc-inferload",
                    users=MAX_USERS,
                    rate_rps=None,
                    warmup_requests=500,
                    requests=None,
                    seconds=MAX_SECONDS,
                    influx_url=influx.url if mode == "on" else None,
                )
                runs[mode].append(bench.measure(spec))
    finally:
        influx.stop()
    rps = {m: median([r["rps"] for r in rs]) for m, rs in runs.items()}
    cpu = {m: median([r["client_cpu_us_per_request"] for r in rs]) for m, rs in runs.items()}
    return {
        "measured": True,
        "sink": sink,
        "rps": rps,
        "us_per_request": cpu,
        "throughput_cost": round(1 - rps["on"] / rps["off"], 4) if rps["off"] else None,
        "cpu_cost": round(cpu["on"] / cpu["off"] - 1, 4) if cpu["off"] else None,
        "points_streamed": [r["streaming"] for r in runs["on"]],
        "runs": runs,
    }


# ---- item 7 -----------------------------------------------------------------------------


def data_set_cost(bench: Bench, rounds: int) -> dict[str, Any]:
    """Client CPU per request sending from a data set of 10,000 samples vs one fixed payload."""
    import numpy as np

    log(
        f"[7] data-set rotation cost: {DATA_SET_SAMPLES:,} samples vs a fixed payload, {CPU_REQUESTS} requests at "
        f"{CPU_RATE_RPS:g} req/s, {CPU_USERS} users, {rounds} interleaved rounds"
    )
    path = bench.work_dir / "samples.npy"
    np.save(path, np.random.default_rng(7).random((DATA_SET_SAMPLES, 16), dtype=np.float32))
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {v: {"fixed": [], "data set": []} for v in DATA_SET_VARIANTS}
    for round_no in range(rounds):
        log(f" round {round_no + 1}")
        for variant in DATA_SET_VARIANTS:
            modes = ("fixed", "data set") if round_no % 2 == 0 else ("data set", "fixed")  # ABBA: no order bias
            for mode in modes:
                spec = bench.spec(
                    variant,
                    users=CPU_USERS,
                    rate_rps=CPU_RATE_RPS,
                    warmup_requests=300,
                    requests=CPU_REQUESTS,
                    dataset=str(path) if mode == "data set" else None,
                )
                runs[variant][mode].append(bench.measure(spec))
    us = {v: {m: median([r["client_cpu_us_per_request"] for r in rs]) for m, rs in modes.items()} for v, modes in runs.items()}
    return {
        "samples": DATA_SET_SAMPLES,
        "rate_rps": CPU_RATE_RPS,
        "users": CPU_USERS,
        "requests": CPU_REQUESTS,
        "rounds": rounds,
        "us_per_request_median": us,
        "cpu_cost": {v: round(m["data set"] / m["fixed"] - 1, 4) if m["fixed"] else None for v, m in us.items()},
        "runs": runs,
    }


ITEMS = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13)

# ---- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (default results/bench-<UTC time>)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="one round of short runs (item 10: 1 s / 4 s / 3 s paced)")
    parser.add_argument("--profile", action="store_true", help="also record py-spy profiles of the gRPC and REST users")
    parser.add_argument(
        "--items",
        default="10,11,12,13",
        help="comma-separated items to run (default 10,11,12,13: issue 20's, issue 34's streams, issue 35's join on llama.cpp;"
        " 1-9 are issue 14's; 3 and 4 need 2)",
    )
    parser.add_argument(
        "--soak-result", type=Path, help="a soak.json of `make soak` (bench/soak.py): goal 4's figure in the goals table"
    )
    args = parser.parse_args(argv)
    try:
        items = {int(x) for x in args.items.split(",") if x.strip()}
    except ValueError:
        parser.error(f"--items: expected comma-separated item numbers, got {args.items!r}")
    if not items <= set(ITEMS):
        parser.error(f"--items: unknown item(s) {sorted(items - set(ITEMS))}; known: {ITEMS}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if items & {3, 4}:
        items.add(2)
    started = time.monotonic()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or REPO_ROOT / "results" / f"bench-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started_at": stamp,
        "machine": machine.describe(),
        "model": MODEL,
        "targets": TARGETS,
        "quick": args.quick,
        "items": sorted(items),
        "item_load": {},
        "item_errors": {},
    }
    if args.soak_result is not None:
        results["soak"] = json.loads(args.soak_result.read_text())
    log(f"inferload bench -> {out_dir}\nmachine: {json.dumps(results['machine'])}")

    from inferload.local.models.build import build_models
    from inferload.local.servers.manager import LocalServers, urls
    from inferload.local.servers.ports import ServerPorts

    build_models((MODEL,))

    def keep() -> None:
        (out_dir / "results.json").write_text(json.dumps(results, indent=2))

    def keep_peers(partial: dict[str, Any]) -> None:
        results["peers"] = partial
        keep()

    def item(number: int, key: str, measure: Any) -> None:
        """Run one item: its result under ``key``, its load average at start and end, any error
        recorded (the other items still run), results.json rewritten."""
        if number not in items:
            return
        load_start = [round(x, 2) for x in os.getloadavg()]
        try:
            results[key] = measure()
        except Exception as error:  # an item's failure must not lose the others' figures
            results["item_errors"][str(number)] = f"{type(error).__name__}: {error}"
            log(f"item {number} failed: {error}")
        results["item_load"][str(number)] = {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]}
        keep()

    which = ("triton", "torchserve") if items & {1, 2, 3, 5, 7} else ("triton",)
    with tempfile.TemporaryDirectory(prefix="inferload-bench-") as tmp:
        bench = Bench(out_dir=out_dir, work_dir=Path(tmp))
        servers = LocalServers(Path(tmp) / "servers", ServerPorts.free(), models=(MODEL,))
        try:
            up = servers.up(which=which, timeout_s=300)
            triton, ts = urls("triton", servers.ports), urls("torchserve", servers.ports)
            bench.addresses = {"triton_grpc": triton["grpc"], "triton_http": triton["http"], "torchserve": ts["inference"]}
            bench.server_pids = {name: entry["pid"] for name, entry in up["servers"].items()}
            log(f"servers up: {bench.addresses}")
            item(
                10,
                "peers",
                lambda: peers(
                    TritonCount(bench.addresses["triton_grpc"], bench.addresses["triton_http"]),
                    QUICK if args.quick else FULL,
                    args.rounds,
                    log,
                    keep_peers,
                ),
            )
            item(
                11,
                "traced_residual",
                lambda: traced_residual(
                    bench.work_dir,
                    bench.addresses["triton_grpc"],
                    FIDELITY_RPS,
                    16,
                    (QUICK if args.quick else FULL).paced_s,
                    log,
                ),
            )
            item(12, "stream_fidelity", lambda: stream_fidelity(bench.work_dir, args.quick, log))
            item(13, "llm_join", lambda: llm_join(bench.work_dir, log))
            item(1, "client_cpu", lambda: client_cpu(bench, args.rounds))
            item(2, "max_throughput", lambda: max_throughput(bench))
            grpc_max = ((results.get("max_throughput") or {}).get("variants") or {}).get("grpc-inferload", {}).get("rps", 0.0)
            item(3, "fidelity", lambda: fidelity(bench, grpc_max))
            item(
                4,
                "open_loop_accuracy",
                lambda: open_loop_accuracy(
                    bench.work_dir, grpc_max, bench.addresses["triton_grpc"], MODEL, log, out_dir if args.profile else None
                ),
            )
            item(5, "streaming", lambda: streaming_cost(bench, 2))
            item(7, "data_set", lambda: data_set_cost(bench, args.rounds))

            def engine_item() -> dict[str, Any]:
                engine = send_path(bench.measure, bench.spec, bench.addresses["triton_grpc"], MODEL, args.rounds, log)
                engine["scale_out"] = scale_out(bench.spec, log)
                return engine

            item(8, "grpc_engine", engine_item)
            if args.profile:
                results["profiles"] = {
                    v: profile_variant(
                        bench,
                        bench.spec(v, users=CPU_USERS, rate_rps=CPU_RATE_RPS, warmup_requests=300, requests=CPU_REQUESTS),
                        out_dir,
                    )
                    for v in ("grpc-inferload", "grpc-plain", "rest-inferload", "rest-plain")
                }
            if 9 in items:  # last: tracing every request has crashed this Triton build (docs/observability.md)
                item(
                    9,
                    "trace_cost",
                    lambda: measure_trace_cost(
                        bench.work_dir,
                        bench.addresses["triton_grpc"],
                        bench.addresses["triton_http"],
                        bench.server_pids["triton"],
                        TRACE_COST_ROUNDS,
                        8.0,
                        MAX_USERS,
                        DEFAULT_TRACE_RATE,
                        log,
                    ),
                )
                log_file = Path(up["servers"]["triton"]["log"])
                if (results.get("trace_cost") or {}).get("error") and log_file.is_file():  # the figures so far are kept
                    shutil.copy(log_file, out_dir / "triton-item9.log")
        finally:
            servers.down()
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    keep()
    markdown = render_markdown(results)
    (out_dir / "results.md").write_text(markdown)
    log("\n" + markdown)
    log(f"written: {out_dir / 'results.json'}, {out_dir / 'results.md'} ({results['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
