"""Item 10 of `make bench` (issue 20, item 4): the peers side by side, black-box, the same request everywhere.

Every client runs as its own process, against Triton (`identity`) and against the reference
server (configured as `identity`: INPUT__0 / OUTPUT__0, FP32 [16], no delay), one gRPC
ModelInferRequest (FP32 [1, 16]) or its HTTP form (Triton's binary tensor extension) everywhere:

- gRPC: h2load (a pre-framed ModelInferRequest over h2c, `content-type: application/grpc`,
  `te: trailers`), the raw grpc.aio client (`bench.grpc_ceiling`), inferload's native engine and
  its Python transport (`INFERLOAD_TRANSPORT=python`), each an `inferload run --headless`;
- HTTP: wrk, hey, inferload's engine and Python transport (`triton-http`), and AIPerf (`bench.aiperf`:
  its own venv, the tensor as v2 JSON).

The method treats every tool alike (black box):

- **Cost**: each tool a short and a long closed-loop run (16 in flight); CPU = the tool's process
  tree's rusage (`os.wait4`: the process and every child it waited for); requests = the server's own
  success count over the run (Triton's statistics; the reference server's records with status
  ok); CPU per request = (CPU long − CPU short) / (requests long − requests short), so start-up
  and shut-down cancel; the rate likewise, over the runs' wall times.
- **Fidelity** at 200 req/s: the tool's own mean latency − the server's mean request duration
  over the same run (Triton: success ns / count; the reference server: answered − received of
  its records). wrk cannot pace (no row); hey paces one worker at 200 req/s (`-c 1 -q 200`),
  h2load one client (`--rps 200`).
- **Pacing** (reference server): the engine's send-lag p99 and achieved rate in its 200 req/s
  run and in a run at 80 % of its own saturated rate there (the generator's ceiling).
- **Scale-out**: the engine's saturated rate with `inferload run --workers 2` vs one process.

Rounds are interleaved (every tool once per round, the order reversed every other round) and the
figures are medians over rounds. Every run keeps the load average at its start and end.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml

from bench.peer_output import PeerOutputError, ToolReport, parse_aiperf, parse_h2load, parse_hey, parse_wrk
from inferload.errors import InferloadError
from inferload.paths import REPO_ROOT

MODEL = "identity"
INPUT, OUTPUT = "INPUT__0", "OUTPUT__0"
IN_FLIGHT = 16  # every saturation run: 16 requests in flight (h2load: 1 connection x 16 streams)
FIDELITY_RPS = 200.0
PACING_FRACTION = 0.8
GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"
HTTP_PATH = f"/v2/models/{MODEL}/infer"


@dataclass(frozen=True)
class Durations:
    """Seconds of the short and long saturation runs, and of the paced runs."""

    short_s: float
    long_s: float
    paced_s: float


FULL = Durations(short_s=2.0, long_s=10.0, paced_s=8.0)
QUICK = Durations(short_s=1.0, long_s=4.0, paced_s=3.0)


# ---- the servers' own counts ----------------------------------------------------------------


class ServerCount(Protocol):
    """A server's own count of successful requests and their mean duration, since a mark."""

    name: str
    grpc_address: str
    http_address: str

    def mark(self) -> Any: ...

    def since(self, mark: Any) -> tuple[int, float | None]: ...


class TritonCount:
    """Triton's statistics API: success count and cumulative ns of the model."""

    name = "triton"

    def __init__(self, grpc_address: str, http_address: str) -> None:
        self.grpc_address, self.http_address = grpc_address, http_address

    def mark(self) -> tuple[int, int]:
        with urllib.request.urlopen(f"http://{self.http_address}/v2/models/{MODEL}/stats", timeout=10) as answer:
            stats = json.loads(answer.read())
        count = ns = 0
        for model in stats["model_stats"]:
            success = model["inference_stats"]["success"]
            count, ns = count + int(success["count"]), ns + int(success["ns"])
        return count, ns

    def since(self, mark: tuple[int, int]) -> tuple[int, float | None]:
        count, ns = self.mark()
        requests = count - mark[0]
        return requests, (round((ns - mark[1]) / requests / 1e6, 4) if requests else None)


