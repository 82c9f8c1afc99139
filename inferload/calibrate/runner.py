"""One calibration case: `inferload run` against the reference server, its figures against the truth.

The run is the user's own command (a headless `inferload run` in a child process, ``--workers N``
or ``--remote-workers M`` as given), so what is certified is what a user gets in summary.json.
The truth is the server's records: each request's own time in the server (answered − received)
of the requests answered in the run's steady window, each plus a draw of the loopback floor
(below): the latency a client that added nothing of its own would see.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml

from inferload.errors import InferloadError
from inferload.launch.child_processes import Child, ChildProcesses, locust_arguments
from inferload.local.reference_server import ReferenceServerProcess
from inferload.results.calibration import CALIBRATION_ENV, NO_CALIBRATION, Bounds, CaseResult, PercentileError, StreamCaseResult

# The loopback floor: what one request costs on this machine outside the server's own time.
#
# A minimal client of our own, independent of inferload's transports (a blocking socket, one
# request at a time, bytes built once), sends ``count`` requests with ids to the reference server
# (law ``none``) and times each as the engine does: from the return of the write that carried the
# request to the return of the read that brought its last bytes (``time.monotonic_ns``). The
# server's records, joined by id, give each request's own time inside the server (answered −
# received); the floor sample is the client's time minus that. It holds the kernel's loopback path
# both ways, the server's framing before `received` and after `answered`, and the wake-ups of both
# processes: what any client on this machine pays. Over gRPC the probe speaks just enough HTTP/2
# (h2c, one stream at a time, literal HPACK headers, flow control opened wide); over HTTP, HTTP/1.1
# keep-alive.
GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DATA, H2_HEADERS, H2_SETTINGS, H2_PING, H2_GOAWAY, H2_WINDOW_UPDATE = 0, 1, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
WIDEST_WINDOW = (1 << 31) - 1
PROBE_ID_PREFIX = "floor-"


@dataclass(frozen=True)
class FloorProbe:
    """One protocol's floor samples (ns), joined with the server's records by request id."""

    protocol: str  # "grpc" | "http"
    samples_ns: np.ndarray

    def summary(self) -> dict[str, float | int]:
        us = self.samples_ns / 1000.0
        return {
            "samples": int(us.size),
            "p50_us": round(float(np.percentile(us, 50)), 1),
            "p90_us": round(float(np.percentile(us, 90)), 1),
            "p99_us": round(float(np.percentile(us, 99)), 1),
            "max_us": round(float(us.max()), 1) if us.size else 0.0,
        }


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_literal(name: str, value: str) -> bytes:
    """A header as an HPACK literal without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    encoded_name, encoded_value = name.encode(), value.encode()
    if len(encoded_name) > 126 or len(encoded_value) > 126:
        raise ValueError(f"header {name} too long for the probe's one-byte lengths")
    return b"\x00" + bytes([len(encoded_name)]) + encoded_name + bytes([len(encoded_value)]) + encoded_value


def _model_infer_message(model: str, request_id: str, values: int) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "FP32"
    tensor.shape.extend([values])
    request.raw_input_contents.append(bytes(4 * values))
    body = request.SerializeToString()
    return b"\x00" + struct.pack(">I", len(body)) + body


