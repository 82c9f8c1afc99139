"""What the reference server costs, and how precise its holds are (docs/reference-server.md).

    python -m bench.refserver_cost [--seconds S] [--out FILE.json]

The server (``python -m inferload.local.reference_server``, 1 worker thread, no delay) is pinned
to CPU 0 and the C clients to CPU 1 (when the machine has two), so the server has one core:

- gRPC unary ``ModelInfer`` with h2load (h2c, one pre-framed ModelInferRequest, batch 1, 16 FP32);
- HTTP/1.1 ``POST /v2/models/identity/infer`` (v2 JSON) and ``POST /predictions/identity`` with wrk;

each with many requests in flight (h2load: 8 connections × 64 streams; wrk: 64 connections): the
server's own CPU (its process tree's user + system) per request it received, its core use, the
rate per core that CPU gives, the C client's own CPU per request, and the clients' req/s (the
most the server gives on one core only when its core use reaches ~1: on a busy machine the
clients' core is the limit). Then the hold's precision: a fixed 1 ms and
5 ms law under h2load load, lateness = service end − start − scripted hold from the records;
and the time to fetch every record (``GET /reference/records``) as numpy arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from bench.cpu_accounting import tree_cpu_s
from bench.machine import describe
from bench.wrk import lua_post_script
from inferload.local.reference_server import FixedDelay, NoDelay, ReferenceConfig, ReferenceServerProcess

_H2LOAD_REQUESTS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded")
_H2LOAD_RATE = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
_WRK_REQUESTS = re.compile(r"(\d+) requests in")
_WRK_RATE = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")


def grpc_body() -> bytes:
    """One ModelInferRequest in gRPC framing (flag byte, 4-byte big-endian length)."""
    request = service_pb2.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    del tensor  # the contents go in raw_input_contents
    request.raw_input_contents.append(np.zeros(16, np.float32).tobytes())
    message = request.SerializeToString()
    return b"\x00" + len(message).to_bytes(4, "big") + message


def pinned(cpu: int) -> list[str]:
    """A taskset prefix that runs a command on ``cpu`` (none on a one-CPU machine)."""
    return ["taskset", "-c", str(cpu)] if (os.cpu_count() or 1) > 1 and shutil.which("taskset") else []


def run_h2load(url: str, body: Path, requests: int, connections: int, streams: int) -> dict[str, Any]:
    command = [
        *pinned(1),
        "h2load",
        "-n",
        str(requests),
        "-c",
        str(connections),
        "-m",
        str(streams),
        "-d",
        str(body),
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    counts = _H2LOAD_REQUESTS.search(done.stdout)
    rate = _H2LOAD_RATE.search(done.stdout)
    seconds = float(rate.group(1)) / (1000.0 if rate.group(2) == "ms" else 1.0) if rate else 0.0
    return {
        "requests": int(counts.group(4)) if counts else 0,
        "wall_s": round(seconds, 3),
        "rps": float(rate.group(3)) if rate else 0.0,
    }


def run_wrk(url: str, script: Path, connections: int, seconds: float) -> dict[str, Any]:
    command = [*pinned(1), "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script), url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    count = _WRK_REQUESTS.search(done.stdout)
    rate = _WRK_RATE.search(done.stdout)
    return {
        "requests": int(count.group(1)) if count else 0,
        "rps": float(rate.group(1)) if rate else 0.0,
        "non_2xx": bool(_WRK_NON_2XX.search(done.stdout)),
    }


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_cost(server: ReferenceServerProcess, load: Any) -> dict[str, Any]:
    """Run ``load()`` (a client run's figures) and add the server's CPU per request over it, the
    client's (the C tool, a finished child of this process), and the server's rate per core that
    its CPU per request gives (1 s / CPU per request)."""
    pid = server.pid
    assert pid is not None
    received, cpu, client, wall = server.stats()["received"], tree_cpu_s([pid]), children_cpu_s(), time.perf_counter()
    figures: dict[str, Any] = load()
    wall = time.perf_counter() - wall
    requests = server.stats()["received"] - received
    cpu = tree_cpu_s([pid]) - cpu
    client = children_cpu_s() - client
    figures.update(
        server_requests=requests,
        server_cpu_us_per_request=round(cpu / requests * 1e6, 2) if requests else None,
        server_core_use=round(cpu / wall, 3),
        server_rps_per_core=round(requests / cpu) if cpu else None,
        client_cpu_us_per_request=round(client / requests * 1e6, 2) if requests else None,
    )
    return figures


def lateness(server: ReferenceServerProcess) -> dict[str, float]:
    records = server.records()
    late_us = np.true_divide(records.service_ns - records.hold_ns.astype(np.int64), 1e3)
    return {
        "records": len(records),
        "early": int((late_us < 0).sum()),
        "late_p50_us": round(float(np.percentile(late_us, 50)), 1),
        "late_p99_us": round(float(np.percentile(late_us, 99)), 1),
        "late_max_us": round(float(late_us.max()), 1),
    }


def measure_cost(folder: Path, body: Path, seconds: float) -> dict[str, Any]:
    """The server's cost per request over gRPC and HTTP, then the fetch of every record."""
    results: dict[str, Any] = {}
    with ReferenceServerProcess(ReferenceConfig(delay=NoDelay(), threads=1, record_capacity=5_000_000)) as server:
        assert server.pid is not None
        if pinned(0):  # every thread of it: the runtime's workers and the hold timer too
            for thread in Path(f"/proc/{server.pid}/task").iterdir():
                os.sched_setaffinity(int(thread.name), {0})
        grpc_url = f"http://{server.grpc_address}/inference.GRPCInferenceService/ModelInfer"
        run_h2load(grpc_url, body, 20_000, 4, 16)  # warm-up: connections, caches, allocator
        requests = int(60_000 * seconds)
        results["grpc_h2load"] = server_cost(server, lambda: run_h2load(grpc_url, body, requests, 8, 64))

        v2_body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]})
        for name, path, payload, content_type in (
            ("http_v2_json_wrk", "/v2/models/identity/infer", v2_body.encode(), "application/json"),
            ("rest_predictions_wrk", "/predictions/identity", b"x" * 64, "application/octet-stream"),
        ):
            script = folder / f"{name}.lua"
            script.write_text(lua_post_script(payload, content_type))
            url = server.http_url + path

            def load(script: Path = script, url: str = url) -> dict[str, Any]:
                return run_wrk(url, script, 64, seconds)

            results[name] = server_cost(server, load)

        started = time.perf_counter()
        everything = server.records()
        results["records_fetch"] = {"records": len(everything), "seconds": round(time.perf_counter() - started, 3)}
    return results


