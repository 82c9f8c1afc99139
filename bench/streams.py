"""Item 12 of `make bench`: stream fidelity (issue 34's goals) at 1, 100 and 1,000 concurrent streams.

Each run is a real `inferload run --headless` of an `openai-chat` target (closed loop, one stream per
user) against the reference server's scripted generations: every request is ``EVENTS`` content
events of one token, event i written (i + 1) holds of a fixed ``HOLD_MS`` after the request's
service starts, with a slot for every stream (no queue). The server records, per request, when it
had read it (received), took its slot (start), its timer saw the last hold end (end) and handed the
stream's last write to the transport (answered). Against them, over the steady state:

- TTFT: inferload's `decoupled.first_response_ms` against the script's (start − received + one
  hold). The server's own timer lateness is in the error (on a loaded machine it is the server's,
  not the client's); `server_late_ms` (end − start − the scripted holds) says how much there was.
- the gaps between content events (one token each, so ICL = ITL): `decoupled.inter_response_ms`
  against one hold (p50; a late event shortens the gap after it, so p99 is not compared).
- the whole stream: `latency_ms` against answered − received, as the server ran: the client's
  own time plus the loopback, both ways.

Errors are p50 and p99 of inferload's figure less the same percentile of the truth's, in ms (the
two distributions, not joined per request). Client CPU: the `inferload run` process tree's CPU
seconds over the run (start-up and warm-up included: an upper bound) per content event received.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from inferload.paths import REPO_ROOT

STREAMS = (1, 100, 1000)
EVENTS = 8
HOLD_MS = 100.0
WARMUP_S = 3
STEADY_S = 12
QUICK_STEADY_S = 5
#: the most an `inferload run` takes from its launch to its first request (interpreter, imports, Locust)
STARTUP_S = 3
MODEL = "identity"


def _percentiles_ms(values_ns: np.ndarray) -> dict[str, float | None]:
    if not len(values_ns):
        return {"p50": None, "p99": None}
    ms = values_ns.astype(np.float64) / 1e6
    return {"p50": round(float(np.percentile(ms, 50)), 4), "p99": round(float(np.percentile(ms, 99)), 4)}


def _error(measured: dict[str, Any], truth: dict[str, float | None], keys: tuple[str, ...] = ("p50", "p99")) -> dict[str, Any]:
    return {
        key: None if measured.get(key) is None or truth.get(key) is None else round(measured[key] - truth[key], 4) for key in keys
    }


def scenario_data(address: str, streams: int, steady_s: int) -> dict[str, Any]:
    return {
        "name": f"bench-streams-{streams}",
        "duration": f"{WARMUP_S + steady_s}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [
            {
                "name": "chat",
                "kind": "openai-chat",
                "address": address,
                "model": MODEL,
                "generation": {"max_tokens": EVENTS},
                "timeout": "30s",
            }
        ],
        "shape": {"kind": "steady", "users": streams, "spawn_rate": max(streams, 1)},
    }


def run_streams(work_dir: Path, streams: int, steady_s: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One run at ``streams`` concurrent streams against a reference server of its own."""
    from inferload.local.reference_server import FixedDelay, ReferenceConfig, ReferenceServerProcess

    folder = work_dir / f"streams-{streams}"
    folder.mkdir(parents=True, exist_ok=True)
    config = ReferenceConfig(
        delay=FixedDelay(ms=HOLD_MS), concurrency=streams + 8, stream_responses=EVENTS, threads=2, record_capacity=5_000_000
    )
    with ReferenceServerProcess(config) as server:
        scenario = folder / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(scenario_data(server.http_url, streams, steady_s)))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched_ns = time.monotonic_ns()
        done = subprocess.run(
            [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(folder / "out")],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=WARMUP_S + steady_s + 120,
        )
        ended_ns = time.monotonic_ns()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = server.records()
    if done.returncode != 0:
        raise RuntimeError(f"inferload run at {streams} streams exited {done.returncode}: {done.stderr[-1500:]}")
    figures = json.loads((folder / "out" / "summary.json").read_text())["targets"]["chat"]
    # the server's records of the steady state (one CLOCK_MONOTONIC for both processes): received after
    # the warm-up and the client's start-up (under STARTUP_S), answered before the run ended
    ok = records.with_status("ok")
    received = records.received_ns.astype(np.int64)
    answered = records.answered_ns.astype(np.int64)
    chosen = ok & (received >= launched_ns + int((WARMUP_S + STARTUP_S) * 1e9)) & (answered <= ended_ns)
    received, answered = received[chosen], answered[chosen]
    start, end = records.start_ns.astype(np.int64)[chosen], records.end_ns.astype(np.int64)[chosen]
    hold_ns = int(HOLD_MS * 1e6)
    ttft_truth = _percentiles_ms(start - received + hold_ns)
    stream_truth = _percentiles_ms(answered - received)
    stream = figures["decoupled"]
    events = int(stream["responses"])
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    result = {
        "streams": streams,
        "requests": figures["requests"],
        "failures": figures["failures"],
        "content_events": events,
        "ttft_ms": {"inferload": {k: stream["first_response_ms"][k] for k in ("p50", "p99")}, "script": ttft_truth},
        "gap_ms": {"inferload": {k: stream["inter_response_ms"][k] for k in ("p50", "p99")}, "script": {"p50": HOLD_MS}},
        "stream_ms": {"inferload": {k: figures["latency_ms"][k] for k in ("p50", "p99")}, "server": stream_truth},
        "server_late_ms": _percentiles_ms(end - start - EVENTS * hold_ns),
        "client_cpu_s": round(cpu_s, 3),
        "client_cpu_us_per_event": round(cpu_s * 1e6 / events, 3) if events else None,
        "server_records_compared": int(chosen.sum()),
    }
    result["ttft_error_ms"] = _error(result["ttft_ms"]["inferload"], ttft_truth)
    result["gap_error_ms"] = _error(result["gap_ms"]["inferload"], {"p50": HOLD_MS}, ("p50",))
    result["stream_error_ms"] = _error(result["stream_ms"]["inferload"], stream_truth)
    log(
        f"streams {streams}: {figures['requests']} requests, TTFT error p50 {result['ttft_error_ms']['p50']} ms, "
        f"p99 {result['ttft_error_ms']['p99']} ms, server late p50 {result['server_late_ms']['p50']} ms, "
        f"CPU {result['client_cpu_us_per_event']} us/event"
    )
    return result


def stream_fidelity(work_dir: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Item 12: one run per stream count, the figures and their errors against the script and the records."""
    steady_s = QUICK_STEADY_S if quick else STEADY_S
    return {
        "events_per_request": EVENTS,
        "hold_ms": HOLD_MS,
        "steady_s": steady_s,
        "runs": [run_streams(work_dir, streams, steady_s, log) for streams in STREAMS],
    }