class ReferenceCount:
    """The reference server's records: the ok ones answered since the mark, answered − received."""

    name = "reference"

    def __init__(self, server: Any) -> None:
        self.server = server
        self.grpc_address, self.http_address = server.grpc_address, server.http_address

    def mark(self) -> int:
        return int(self.server.stats()["recorded"])

    def since(self, mark: int) -> tuple[int, float | None]:
        records = self.server.records(after=mark)
        ok = records.with_status("ok")
        durations = (records.answered_ns[ok].astype(np.int64) - records.received_ns[ok].astype(np.int64)) / 1e6
        return int(ok.sum()), (round(float(durations.mean()), 4) if len(durations) else None)


@contextmanager
def reference_server() -> Iterator[ReferenceCount]:
    from inferload.local.reference_server import NoDelay, ReferenceConfig, ReferenceServerProcess, ReferenceTensor

    config = ReferenceConfig(
        inputs=(ReferenceTensor(name=INPUT),),
        outputs=(ReferenceTensor(name=OUTPUT),),
        max_batch_size=64,
        delay=NoDelay(),
        record_capacity=20_000_000,
    )
    with ReferenceServerProcess(config) as server:
        yield ReferenceCount(server)


# ---- the request, in every tool's form ------------------------------------------------------


@dataclass(frozen=True)
class Payloads:
    """The same request for every tool: gRPC framed, HTTP body + its JSON header length."""

    grpc_framed: Path
    http_body: Path
    http_json_size: int
    wrk_script: Path
    #: the same tensor as Triton's v2 JSON (AIPerf's template)
    http_json: dict[str, Any]


def write_payloads(folder: Path) -> Payloads:
    import tritonclient.http as httpclient
    from tritonclient.grpc import service_pb2

    array = np.random.default_rng(1).random((1, 16), dtype=np.float32)
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name=INPUT, datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(array.tobytes())
    message = request.SerializeToString()
    grpc_framed = folder / "infer.grpc"
    grpc_framed.write_bytes(b"\x00" + len(message).to_bytes(4, "big") + message)
    tensor = httpclient.InferInput(INPUT, [1, 16], "FP32")
    tensor.set_data_from_numpy(array, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor])
    http_body = folder / "infer.http"
    http_body.write_bytes(body)
    escaped = "".join(f"\\{b:03d}" for b in body)
    script = folder / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/octet-stream"\n'
        f'wrk.headers["Inference-Header-Content-Length"] = "{json_size}"\n'
    )
    as_json = {"inputs": [{"name": INPUT, "shape": [1, 16], "datatype": "FP32", "data": array.ravel().tolist()}]}
    return Payloads(grpc_framed, http_body, int(json_size or 0), script, as_json)


# ---- the tools ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    """One tool run: its command, environment additions, and how its own report is read."""

    command: list[str]
    read_report: Callable[[str, Path], ToolReport]
    env: dict[str, str]


def _stdout_report(parse: Callable[[str], ToolReport]) -> Callable[[str, Path], ToolReport]:
    return lambda stdout, _folder: parse(stdout)


def _aiperf_report(_stdout: str, folder: Path) -> ToolReport:
    try:
        text = (folder / "aiperf" / "profile_export_aiperf.json").read_text()
    except OSError as error:
        raise PeerOutputError(f"AIPerf wrote no profile_export_aiperf.json: {error.strerror}") from None
    return parse_aiperf(text)


def _ceiling_report(stdout: str, folder: Path) -> ToolReport:
    data = json.loads((folder / "ceiling.json").read_text())
    return ToolReport(succeeded=int(data["requests_total"]), failed=int(data["failures"]), mean_ms=data["client_mean_ms"])