class _H2Probe:
    """One h2c connection: unary ModelInfer calls, one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.authority = f"{host}:{port}"
        self.buffer = b""
        self.next_stream = 1
        settings = struct.pack(">HI", 0x4, WIDEST_WINDOW)  # SETTINGS_INITIAL_WINDOW_SIZE
        self.sock.sendall(
            H2_PREFACE
            + _h2_frame(H2_SETTINGS, 0, 0, settings)
            + _h2_frame(H2_WINDOW_UPDATE, 0, 0, struct.pack(">I", WIDEST_WINDOW - 65535))
        )

    def call(self, message: bytes) -> tuple[int, int]:
        """(sent_ns, received_ns) of one call."""
        stream = self.next_stream
        self.next_stream += 2
        headers = b"".join(
            _hpack_literal(name, value)
            for name, value in (
                (":method", "POST"),
                (":scheme", "http"),
                (":path", GRPC_PATH),
                (":authority", self.authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            )
        )
        wire = _h2_frame(H2_HEADERS, END_HEADERS, stream, headers) + _h2_frame(H2_DATA, END_STREAM, stream, message)
        self.sock.sendall(wire)
        sent_ns = time.monotonic_ns()
        while True:
            received_ns = self._read_more()
            if self._ended(stream):
                return sent_ns, received_ns

    def _read_more(self) -> int:
        chunk = self.sock.recv(1 << 16)
        now = time.monotonic_ns()
        if not chunk:
            raise ConnectionError("the reference server closed the probe's HTTP/2 connection")
        self.buffer += chunk
        return now

    def _ended(self, stream: int) -> bool:
        """Consume whole frames; True once ``stream`` ended (a frame of it with END_STREAM)."""
        ended = False
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            frame_stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9 : 9 + length]
            self.buffer = self.buffer[9 + length :]
            if kind == H2_SETTINGS and not flags & ACK:
                self.sock.sendall(_h2_frame(H2_SETTINGS, ACK, 0, b""))
            elif kind == H2_PING and not flags & ACK:
                self.sock.sendall(_h2_frame(H2_PING, ACK, 0, payload))
            elif kind == H2_GOAWAY:
                raise ConnectionError("the reference server sent GOAWAY to the probe")
            elif kind in (H2_HEADERS, H2_DATA) and frame_stream == stream and flags & END_STREAM:
                ended = True
        return ended

    def close(self) -> None:
        self.sock.close()


class _Http1Probe:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host = f"{host}:{port}"

    def request_bytes(self, model: str, request_id: str, values: int) -> bytes:
        body = json.dumps(
            {"id": request_id, "inputs": [{"name": "INPUT0", "shape": [values], "datatype": "FP32", "data": [0.0] * values}]}
        ).encode()
        head = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def call(self, request: bytes) -> tuple[int, int]:
        self.sock.sendall(request)
        sent_ns = time.monotonic_ns()
        buffer = b""
        while True:
            chunk = self.sock.recv(1 << 16)
            received_ns = time.monotonic_ns()
            if not chunk:
                raise ConnectionError("the reference server closed the probe's HTTP connection")
            buffer += chunk
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                continue
            length = 0
            for line in buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(buffer) >= head_end + 4 + length:
                return sent_ns, received_ns

    def close(self) -> None:
        self.sock.close()


def probe_floor(server: ReferenceServerProcess, protocol: str, count: int, model: str, values: int) -> FloorProbe:
    """``count`` probe requests over ``protocol`` to ``server`` (law none), joined with its records."""
    host, _, port = (server.grpc_address if protocol == "grpc" else server.http_address).rpartition(":")
    after = len(server.records())
    times: dict[str, tuple[int, int]] = {}
    if protocol == "grpc":
        h2 = _H2Probe(host, int(port))
        try:
            for k in range(count):
                request_id = f"{PROBE_ID_PREFIX}{protocol}-{k}"
                times[request_id] = h2.call(_model_infer_message(model, request_id, values))
        finally:
            h2.close()
    else:
        http = _Http1Probe(host, int(port))
        try:
            for k in range(count):
                request_id = f"{PROBE_ID_PREFIX}{protocol}-{k}"
                times[request_id] = http.call(http.request_bytes(model, request_id, values))
        finally:
            http.close()
    records = server.records(after=after)
    samples = []
    for index, request_id in enumerate(records.ids):
        if request_id in times and records.status[index] == 0:
            sent_ns, received_ns = times[request_id]
            inside_ns = int(records.answered_ns[index]) - int(records.received_ns[index])
            samples.append((received_ns - sent_ns) - inside_ns)
    if len(samples) < count // 2:
        raise RuntimeError(f"the {protocol} floor probe matched {len(samples)} of {count} requests with the server's records")
    return FloorProbe(protocol, np.asarray(samples, dtype=np.int64))


# Calibration cases: what each one runs (a protocol, a loop, a law, a load), and its scenario.
MODEL = "identity"
#: FP32 values per request (the reference server's default input, unbatched)
VALUES = 16
PROTOCOL_KINDS = {"grpc": "kserve-v2-grpc", "http": "kserve-v2-http"}

LAWS: dict[str, dict[str, Any]] = {
    "none": {"law": "none"},
    "fixed": {"law": "fixed", "ms": 2.0},
    "lognormal": {"law": "lognormal", "median_ms": 2.0, "sigma": 0.5},
    "bimodal": {"law": "bimodal", "p_slow": 0.1, "fast_ms": 1.0, "slow_ms": 8.0},
    "tail": {"law": "tail", "base": {"law": "fixed", "ms": 2.0}, "p": 0.01, "slow_ms": 20.0},
}
#: the laws' mean service time (ms), to size the senders of an open-loop case
MEAN_MS = {"none": 0.0, "fixed": 2.0, "lognormal": 2.0 * math.exp(0.5**2 / 2), "bimodal": 0.1 * 8.0 + 0.9 * 1.0, "tail": 2.18}


#: open-loop rates tested whatever the ceiling, req/s per process: the rates most runs use, which a
#: fraction of a fast machine's ceiling (10 % of 54k req/s) would leave untested
FIXED_OPEN_RPS: tuple[float, ...] = (50.0, 200.0)


@dataclass(frozen=True)
class Plan:
    """How long each case runs, and which cases (`plan(quick)`)."""

    quick: bool
    warmup_s: float
    duration_s: float  # warm-up included
    ceiling_users: int = 16
    closed_users: int = 8
    joined_law: str = "fixed"  # one user, closed loop, joined per request
    closed_laws: tuple[str, ...] = ()
    open_law: str = "lognormal"
    open_fractions: tuple[float, ...] = ()  # of the closed-loop ceiling, per process
    fixed_open_rps: tuple[float, ...] = FIXED_OPEN_RPS  # per process, whatever the ceiling
    floor_requests: int = 300
    protocols: tuple[str, ...] = ("grpc", "http")
    #: the streams cases: concurrent `openai-chat` streams (over HTTP; none without it)
    stream_counts: tuple[int, ...] = ()
    stream_warmup_s: float = 2.0
    stream_duration_s: float = 10.0  # warm-up included

    def open_rates_rps(self, ceiling_per_process: float, processes: int) -> list[float]:
        """The open-loop cases' rates (all processes together), lowest first, each once: the fixed
        rates per process, and the fractions of ``ceiling_per_process`` (to 10 req/s, at least 1)."""
        fixed = [rps * processes for rps in self.fixed_open_rps]
        fractions = [max(1.0, round(fraction * ceiling_per_process * processes, -1)) for fraction in self.open_fractions]
        return sorted(set(fixed + fractions))


def plan(quick: bool) -> Plan:
    if quick:  # open loop: the fixed rates and 10 % of the ceiling
        return Plan(
            quick=True,
            warmup_s=1.0,
            duration_s=3.0,
            closed_laws=(),
            open_law="fixed",
            open_fractions=(0.1,),
            stream_counts=(1, 100),
            stream_warmup_s=1.0,
            stream_duration_s=5.0,
        )
    return Plan(
        quick=False,
        warmup_s=1.0,
        duration_s=5.0,
        closed_laws=("fixed", "lognormal", "bimodal", "tail"),
        open_fractions=(0.1, 0.25, 0.5, 0.8),
        stream_counts=(1, 100, 1000),
    )


@dataclass(frozen=True)
class Case:
    name: str
    protocol: str
    loop: str  # "closed" | "open"
    law_name: str
    users: int | None = None
    rate_rps: float | None = None  # all processes together
    warmup_s: float = 1.0
    duration_s: float = 3.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def law(self) -> dict[str, Any]:
        return LAWS[self.law_name]

    @property
    def target_kind(self) -> str:
        return PROTOCOL_KINDS[self.protocol]

    @property
    def joined(self) -> bool:
        """One user in closed loop: its requests follow one another, so the k-th the client timed
        is the k-th the server answered (the per-request join)."""
        return self.loop == "closed" and self.users == 1

    def scenario(self, address: str, name: str = "calibration") -> dict[str, Any]:
        """The scenario's data for this case against a reference server at ``address``."""
        target = {
            "name": self.name,
            "kind": self.target_kind,
            "address": address,
            "model": MODEL,
            "inputs": [{"name": "INPUT0", "shape": [VALUES], "dtype": "FP32"}],
            "timeout": "10s",
        }
        shape: dict[str, Any]
        if self.loop == "closed":
            shape = {"kind": "steady", "users": self.users}
        else:
            assert self.rate_rps is not None
            in_flight = self.rate_rps * (MEAN_MS[self.law_name] + 1.0) / 1000.0
            shape = {
                "kind": "constant-rate",
                "rate": round(self.rate_rps, 3),
                "max_in_flight": max(16, min(512, math.ceil(in_flight * 4))),
            }
        return {
            "name": name,
            "duration": f"{self.duration_s:g}s",
            "warmup": f"{self.warmup_s:g}s",
            "targets": [target],
            "shape": shape,
        }


