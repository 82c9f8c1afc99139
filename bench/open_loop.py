"""Item 4 of `make bench`: open-loop arrival accuracy against the real Triton (gRPC, `identity`).

Each run is a real open-loop run through the real `locust` command, as a user would start it
(`--scenario` with `shape: {kind: poisson | constant-rate, rate, max_in_flight, seed}`), at a
fraction of the capacity item 2 measured in the same bench run. Its summary.json gives
`targets[<name>]["open_loop"]`: configured and achieved rate (arrivals sent per steady second),
unsent arrivals, and the send lag (intended -> actual send time) percentiles.

A Poisson run's arrival count is itself random: at R req/s over T s its standard deviation is
sqrt(R T) (0.5 % of the count at 2,000/s over 20 s), so "achieved within 1 % of the configured
rate" can be missed by the draw alone. The generator's own count for the seed is therefore
replayed here (the scenario's arrival law, `inferload.traffic.arrivals.law_for`, over the same steady
window with the run's seed: every process draws that one stream) and reported next to the run's:
`achieved / expected` isolates the generator's error from the draw's randomness
(`expected / configured`).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.profiles import summarise_collapsed
from inferload.paths import LOCUSTFILE, REPO_ROOT
from inferload.scenario.schema import Scenario, is_open_loop
from inferload.traffic.arrivals import SEED_MULTIPLIER, law_for

FRACTIONS = (0.5, 0.8)  # of item 2's gRPC closed-loop maximum
KINDS = ("poisson", "constant-rate")
WARMUP_S = 3  # excluded from every figure
STEADY_S = 20
SEED = 7
MAX_IN_FLIGHT = 64  # senders (the shape's default); item 2 needs 16 closed-loop users for its maximum
TARGET_NAME = "triton-grpc"


def process_seed(seed: int, target_index: int = 0) -> int:
    """The seed of a target's stream in `inferload.traffic.arrivals.RateLaw` (one target: index 0)."""
    return seed * SEED_MULTIPLIER + target_index


def scenario_data(kind: str, rate: float, address: str, model: str, seed: int = SEED) -> dict[str, Any]:
    shape: dict[str, Any] = {"kind": kind, "rate": rate, "max_in_flight": MAX_IN_FLIGHT}
    if kind == "poisson":
        shape["seed"] = seed
    return {
        "name": f"bench-open-loop-{kind}",
        "duration": f"{WARMUP_S + STEADY_S}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [
            {
                "name": TARGET_NAME,
                "kind": "triton-grpc",
                "address": address,
                "model": model,
                "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 1}}],
                "timeout": "5s",
            }
        ],
        "shape": shape,
    }


def expected_arrivals(scenario: Scenario, start: float, end: float, seed: int) -> int:
    """How many arrivals the scenario's arrival law draws in [start, end) of run time, for this seed."""
    assert is_open_loop(scenario.shape), scenario.shape
    return sum(1 for arrival in law_for(scenario).arrivals(seed) if start <= arrival.t_s < end)