def _inferload_report(stdout: str, folder: Path) -> ToolReport:
    summary_path = folder / "results" / "summary.json"
    if not summary_path.exists():
        raise PeerOutputError(f"inferload run wrote no summary.json: {stdout[-1500:]}")
    figures = json.loads(summary_path.read_text())["targets"]["t"]
    return ToolReport(
        succeeded=int(figures["requests"]) - int(figures["failures"]),
        failed=int(figures["failures"]),
        mean_ms=(figures.get("latency_ms") or {}).get("mean"),
    )


def inferload_scenario(kind: str, address: str, seconds: float, rate: float | None) -> dict[str, Any]:
    shape: dict[str, Any] = (
        {"kind": "steady", "users": IN_FLIGHT}
        if rate is None
        else {"kind": "constant-rate", "rate": rate, "max_in_flight": IN_FLIGHT}
    )
    return {
        "name": "bench-peer",
        "duration": f"{seconds:g}s",
        "warmup": "0s",
        "targets": [
            {
                "name": "t",
                "kind": kind,
                "address": address,
                "model": MODEL,
                "inputs": [{"name": INPUT, "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 1}}],
                "timeout": "5s",
            }
        ],
        "shape": shape,
    }


#: tool name -> protocol; the order is a round's order
TOOLS: dict[str, str] = {
    "h2load": "grpc",
    "grpc.aio": "grpc",
    "inferload engine (grpc)": "grpc",
    "inferload python (grpc)": "grpc",
    "wrk": "http",
    "hey": "http",
    "aiperf": "http",
    "inferload engine (http)": "http",
    "inferload python (http)": "http",
}
#: not a peer: the engine with `inferload run --workers 2` (scale-out)
SCALE_OUT_TOOL = "inferload engine (grpc) x2 workers"
PACED_TOOLS = tuple(name for name in TOOLS if name != "wrk")  # wrk cannot pace


def invocation(
    tool: str, server: ServerCount, payloads: Payloads, folder: Path, seconds: float, rate: float | None
) -> Invocation:
    """The command that runs ``tool`` against ``server`` for ``seconds``, closed loop or at ``rate``."""
    grpc_url = f"http://{server.grpc_address}{GRPC_PATH}"
    http_url = f"http://{server.http_address}{HTTP_PATH}"
    if tool == "h2load":
        pace = [] if rate is None else ["--rps", f"{rate:g}"]
        in_flight = "16" if rate is None else "1"
        command = ["h2load", "-D", f"{seconds:g}", "-c", "1", "-m", in_flight, *pace, "-d", str(payloads.grpc_framed)]
        command += ["-H", "content-type: application/grpc", "-H", "te: trailers", grpc_url]
        return Invocation(command, _stdout_report(parse_h2load), {})
    if tool == "wrk":
        if rate is not None:
            raise ValueError("wrk cannot pace")
        command = ["wrk", "-t1", f"-c{IN_FLIGHT}", f"-d{seconds:g}s", "-s", str(payloads.wrk_script), http_url]
        return Invocation(command, _stdout_report(parse_wrk), {})
    if tool == "hey":
        pace = ["-c", str(IN_FLIGHT)] if rate is None else ["-c", "1", "-q", f"{rate:g}"]
        command = ["hey", "-z", f"{seconds:g}s", *pace, "-m", "POST", "-D", str(payloads.http_body)]
        command += ["-T", "application/octet-stream", "-H", f"Inference-Header-Content-Length: {payloads.http_json_size}"]
        return Invocation([*command, http_url], _stdout_report(parse_hey), {})
    if tool == "aiperf":
        from bench.aiperf import aiperf_command, ensure_aiperf

        aiperf, tokenizer = ensure_aiperf()
        command = aiperf_command(
            aiperf, tokenizer, server.http_address, MODEL, payloads.http_json, seconds, rate, IN_FLIGHT, folder / "aiperf"
        )
        return Invocation(command, _aiperf_report, {})
    if tool == "grpc.aio":
        command = [sys.executable, "-m", "bench.grpc_ceiling", server.grpc_address, MODEL, str(IN_FLIGHT)]
        command += [f"{seconds:g}s", "none" if rate is None else f"{rate:g}", str(folder / "ceiling.json")]
        return Invocation(command, _ceiling_report, {})
    if tool.startswith("inferload"):
        protocol = "grpc" if "(grpc)" in tool else "http"
        kind, address = ("triton-grpc", server.grpc_address) if protocol == "grpc" else ("triton-http", server.http_address)
        scenario = folder / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(inferload_scenario(kind, address, seconds, rate), sort_keys=False))
        command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--headless", "--out", str(folder / "results")]
        if tool == SCALE_OUT_TOOL:
            command += ["--workers", "2"]
        env = {"INFERLOAD_TRANSPORT": "python"} if " python " in tool else {}
        return Invocation(command, _inferload_report, env)
    raise ValueError(f"unknown tool {tool!r}")


def tool_available(tool: str) -> str | None:
    """Why ``tool`` cannot run here (None: it can). AIPerf's venv is made here on first use (minutes)."""
    if tool == "aiperf":
        from bench.aiperf import ensure_aiperf

        try:
            ensure_aiperf()
        except (InferloadError, OSError, subprocess.SubprocessError) as error:
            return f"AIPerf's venv could not be made: {error}"
        return None
    binary = tool if tool in ("h2load", "wrk", "hey") else None
    if binary and shutil.which(binary) is None:
        package = {"h2load": "nghttp2-client"}.get(binary, binary)
        return f"{binary} missing (scripts/install-system-deps.sh bench installs Debian {package})"
    return None


# ---- one black-box run ----------------------------------------------------------------------


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def black_box_run(invoke: Invocation, server: ServerCount, folder: Path, timeout_s: float) -> dict[str, Any]:
    """Run one tool process (under `bench.rusage_of`): its tree's CPU (wait4), its wall time, its own
    report, the server's count."""
    load_start = _load()
    mark = server.mark()
    output_path, usage_path = folder / "output.txt", folder / "rusage.json"
    with output_path.open("w") as output:
        subprocess.run(
            [sys.executable, "-m", "bench.rusage_of", str(usage_path), f"{timeout_s:g}", *invoke.command],
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **invoke.env},
            timeout=timeout_s + 60,
            check=False,
        )
    usage = json.loads(usage_path.read_text())
    requests, server_mean_ms = server.since(mark)
    stdout = output_path.read_text(errors="replace")
    result: dict[str, Any] = {
        "exit_code": usage["exit_code"],
        "timed_out": usage["timed_out"],
        "wall_s": round(usage["wall_s"], 3),
        "cpu_s": round(usage["cpu_s"], 4),
        "server_requests": requests,
        "server_mean_ms": server_mean_ms,
        "load_start": load_start,
        "load_end": _load(),
    }
    try:
        report = invoke.read_report(stdout, folder)
        result.update(tool_succeeded=report.succeeded, tool_failed=report.failed, tool_mean_ms=report.mean_ms)
    except (PeerOutputError, OSError, KeyError, ValueError) as error:
        result.update(error=f"{type(error).__name__}: {error}", output_tail=stdout[-1500:])
    return result