#: the streams cases' script (`make bench` item 12's): STREAM_EVENTS content events of one token per
#: generation, event i written (i + 1) holds of STREAM_HOLD_MS after the service starts, a slot per stream
STREAM_EVENTS = 8
STREAM_HOLD_MS = 100.0
#: the law whose HTTP floor the streams cases' truth adds to TTFT (a stream's request and its events
#: cross the same loopback as a unary request and its answer)
STREAM_FLOOR_LAW = "fixed"


@dataclass(frozen=True)
class StreamCase:
    """``streams`` concurrent `openai-chat` streams (one per user, closed loop) against the scripted
    generation: each request STREAM_EVENTS content events of one token, one hold apart."""

    streams: int
    warmup_s: float
    duration_s: float
    protocol: str = "http"
    joined: bool = False

    @property
    def name(self) -> str:
        return f"http-streams-{self.streams}"

    def scenario(self, address: str, name: str = "calibration") -> dict[str, Any]:
        """The scenario's data for this case against a reference server at ``address``."""
        target = {
            "name": self.name,
            "kind": "openai-chat",
            "address": address,
            "model": MODEL,
            "generation": {"max_tokens": STREAM_EVENTS},
            "timeout": "30s",
        }
        return {
            "name": name,
            "duration": f"{self.duration_s:g}s",
            "warmup": f"{self.warmup_s:g}s",
            "targets": [target],
            # started over the warm-up, so that the streams' requests do not end in step (a wave of
            # them at the steady window's edge would be counted by one side and not the other)
            "shape": {"kind": "steady", "users": self.streams, "spawn_rate": max(1.0, self.streams / self.warmup_s)},
        }


PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
#: the joined errors kept: p1 and p5 are the figures a loaded machine disturbs least (the requests no
#: preemption delayed), p50 and up what a user's percentiles carry
JOINED_PERCENTILES = {"p1": 1.0, "p5": 5.0, "p50": 50.0, "p90": 90.0, "p99": 99.0}
CPU_SAMPLE_S = 0.2
#: a joined case's requests the server answered after the client stopped counting (at the run's end)
MAX_UNCOUNTED_AT_END = 3


@dataclass(frozen=True)
class RunLayout:
    """How each case's run is spread: ``--workers`` and ``--remote-workers`` of `inferload run`."""

    workers: int = 0
    remote_workers: int = 0

    @property
    def processes(self) -> int:
        return max(1, self.workers + self.remote_workers)

    def flags(self) -> list[str]:
        flags = ["--workers", str(self.workers)] if self.workers else []
        return flags + (["--remote-workers", str(self.remote_workers)] if self.remote_workers else [])


def _tree_cpu_s(process: psutil.Process, seen: dict[int, float]) -> float | None:
    """The CPU seconds the process tree has used so far: each process's last reading in ``seen`` (by
    pid) is kept after it exits, so the total never falls when a child ends."""
    try:
        procs = [process, *process.children(recursive=True)]
    except psutil.Error:
        return None
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        seen[proc.pid] = max(seen.get(proc.pid, 0.0), times.user + times.system)
    return sum(seen.values())