def run_one(work_dir: Path, kind: str, rate: float, address: str, model: str, profile_to: Path | None = None) -> dict[str, Any]:
    folder = work_dir / f"open-loop-{kind}-{rate:g}"
    folder.mkdir(parents=True, exist_ok=True)
    data = scenario_data(kind, rate, address, model)
    scenario_path = folder / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(data, sort_keys=False))
    results = folder / "results"
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--scenario",
        str(scenario_path),
        "--headless",
        "--only-summary",
        "--results-dir",
        str(results),
    ]
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if profile_to is not None and Path(py_spy).exists():
        command = [py_spy, "record", "--format", "raw", "--rate", "200", "-o", str(profile_to), "--", *command]
    else:
        profile_to = None
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = psutil.cpu_times()
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=WARMUP_S + STEADY_S + 90)
    wall = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_after = psutil.cpu_times()
    summary_path = results / "summary.json"
    if not summary_path.exists():
        raise RuntimeError(
            f"open-loop {kind} at {rate:g}/s wrote no summary (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
        )
    summary = json.loads(summary_path.read_text())
    figures = summary["targets"][TARGET_NAME]
    ol = figures["open_loop"]
    steady_s = summary["steady_s"]
    scenario = Scenario.model_validate(data)
    seed = data["shape"].get("seed")
    expected = expected_arrivals(scenario, WARMUP_S, WARMUP_S + steady_s, seed or 0)  # constant-rate draws nothing
    configured_count = ol["configured_rps"] * steady_s
    sent = ol["arrivals"] - ol["unsent"]
    idle = (machine_after.idle - machine_before.idle) + (
        getattr(machine_after, "iowait", 0) - getattr(machine_before, "iowait", 0)
    )
    total = sum(machine_after) - sum(machine_before)
    profile = None
    if profile_to is not None and profile_to.exists():
        profile = summarise_collapsed(profile_to.read_text())
        profile["raw"] = profile_to.name
    return {
        "kind": kind,
        "rate_rps": rate,
        "seed": seed,
        "process_seed": None if seed is None else process_seed(seed),
        "exit_code": done.returncode,
        "steady_s": steady_s,
        # the run stops a little after the schedule's last arrival: summary.json's steady_s (and so
        # configured_rps x steady_s) counts that tail, where no arrival is due
        "stop_overshoot_s": round(steady_s - STEADY_S, 3),
        "configured_rps": ol["configured_rps"],
        "arrivals": ol["arrivals"],
        "unsent": ol["unsent"],
        "achieved_rps": round(ol["achieved_rps"], 2),
        "achieved_ratio": None if ol["achieved_ratio"] is None else round(ol["achieved_ratio"], 5),
        # the generator's own count for this seed over the same steady window (the draw, no timing)
        "expected_arrivals": expected,
        "expected_ratio": round(expected / configured_count, 5) if configured_count else None,
        "sent_vs_expected": round(sent / expected, 5) if expected else None,
        "send_lag_ms": {k: (None if v is None else round(v, 4)) for k, v in ol["send_lag_ms"].items()},
        "completed_rps": round(figures["throughput_rps"], 1),
        "failures": figures["failures"],
        "latency_ms": {
            k: (None if figures["latency_ms"].get(k) is None else round(figures["latency_ms"][k], 3))
            for k in ("p50", "p99", "max")
        },
        "server_request_ms_avg": (figures.get("server_side") or {}).get("request_ms_avg"),
        "wall_s": round(wall, 2),
        # whole locust process, start-up and warm-up included: a rough figure only
        "client_cpu_s": round((cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime), 2),
        "machine_idle_frac": round(idle / total, 3) if total > 0 else None,
        **({"profile": profile} if profile else {}),
    }


def open_loop_accuracy(
    work_dir: Path, capacity_rps: float, address: str, model: str, log: Any = print, profile_dir: Path | None = None
) -> dict[str, Any]:
    """Every shape at every load, one real locust run each; with `profile_dir`, Poisson at the
    highest load also runs under py-spy (its CPU profile; the timing figures then carry
    py-spy's sampling cost)."""
    log(
        f"[4] open-loop accuracy: {'/'.join(KINDS)} at {'/'.join(f'{f:.0%}' for f in FRACTIONS)} of "
        f"{capacity_rps:.0f} req/s (item 2), {MAX_IN_FLIGHT} senders, {WARMUP_S} s warm-up + {STEADY_S} s, seed {SEED}"
    )
    runs = []
    for fraction in FRACTIONS:
        rate = float(round(capacity_rps * fraction))
        for kind in KINDS:
            profile_to = None
            if profile_dir is not None and kind == "poisson" and fraction == max(FRACTIONS):
                profile_to = profile_dir / f"profile-open-loop-{kind}-{fraction:.0%}.txt".replace("%", "pct")
            r = run_one(work_dir, kind, rate, address, model, profile_to)
            r["fraction"] = fraction
            runs.append(r)
            lag = r["send_lag_ms"]
            log(
                f"  {kind:13s} {rate:7.0f}/s  achieved {r['achieved_rps']:8.1f}/s ratio {r['achieved_ratio']}  "
                f"expected-by-seed {r['expected_arrivals']} (x{r['expected_ratio']})  arrivals {r['arrivals']} "
                f"unsent {r['unsent']}  lag p50/p99/max {lag['p50']}/{lag['p99']}/{lag['max']} ms  "
                f"idle {r['machine_idle_frac']}"
            )
    return {
        "measured": True,
        "capacity_rps": capacity_rps,
        "capacity_from": "item 2, grpc-inferload closed loop",
        "fractions": list(FRACTIONS),
        "kinds": list(KINDS),
        "warmup_s": WARMUP_S,
        "steady_s": STEADY_S,
        "seed": SEED,
        "max_in_flight": MAX_IN_FLIGHT,
        "runs": runs,
    }