def cost_from_pair(short: dict[str, Any], long: dict[str, Any]) -> dict[str, Any]:
    """CPU per request and rate by difference over difference (start-up cancels)."""
    requests = long["server_requests"] - short["server_requests"]
    cpu = long["cpu_s"] - short["cpu_s"]
    wall = long["wall_s"] - short["wall_s"]
    if requests <= 0 or wall <= 0:
        return {"us_per_request": None, "rps": None, "note": "the long run did not serve more requests than the short"}
    if cpu <= 0:  # start-up's own variation exceeded the requests' CPU: a loaded machine, or runs too short
        return {"us_per_request": None, "rps": round(requests / wall, 1), "note": "start-up noise exceeds the difference"}
    return {"us_per_request": round(cpu / requests * 1e6, 2), "rps": round(requests / wall, 1)}


def residual(run: dict[str, Any]) -> float | None:
    if run.get("tool_mean_ms") is None or run.get("server_mean_ms") is None:
        return None
    return round(run["tool_mean_ms"] - run["server_mean_ms"], 4)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def open_loop_figures(folder: Path) -> dict[str, Any] | None:
    """A run's open-loop figures from its summary.json (target `t`): rates, unsent, send lag; None if none."""
    summary_path = folder / "results" / "summary.json"
    if not summary_path.exists():
        return None
    open_loop = json.loads(summary_path.read_text())["targets"]["t"].get("open_loop") or {}
    if not open_loop:
        return None
    return {
        "configured_rps": open_loop.get("configured_rps"),
        "achieved_rps": open_loop.get("achieved_rps"),
        "achieved_ratio": open_loop.get("achieved_ratio"),
        "unsent": open_loop.get("unsent"),
        "send_lag_ms": open_loop.get("send_lag_ms"),
    }