#: a window that ends this little after the run's last CPU sample ends with that sample (the run's
#: process tree exited between two samples: CI once, the HTTP ceiling case's CPU not measured)
CPU_END_SLACK_S = 1.0


def _cpu_at(samples: list[tuple[float, float]], at: float) -> float | None:
    """The tree's CPU seconds at wall time ``at``, interpolated between samples (at most
    `CPU_END_SLACK_S` after the last: the last sample's)."""
    if len(samples) < 2 or not samples[0][0] <= at <= samples[-1][0] + CPU_END_SLACK_S:
        return None
    if at > samples[-1][0]:
        return samples[-1][1]
    walls = np.array([s[0] for s in samples])
    cpus = np.array([s[1] for s in samples])
    return float(np.interp(at, walls, cpus))


class CalibrationStopped(InferloadError):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) reached `inferload calibrate`: its case's run has been
    stopped (the signal forwarded to it, and waited for), no further case starts, and no certificate
    is written; the reference server is stopped as the error leaves its block. The command exits with
    128 + the signal's number, as the shell does."""

    def __init__(self, signum: int) -> None:
        self.exit_code = 128 + int(signum)
        super().__init__(
            f"{signal.Signals(signum).name}: stopped (the case's run and the reference server stopped; no certificate written)"
        )


def stop_if_signalled(children: ChildProcesses) -> None:
    """CalibrationStopped when ``children`` (the command's block) has taken a stop signal."""
    if children.signals:
        raise CalibrationStopped(children.signals[0])


def run_watched(
    start: Callable[[], Child], log_path: Path, timeout_s: float, what: str, children: ChildProcesses
) -> tuple[int, list[tuple[float, float]]]:
    """Start the lead of ``children`` with ``start`` (its own session; it dies with this process; its
    output in ``log_path``) and sample its process tree's CPU every CPU_SAMPLE_S until it exits:
    (its exit code, [(wall time s, CPU s)]). A stop signal that ``children`` took is forwarded to it
    by ``children``: once it has exited, CalibrationStopped (before it starts when the signal came
    earlier). InferloadError naming ``what`` when it runs past ``timeout_s`` (it is killed)."""
    stop_if_signalled(children)
    child = start()
    try:
        watched: psutil.Process | None = psutil.Process(child.pid)
    except psutil.Error:  # it has ended already (a fork is reaped by its waiter at once)
        watched = None
    samples: list[tuple[float, float]] = []
    seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    while (returncode := child.poll()) is None:
        cpu = None if watched is None else _tree_cpu_s(watched, seen)
        if cpu is not None:
            samples.append((time.time(), cpu))
        if time.monotonic() > deadline:
            child.kill()  # its own children (Locust) get SIGHUP as it dies (die_with_parent)
            child.wait()
            raise InferloadError(f"{what}: did not end in {timeout_s:g} s (log: {log_path})")
        time.sleep(CPU_SAMPLE_S)
    stop_if_signalled(children)
    return returncode, samples


