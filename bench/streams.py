"""Item 12 of `make bench`: stream fidelity (issue 34's goals) at 1, 100, 1,000 and 10,000 concurrent streams.

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

The scale run (``scale``): inferload alone at SCALE_STREAMS streams from one process, the events
SCALE_HOLD_MS apart (the events per second of 1,000 streams at HOLD_MS), the same figures.

The peers (``runs[i]["peers"][tool]``): after inferload's run at each stream count, AIPerf, GuideLLM
and inference-perf (each in a venv of its own: bench/aiperf.py, bench/guidellm.py,
bench/inference_perf.py) run the same script against a fresh reference server of the same
configuration: streamed chat completions, ``streams`` in flight (closed loop), for the steady time
(AIPerf's and GuideLLM's duration options; inference-perf takes a request count: as many as the
streams can finish in that time), each in a process group of its own ended at a deadline. Each
tool's own TTFT p50/p99 and ITL p50 (bench/peer_output.py says what each one's ITL is) against the
truth of every request that server answered while the tool ran (the tools have no warm-up to
leave out): TTFT error against the script's (start − received + one hold), ITL p50 error against
one hold. A peer that cannot be installed, run or read records its error text there and the
others still run.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.aiperf import aiperf_chat_stream_command, ensure_aiperf
from bench.guidellm import REPORT_NAME as GUIDELLM_REPORT
from bench.guidellm import ensure_guidellm, guidellm_command
from bench.inference_perf import REPORT_NAME as INFERENCE_PERF_REPORT
from bench.inference_perf import ensure_inference_perf, inference_perf_command, inference_perf_config
from bench.peer_output import StreamReport, parse_aiperf_stream, parse_guidellm_stream, parse_inference_perf_stream
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
#: the scale run: inferload alone, SCALE_STREAMS streams from one process, events SCALE_HOLD_MS apart
#: (10,000 events/s, as 1,000 streams at HOLD_MS), the streams started over SCALE_WARMUP_S (one request)
SCALE_STREAMS = 10_000
SCALE_HOLD_MS = 1000.0
SCALE_WARMUP_S = 8
#: its steady time, --quick too: the server's records of it are the requests received after the
#: warm-up and answered before the end, so it must outlast one request (EVENTS × SCALE_HOLD_MS)
SCALE_STEADY_S = 20
#: the peers run on the same script after inferload at each stream count
PEERS = ("aiperf", "guidellm", "inference-perf")
#: the most a peer's run may take beyond its steady time (interpreter, tokenizer, workers, its report)
PEER_SLACK_S = 150
#: what the peers' environments need offline (the Hugging Face hub cannot be reached); not AIPerf's:
#: in its offline mode AIPerf 0.13.0 looks a tokenizer up in the hub's cache only, a folder's path too
#: (aiperf/common/tokenizer.py, _resolve_local_snapshot), so it is given the folder without it
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
PEER_ENV = {"aiperf": {}, "guidellm": OFFLINE_ENV, "inference-perf": OFFLINE_ENV}


def _percentiles_ms(values_ns: np.ndarray) -> dict[str, float | None]:
    if not len(values_ns):
        return {"p50": None, "p99": None}
    ms = values_ns.astype(np.float64) / 1e6
    return {"p50": round(float(np.percentile(ms, 50)), 4), "p99": round(float(np.percentile(ms, 99)), 4)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _error(measured: dict[str, Any], truth: dict[str, float | None], keys: tuple[str, ...] = ("p50", "p99")) -> dict[str, Any]:
    return {
        key: None if measured.get(key) is None or truth.get(key) is None else round(measured[key] - truth[key], 4) for key in keys
    }


def scenario_data(address: str, streams: int, steady_s: int, warmup_s: int = WARMUP_S) -> dict[str, Any]:
    """inferload's run: ``streams`` users, each one stream at a time, started over one second (over
    the warm-up when it is longer than one request: the scale run's streams then do not move in step)."""
    spawn_s = 1 if warmup_s == WARMUP_S else warmup_s
    return {
        "name": f"bench-streams-{streams}",
        "duration": f"{warmup_s + steady_s}s",
        "warmup": f"{warmup_s}s",
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
        "shape": {"kind": "steady", "users": streams, "spawn_rate": max(streams // spawn_s, 1)},
    }


def reference_config(streams: int, hold_ms: float = HOLD_MS) -> Any:
    """The reference server's script for ``streams`` concurrent streams (a ReferenceConfig): EVENTS
    content events a request, one every ``hold_ms`` from the service's start, a slot for every stream."""
    from inferload.local.reference_server import FixedDelay, ReferenceConfig

    return ReferenceConfig(
        delay=FixedDelay(ms=hold_ms), concurrency=streams + 8, stream_responses=EVENTS, threads=2, record_capacity=5_000_000
    )


def run_streams(
    work_dir: Path,
    streams: int,
    steady_s: int,
    log: Callable[[str], None],
    hold_ms: float = HOLD_MS,
    warmup_s: int = WARMUP_S,
) -> dict[str, Any]:
    """One run at ``streams`` concurrent streams against a reference server of its own, its events
    ``hold_ms`` apart."""
    from inferload.local.reference_server import ReferenceServerProcess

    folder = work_dir / f"streams-{streams}"
    folder.mkdir(parents=True, exist_ok=True)
    with ReferenceServerProcess(reference_config(streams, hold_ms)) as server:
        scenario = folder / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(scenario_data(server.http_url, streams, steady_s, warmup_s)))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched_ns = time.monotonic_ns()
        done = subprocess.run(
            [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(folder / "out")],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=warmup_s + steady_s + 120,
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
    chosen = ok & (received >= launched_ns + int((warmup_s + STARTUP_S) * 1e9)) & (answered <= ended_ns)
    received, answered = received[chosen], answered[chosen]
    start, end = records.start_ns.astype(np.int64)[chosen], records.end_ns.astype(np.int64)[chosen]
    hold_ns = int(hold_ms * 1e6)
    ttft_truth = _percentiles_ms(start - received + hold_ns)
    stream_truth = _percentiles_ms(answered - received)
    stream = figures["decoupled"]
    events = int(stream["responses"])
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    result = {
        "streams": streams,
        "hold_ms": hold_ms,
        "requests": figures["requests"],
        "failures": figures["failures"],
        "content_events": events,
        "ttft_ms": {"inferload": {k: stream["first_response_ms"][k] for k in ("p50", "p99")}, "script": ttft_truth},
        "gap_ms": {"inferload": {k: stream["inter_response_ms"][k] for k in ("p50", "p99")}, "script": {"p50": hold_ms}},
        "stream_ms": {"inferload": {k: figures["latency_ms"][k] for k in ("p50", "p99")}, "server": stream_truth},
        "server_late_ms": _percentiles_ms(end - start - EVENTS * hold_ns),
        "client_cpu_s": round(cpu_s, 3),
        "client_cpu_us_per_event": round(cpu_s * 1e6 / events, 3) if events else None,
        "server_records_compared": int(chosen.sum()),
    }
    result["ttft_error_ms"] = _error(result["ttft_ms"]["inferload"], ttft_truth)
    result["gap_error_ms"] = _error(result["gap_ms"]["inferload"], {"p50": hold_ms}, ("p50",))
    result["stream_error_ms"] = _error(result["stream_ms"]["inferload"], stream_truth)
    log(
        f"streams {streams}: {figures['requests']} requests, TTFT error p50 {result['ttft_error_ms']['p50']} ms, "
        f"p99 {result['ttft_error_ms']['p99']} ms, server late p50 {result['server_late_ms']['p50']} ms, "
        f"CPU {result['client_cpu_us_per_event']} us/event"
    )
    return result


#: each peer's (command, offline tokenizer's folder), its venv made on first use (minutes)
PEER_INSTALLS: dict[str, Callable[[], tuple[Path, Path]]] = {
    "aiperf": ensure_aiperf,
    "guidellm": ensure_guidellm,
    "inference-perf": ensure_inference_perf,
}


def _peer_command(
    tool: str, program: Path, tokenizer: Path, url: str, streams: int, steady_s: int, folder: Path
) -> tuple[list[str], Path, Callable[[str], StreamReport]]:
    """(the command, where its report will be, the report's parser) of one peer's run against ``url``."""
    if tool == "aiperf":
        artifacts = folder / "artifacts"
        command = aiperf_chat_stream_command(program, tokenizer, url, MODEL, streams, steady_s, EVENTS, artifacts)
        return command, artifacts / "profile_export_aiperf.json", parse_aiperf_stream
    if tool == "guidellm":
        command = guidellm_command(program, tokenizer, url, MODEL, streams, steady_s, EVENTS, folder)
        return command, folder / GUIDELLM_REPORT, parse_guidellm_stream
    if tool == "inference-perf":
        # as many requests as the streams finish in the steady time (inference-perf takes a count)
        requests = streams * max(1, round(steady_s / (EVENTS * HOLD_MS / 1e3)))
        config = folder / "config.yaml"
        report = folder / "reports"
        config.write_text(yaml.safe_dump(inference_perf_config(tokenizer, url, MODEL, streams, requests, report)))
        return inference_perf_command(program, config), report / INFERENCE_PERF_REPORT, parse_inference_perf_stream
    raise ValueError(f"unknown peer {tool!r} (one of {', '.join(PEERS)})")


def _run_bounded(command: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[int | None, str]:
    """(exit status, or None when it ran past ``timeout_s``; the output's tail): the command, with
    ``env`` over this process's environment, in a process group of its own, the whole group killed
    at the deadline (the tools start workers)."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    return returncode, (output or "")[-2000:]


def run_peer(work_dir: Path, tool: str, streams: int, steady_s: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One peer's run at ``streams`` against a fresh reference server of the same script: its own
    figures, the truth of that server's records and the errors; ``{"error": ...}`` (with what was
    measured before it) when it could not be installed, run or read."""
    from inferload.local.reference_server import ReferenceServerProcess

    folder = work_dir / f"streams-{streams}" / tool
    folder.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"tool": tool}
    if tool not in PEER_INSTALLS:
        return {**result, "error": f"unknown peer {tool!r} (one of {', '.join(PEERS)})"}
    try:
        program, tokenizer = PEER_INSTALLS[tool]()
    except Exception as error:  # a peer that cannot be installed must not stop the others
        return {**result, "error": f"install: {type(error).__name__}: {error}"[:2000]}
    with ReferenceServerProcess(reference_config(streams)) as server:
        command, report_path, parse = _peer_command(tool, program, tokenizer, server.http_url, streams, steady_s, folder)
        result["command"] = " ".join(command)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched_ns = time.monotonic_ns()
        returncode, output = _run_bounded(command, folder, PEER_ENV.get(tool, OFFLINE_ENV), steady_s + PEER_SLACK_S)
        ended_ns = time.monotonic_ns()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = server.records()
    result["wall_s"] = round((ended_ns - launched_ns) / 1e9, 3)
    result["client_cpu_s"] = round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 3)
    # every request that server answered while the tool ran (a fresh server: the tool's own)
    ok = records.with_status("ok")
    received = records.received_ns.astype(np.int64)
    chosen = ok & (received >= launched_ns) & (records.answered_ns.astype(np.int64) <= ended_ns)
    start = records.start_ns.astype(np.int64)[chosen]
    ttft_truth = _percentiles_ms(start - received[chosen] + int(HOLD_MS * 1e6))
    result["server_records_compared"] = int(chosen.sum())
    result["server_failed"] = int((~ok).sum())
    result["script_ttft_ms"] = ttft_truth
    if returncode != 0:
        result["error"] = (
            f"ran past {steady_s + PEER_SLACK_S} s and was killed" if returncode is None else f"exited {returncode}"
        ) + f": {output.strip()[-1500:]}"
    try:
        report = parse(report_path.read_text())
    except (OSError, ValueError) as error:  # no report or not one it can read (PeerOutputError is a ValueError)
        result.setdefault("error", f"report {report_path.name}: {error}: {output.strip()[-1500:]}")
        log(f"streams {streams}, {tool}: {result['error'][:300]}")
        return result
    result.update(
        requests=report.succeeded,
        failures=report.failed,
        ttft_ms={"p50": _round(report.ttft_p50_ms), "p99": _round(report.ttft_p99_ms)},
        itl_p50_ms=_round(report.itl_p50_ms),
    )
    result["ttft_error_ms"] = _error(result["ttft_ms"], ttft_truth)
    result["itl_error_ms"] = _error({"p50": report.itl_p50_ms}, {"p50": HOLD_MS}, ("p50",))
    log(
        f"streams {streams}, {tool}: {report.succeeded} requests ({report.failed} failed), TTFT error p50 "
        f"{result['ttft_error_ms']['p50']} ms, p99 {result['ttft_error_ms']['p99']} ms, ITL p50 error {result['itl_error_ms']['p50']} ms"
    )
    return result


def run_peers(
    work_dir: Path, streams: int, steady_s: int, log: Callable[[str], None], peers: tuple[str, ...] = PEERS
) -> dict[str, dict[str, Any]]:
    """Each peer's run at ``streams`` (`run_peer`), one after another; one's failure is its entry's error."""
    results: dict[str, dict[str, Any]] = {}
    for tool in peers:
        try:
            results[tool] = run_peer(work_dir, tool, streams, steady_s, log)
        except Exception as error:  # the reference server itself, or its records: the other peers still run
            results[tool] = {"tool": tool, "error": f"{type(error).__name__}: {error}"[:2000]}
            log(f"streams {streams}, {tool} failed: {error}")
    return results


def stream_fidelity(
    work_dir: Path,
    quick: bool,
    log: Callable[[str], None],
    streams_counts: tuple[int, ...] = STREAMS,
    peers: tuple[str, ...] = PEERS,
    scale: bool = True,
) -> dict[str, Any]:
    """Item 12: one run per stream count, the figures and their errors against the script and the
    records, then each of ``peers`` on the same script (``runs[i]["peers"]``); with ``scale``, inferload
    alone at SCALE_STREAMS streams (``scale``: the issue's goal of 10,000 streams from one process)."""
    steady_s = QUICK_STEADY_S if quick else STEADY_S
    runs = []
    for streams in streams_counts:
        run = run_streams(work_dir, streams, steady_s, log)
        run["peers"] = run_peers(work_dir, streams, steady_s, log, peers)
        runs.append(run)
    result: dict[str, Any] = {"events_per_request": EVENTS, "hold_ms": HOLD_MS, "steady_s": steady_s, "runs": runs}
    if scale:
        try:
            result["scale"] = run_streams(work_dir, SCALE_STREAMS, SCALE_STEADY_S, log, SCALE_HOLD_MS, SCALE_WARMUP_S)
        except Exception as error:  # what the other runs measured is kept
            result["scale"] = {"streams": SCALE_STREAMS, "error": f"{type(error).__name__}: {error}"[:2000]}
            log(f"streams {SCALE_STREAMS} failed: {error}")
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.streams [--quick] [--streams 1,100] [--peers aiperf,guidellm] [--out FILE]``:
    item 12 alone (or some of its stream counts and peers), its result as JSON."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEADY_S} s steady runs instead of {STEADY_S} s")
    parser.add_argument("--streams", default=",".join(map(str, STREAMS)), help="comma-separated stream counts")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers (empty: none)")
    parser.add_argument("--out", type=Path, help="write the result here (else stdout)")
    parser.add_argument("--no-scale", action="store_true", help=f"leave out the run at {SCALE_STREAMS:,} streams")
    args = parser.parse_args(argv)
    counts = tuple(int(n) for n in args.streams.split(",") if n)
    peers = tuple(p for p in args.peers.split(",") if p)
    with tempfile.TemporaryDirectory(prefix="inferload-streams-") as tmp:
        result = stream_fidelity(
            Path(tmp), args.quick, lambda line: print(line, file=sys.stderr, flush=True), counts, peers, not args.no_scale
        )
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