# ---- the item -------------------------------------------------------------------------------


def measure_server(
    server: ServerCount,
    tools: list[str],
    durations: Durations,
    rounds: int,
    work: Path,
    log: Callable[[str], None],
    with_pacing: bool,
) -> dict[str, Any]:
    """Every tool's cost pair and 200 req/s run against one server, rounds interleaved."""
    payloads = write_payloads(work)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {t: {"short": [], "long": [], "paced": []} for t in tools}
    counter = 0

    def one(tool: str, phase: str, seconds: float, rate: float | None) -> dict[str, Any]:
        nonlocal counter
        counter += 1
        folder = work / f"{counter:03d}"
        folder.mkdir()
        run = black_box_run(invocation(tool, server, payloads, folder, seconds, rate), server, folder, seconds + 120)
        run["seconds"], run["rate_rps"] = seconds, rate
        if tool.startswith("inferload") and rate is not None:
            run["open_loop"] = open_loop_figures(folder)
        shutil.rmtree(folder / "results", ignore_errors=True)
        lag = ((run.get("open_loop") or {}).get("send_lag_ms") or {}).get("p99")
        log(
            f"  {server.name:9s} {tool:34s} {phase:5s} {run['server_requests']:7d} req  cpu {run['cpu_s']:6.2f} s  "
            f"wall {run['wall_s']:5.1f} s  tool mean {run.get('tool_mean_ms')} ms  server mean {run['server_mean_ms']} ms"
            + (f"  send lag p99 {lag} ms" if lag is not None else "")
            + (f"  ERROR {run['error']}" if "error" in run else "")
            + f"  load {run['load_start'][0]}"
        )
        return run

    for round_no in range(rounds):
        log(f" {server.name}: round {round_no + 1} of {rounds}")
        order = tools if round_no % 2 == 0 else list(reversed(tools))
        for tool in order:
            for phase, seconds in (("short", durations.short_s), ("long", durations.long_s)):
                runs[tool][phase].append(one(tool, phase, seconds, None))
            if tool in PACED_TOOLS:
                runs[tool]["paced"].append(one(tool, "paced", durations.paced_s, FIDELITY_RPS))

    table: dict[str, Any] = {}
    for tool in tools:
        pairs = [cost_from_pair(s, lg) for s, lg in zip(runs[tool]["short"], runs[tool]["long"], strict=True)]
        paced = runs[tool]["paced"]
        row: dict[str, Any] = {
            "protocol": TOOLS.get(tool, "grpc"),
            "us_per_request": _median([p["us_per_request"] for p in pairs]),
            "rps": _median([p["rps"] for p in pairs]),
            "residual_ms": _median([residual(r) for r in paced]) if paced else None,
            "failures": sum(int(r.get("tool_failed") or 0) for phase in runs[tool].values() for r in phase),
            "errors": [r["error"] for phase in runs[tool].values() for r in phase if "error" in r],
        }
        lags = [((r.get("open_loop") or {}).get("send_lag_ms") or {}).get("p99") for r in paced]
        if any(lag is not None for lag in lags):
            row["send_lag_p99_ms"] = _median(lags)
            row["achieved_ratio"] = _median([(r.get("open_loop") or {}).get("achieved_ratio") for r in paced])
        table[tool] = row

    result: dict[str, Any] = {"server": server.name, "table": table, "runs": runs}
    engine = table.get("inferload engine (grpc)") or {}
    if with_pacing and engine.get("rps"):
        rate = round(engine["rps"] * PACING_FRACTION)
        log(
            f" {server.name}: engine pacing at {PACING_FRACTION:.0%} of its own ceiling ({engine['rps']:.0f} req/s): {rate} req/s"
        )
        run = one("inferload engine (grpc)", "80%", durations.long_s, float(rate))
        result["pacing_80pct"] = {"ceiling_rps": engine["rps"], "rate_rps": rate, **(run.get("open_loop") or {}), "run": run}
    return result