def run_case(
    case: Case | StreamCase,
    server: ReferenceServerProcess,
    folder: Path,
    layout: RunLayout,
    timeout_s: float = 300.0,
    extra_env: dict[str, str] | None = None,
    children: ChildProcesses | None = None,
) -> dict[str, Any]:
    """Run ``case`` as `inferload run` would (``extra_env`` added to its environment); its summary.json
    target entry, the run's steady window (wall-clock seconds), the process tree's CPU over it,
    and (a joined case) its requests.csv rows. One process: Locust itself, a fork of the block's
    warm Locust where it has one (`ChildProcesses.start_locust`); workers: `inferload run` with them.
    ``children``: the command's `ChildProcesses` block, which forwards a stop signal to the run
    (`run_watched`: CalibrationStopped once it has ended); None: the run is started the same way,
    and the caller's signals are its own."""
    folder.mkdir(parents=True, exist_ok=True)
    address = server.grpc_address if case.protocol == "grpc" else server.http_url
    scenario_path = folder / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(case.scenario(address), sort_keys=False))
    out, log_path = folder / "results", folder / "run.log"
    locust_options = [*(["--requests-csv"] if case.joined else []), "--no-report", "--loglevel", "WARNING"]
    env = {**os.environ, CALIBRATION_ENV: NO_CALIBRATION, **(extra_env or {})}  # a calibration run applies no older certificate
    block = children or ChildProcesses()

    def start() -> Child:
        if not layout.workers and not layout.remote_workers:
            return block.start_locust(locust_arguments(scenario_path, True, out, None, locust_options), log_path, env=env)
        command = [sys.executable, "-m", "inferload.cli", "run", str(scenario_path), "--headless", "--out", str(out)]
        with log_path.open("wb") as log:
            return block.start([*command, *layout.flags(), "--", *locust_options], lead=True, log=log, env=env)

    returncode, samples = run_watched(start, log_path, timeout_s, f"calibration case {case.name}: `inferload run`", block)
    if returncode not in (0, 1) or not (out / "summary.json").is_file():
        tail = (folder / "run.log").read_text(errors="replace")[-2000:]
        raise InferloadError(f"calibration case {case.name}: `inferload run` exited {returncode}:\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    started = datetime.fromisoformat(summary["started_at"]).timestamp()
    window = (started + float(summary["warmup_s"]), started + float(summary["duration_s"]))
    cpu_start, cpu_end = _cpu_at(samples, window[0]), _cpu_at(samples, window[1])
    return {
        "target": summary["targets"][case.name],
        "window": window,
        "cpu_s": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
        "rows": _request_rows(out / "requests.csv", case.name) if case.joined else None,
    }


def _request_rows(path: Path, target: str) -> np.ndarray | None:
    """requests.csv's successful rows of ``target`` as (completion wall time s, latency ms), in completion order."""
    if not path.is_file():
        return None
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["target"] == target and row["outcome"] == "ok":
                rows.append((float(row["time"]), float(row["latency_ms"])))
    rows.sort(key=lambda r: r[0])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 2)


def joined_errors_us(
    server: ReferenceServerProcess, rows: np.ndarray | None, window: tuple[float, float], floor_p50_ns: float
) -> dict[str, float] | None:
    """One user's requests joined in order with the server's records (all of the run's, warm-up
    included, so that the k-th is the k-th); each request's error over the steady window. None
    when the counts differ otherwise than by the last requests (no safe join)."""
    if rows is None:
        return None
    records = server.records()
    ok = records.with_status("ok")
    answered = records.answered_ns.astype(np.int64)[ok]
    inside = answered - records.received_ns.astype(np.int64)[ok]
    order = np.argsort(answered, kind="stable")
    answered, inside = answered[order], inside[order]
    # the run's last request may be answered after the client stopped counting: the server's extra
    # records can only be the last ones
    extra = answered.size - rows.shape[0]
    if not 0 <= extra <= MAX_UNCOUNTED_AT_END or not rows.shape[0]:
        return None
    answered, inside = answered[: rows.shape[0]], inside[: rows.shape[0]]
    wall_minus_mono = time.time_ns() - time.monotonic_ns()
    answered_wall = (answered + wall_minus_mono) / 1e9
    steady = (answered_wall >= window[0]) & (answered_wall < window[1])
    errors_us = rows[:, 1][steady] * 1000.0 - (inside[steady] + floor_p50_ns) / 1000.0
    if not errors_us.size:
        return None
    return {key: round(float(np.percentile(errors_us, q)), 1) for key, q in JOINED_PERCENTILES.items()}


def true_latencies_ns(
    server: ReferenceServerProcess, after: int, window: tuple[float, float], floor_ns: np.ndarray, seed: int
) -> np.ndarray:
    """The truth of the case's steady window: each successful request answered in it (its own
    time in the server), plus a floor sample drawn with ``seed``."""
    records = server.records(after=after)
    wall_minus_mono = time.time_ns() - time.monotonic_ns()
    answered_wall = (records.answered_ns.astype(np.int64) + wall_minus_mono) / 1e9
    mask = records.with_status("ok") & (answered_wall >= window[0]) & (answered_wall < window[1])
    inside = records.answered_ns.astype(np.int64)[mask] - records.received_ns.astype(np.int64)[mask]
    draws = np.random.default_rng(seed).integers(0, floor_ns.size, inside.size)
    return np.asarray(inside + floor_ns[draws], dtype=np.int64)