def measure_holds(body: Path) -> dict[str, Any]:
    """Fixed 1 ms and 5 ms holds under h2load (16 in flight): their lateness from the records."""
    results: dict[str, Any] = {}
    for hold_ms in (1.0, 5.0):
        with ReferenceServerProcess(ReferenceConfig(delay=FixedDelay(ms=hold_ms), threads=1)) as server:
            grpc_url = f"http://{server.grpc_address}/inference.GRPCInferenceService/ModelInfer"
            run_h2load(grpc_url, body, int(4000 / hold_ms), 2, 8)
            results[f"hold_{hold_ms:g}ms"] = {**lateness(server), "hold_thread_realtime": server.stats()["hold_thread_realtime"]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.refserver_cost")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each saturation run")
    parser.add_argument("--out", type=Path, help="also write the figures there (JSON)")
    parser.add_argument("--holds-only", action="store_true", help="only the holds' precision")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="refserver-cost-"))
    body = folder / "infer.grpc"
    body.write_bytes(grpc_body())
    results: dict[str, Any] = {"machine": describe()}
    if not arguments.holds_only:
        results.update(measure_cost(folder, body, arguments.seconds))
    results.update(measure_holds(body))
    shutil.rmtree(folder, ignore_errors=True)
    text = json.dumps(results, indent=2)
    print(text)
    if arguments.out:
        arguments.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