def scale_out(server: ServerCount, durations: Durations, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The engine's saturated rate with 2 worker processes vs 1 (one pair each, difference over difference)."""
    payloads = write_payloads(work)
    rates: dict[str, Any] = {}
    for tool in ("inferload engine (grpc)", SCALE_OUT_TOOL):
        pair = []
        for phase, seconds in (("short", durations.short_s), ("long", durations.long_s)):
            folder = work / f"scale-{len(rates)}-{phase}"
            folder.mkdir()
            pair.append(black_box_run(invocation(tool, server, payloads, folder, seconds, None), server, folder, seconds + 180))
        rates[tool] = {**cost_from_pair(pair[0], pair[1]), "runs": pair}
        log(f"  {server.name:9s} {tool:34s} {rates[tool]['rps']} req/s  load {pair[0]['load_start'][0]}")
    one, two = rates["inferload engine (grpc)"]["rps"], rates[SCALE_OUT_TOOL]["rps"]
    return {"server": server.name, "rps": rates, "speedup_2_vs_1": round(two / one, 3) if one and two else None}


def peers(
    triton: ServerCount | None,
    durations: Durations,
    rounds: int,
    log: Callable[[str], None],
    keep: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The side-by-side table against Triton and the reference server; ``keep`` is called with what
    was measured so far after each server, so a later failure loses nothing."""
    tools = [t for t in TOOLS if tool_available(t) is None]
    missing = {t: why for t in TOOLS if (why := tool_available(t))}
    out: dict[str, Any] = {
        "method": "black box: CPU = wait4 rusage; requests = the server's own count; difference over difference",
        "in_flight": IN_FLIGHT,
        "fidelity_rps": FIDELITY_RPS,
        "durations": durations.__dict__,
        "rounds": rounds,
        "missing": missing,
        "load_start": _load(),
        "servers": {},
    }
    log(
        f"[10] peers side by side: {len(tools)} tools, short {durations.short_s:g} s / long {durations.long_s:g} s, "
        f"paced {durations.paced_s:g} s at {FIDELITY_RPS:g} req/s, {rounds} round(s); load {out['load_start']}"
    )
    servers: list[tuple[str, Callable[[], Any]]] = []
    if triton is not None:
        servers.append(("triton", lambda: _nullcontext(triton)))
    servers.append(("reference", reference_server))
    for name, opener in servers:
        with tempfile.TemporaryDirectory(prefix=f"inferload-peers-{name}-") as tmp, opener() as server:
            try:
                out["servers"][name] = measure_server(server, tools, durations, rounds, Path(tmp), log, name == "reference")
                if name == "reference":
                    scale = Path(tmp) / "scale"
                    scale.mkdir()
                    out["scale_out"] = scale_out(server, durations, scale, log)
            except Exception as error:  # keep the other server's figures
                out["servers"][name] = {"error": f"{type(error).__name__}: {error}"}
                log(f"  {name}: failed: {error}")
        keep(out)
    out["load_end"] = _load()
    return out


@contextmanager
def _nullcontext(value: ServerCount) -> Iterator[ServerCount]:
    yield value