def _percentile_ms(truth_ns: np.ndarray, q: float) -> float | None:
    return float(np.percentile(truth_ns, q, method="inverted_cdf")) / 1e6 if truth_ns.size else None


def percentile_error(
    label: str, measured_ms: float | None, true_ms: float | None, bounds: Bounds, misses: list[str]
) -> PercentileError:
    """A measured figure against its truth (ms): within its bound when |measured − true| ≤
    ``bounds.percentile_pct`` % of true + ``bounds.percentile_us``; a miss (or a figure not
    measured) is added to ``misses`` in words, named ``label``."""
    if measured_ms is None or true_ms is None:
        misses.append(f"{label}: not measured")
        return PercentileError(measured_ms=measured_ms, true_ms=true_ms, error_us=None, error_pct=None, within=False)
    error_us = (float(measured_ms) - true_ms) * 1000.0
    allowed_us = bounds.percentile_pct / 100.0 * true_ms * 1000.0 + bounds.percentile_us
    within = abs(error_us) <= allowed_us
    if not within:
        misses.append(f"{label} off by {error_us:+.0f} µs (bound ±{allowed_us:.0f} µs)")
    return PercentileError(
        measured_ms=round(float(measured_ms), 4),
        true_ms=round(true_ms, 4),
        error_us=round(error_us, 1),
        error_pct=round(100.0 * error_us / 1000.0 / true_ms, 2) if true_ms > 0 else None,
        within=within,
    )


def failures_missed(target: dict[str, Any], misses: list[str]) -> int:
    """The case's failed requests (summary.json's target ``failures``); any is a miss, added to ``misses``."""
    failures = int(target.get("failures") or 0)
    if failures:
        misses.append(f"{failures} failed requests")
    return failures


def stream_truth(
    server: ReferenceServerProcess, window: tuple[float, float], floor_ns: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, float | None]:
    """The streams case's truth from the server's records of the generations answered whole in the
    steady window: each one's TTFT (its first content event handed to the transport − received, plus
    a floor sample drawn with ``seed``), its TPOT ((last − first content event) / (events − 1), on
    the server's clock: no floor, both ends cross the same path), and the mean gap between content
    events over them all (the token-weighted ITL's mean with one token per event): (TTFT ns,
    TPOT ns, mean gap ms or None)."""
    records = server.records()
    wall_minus_mono = time.time_ns() - time.monotonic_ns()
    answered_wall = (records.answered_ns.astype(np.int64) + wall_minus_mono) / 1e9
    first = records.first_event_ns.astype(np.int64)
    last = records.last_event_ns.astype(np.int64)
    mask = records.with_status("ok") & (first > 0) & (answered_wall >= window[0]) & (answered_wall < window[1])
    first, last = first[mask], last[mask]
    draws = np.random.default_rng(seed).integers(0, floor_ns.size, first.size)
    ttft = first - records.received_ns.astype(np.int64)[mask] + floor_ns[draws]
    gaps = STREAM_EVENTS - 1
    tpot = (last - first) // gaps
    mean_gap_ms = float((last - first).sum()) / (first.size * gaps) / 1e6 if first.size else None
    return np.asarray(ttft, dtype=np.int64), np.asarray(tpot, dtype=np.int64), mean_gap_ms


#: the streams cases' percentiles judged: TTFT's, and TPOT's per request
STREAM_TTFT_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
STREAM_TPOT_PERCENTILES = {"p50": 50.0, "p99": 99.0}


def judge_streams(
    case: StreamCase,
    measured: dict[str, Any],
    truth: tuple[np.ndarray, np.ndarray, float | None],
    layout: RunLayout,
    bounds: Bounds,
) -> StreamCaseResult:
    """The streams case's TTFT (``decoupled.first_response_ms``), TPOT (``generation.tpot_ms``) and
    ITL mean (``generation.itl_ms.mean``) against the truth (`stream_truth`), each bound checked."""
    target = measured["target"]
    ttft_ns, tpot_ns, mean_gap_ms = truth
    stream = target.get("decoupled") or {}
    generation = target.get("generation") or {}
    ttft_ms, tpot_ms = stream.get("first_response_ms") or {}, generation.get("tpot_ms") or {}
    misses: list[str] = []
    ttft = {
        key: percentile_error(f"TTFT {key}", ttft_ms.get(key), _percentile_ms(ttft_ns, q), bounds, misses)
        for key, q in STREAM_TTFT_PERCENTILES.items()
    }
    tpot = {
        key: percentile_error(f"TPOT {key}", tpot_ms.get(key), _percentile_ms(tpot_ns, q), bounds, misses)
        for key, q in STREAM_TPOT_PERCENTILES.items()
    }
    itl_mean = percentile_error("ITL mean", (generation.get("itl_ms") or {}).get("mean"), mean_gap_ms, bounds, misses)
    failures = failures_missed(target, misses)
    events = int(stream.get("responses") or 0)
    cpu_s = measured["cpu_s"]
    return StreamCaseResult(
        name=case.name,
        streams=case.streams,
        events_per_request=STREAM_EVENTS,
        hold_ms=STREAM_HOLD_MS,
        processes=layout.processes,
        requests=int(target.get("requests") or 0),
        server_records=int(ttft_ns.size),
        failures=failures,
        ttft=ttft,
        tpot=tpot,
        itl_mean=itl_mean,
        cpu_us_per_event=round(cpu_s / events * 1e6, 1) if cpu_s is not None and events else None,
        within_bounds=not misses,
        misses=misses,
    )


def judge(
    case: Case,
    measured: dict[str, Any],
    truth_ns: np.ndarray,
    layout: RunLayout,
    bounds: Bounds,
    joined_error_us: dict[str, float] | None = None,
) -> CaseResult:
    """The case's figures against the truth, each bound checked."""
    target = measured["target"]
    latency = target.get("latency_ms") or {}
    misses: list[str] = []
    percentiles: dict[str, PercentileError] = {}
    for key, q in PERCENTILES.items():
        percentiles[key] = percentile_error(key, latency.get(key), _percentile_ms(truth_ns, q), bounds, misses)
    open_loop = target.get("open_loop")
    achieved = rate_error = unsent = None
    lag = None
    if open_loop is not None:
        achieved = float(open_loop["achieved_rps"])
        configured = float(open_loop["configured_rps"])
        rate_error = 100.0 * (achieved - configured) / configured if configured else None
        unsent = int(open_loop["unsent"])
        lag = dict(open_loop["send_lag_ms"])
        if rate_error is None or abs(rate_error) > bounds.rate_pct:
            misses.append(f"rate {achieved:.1f} of {configured:.1f} req/s ({rate_error:+.2f} %, bound ±{bounds.rate_pct:g} %)")
        lag_p99 = lag.get("p99")
        if lag_p99 is None or lag_p99 > bounds.send_lag_p99_ms:
            misses.append(f"send-lag p99 {lag_p99} ms (bound {bounds.send_lag_p99_ms:g} ms)")
    failures = failures_missed(target, misses)
    requests = int(target.get("requests") or 0)
    cpu_s = measured["cpu_s"]
    return CaseResult(
        name=case.name,
        protocol=case.protocol,
        target_kind=case.target_kind,
        loop=case.loop,
        law_name=case.law_name,
        law=case.law,
        users=case.users,
        configured_rps=case.rate_rps,
        processes=layout.processes,
        requests=requests,
        server_records=int(truth_ns.size),
        failures=failures,
        throughput_rps=target.get("throughput_rps"),
        percentiles=percentiles,
        achieved_rps=achieved,
        rate_error_pct=None if rate_error is None else round(rate_error, 3),
        send_lag_ms=lag,
        unsent=unsent,
        cpu_us_per_request=round(cpu_s / requests * 1e6, 1) if cpu_s is not None and requests else None,
        within_bounds=not misses,
        misses=misses,
        joined_error_us=joined_error_us,
    )
