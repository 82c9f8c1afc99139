"""The raw-Python gRPC ceiling: a `grpc.aio` client with no Locust and no gevent (run by `bench.run`).

    python -m bench.grpc_ceiling HOST:PORT MODEL CONCURRENCY REQUESTS|SECONDSs [RATE_RPS] [OUT_JSON]

CONCURRENCY coroutines send Triton `ModelInfer` with one pre-built, pre-serialized request (FP32
`[1, 16]`, the bench's identity model) over one channel, as fast as the server answers or, with
RATE_RPS, paced to that total rate. 300 warm-up requests, then REQUESTS measured; the process's own
CPU (`getrusage(RUSAGE_SELF)`, gRPC's C threads included) over the measured span, per request.
This is what Python can do per request at all: the floor that the Locust users are held to.
With a duration (``8s``) instead of a count, it sends for that long, warm-up included (the peers
item, `bench.peers`, counts requests on the server); the output then also holds every call's
count, failures and mean latency (`requests_total`, `failures`, `client_mean_ms`).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

WARMUP = 300


def request_bytes(model: str) -> bytes:
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name = "INPUT__0"
    tensor.datatype = "FP32"
    tensor.shape.extend([1, 16])
    request.raw_input_contents.append(np.random.default_rng(1).random((1, 16), dtype=np.float32).tobytes())
    return request.SerializeToString()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(
    address: str, model: str, concurrency: int, requests: int, rate_rps: float | None, seconds: float | None = None
) -> dict[str, Any]:
    body = request_bytes(model)
    async with grpc.aio.insecure_channel(address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )
        sent = failures = 0
        latency_sum = 0.0
        marks: dict[str, tuple[float, float]] = {}
        total = WARMUP + requests
        gap = concurrency / rate_rps if rate_rps else 0.0
        began = time.perf_counter()
        stop_at = began + seconds if seconds is not None else None

        def more() -> bool:
            return time.perf_counter() < stop_at if stop_at is not None else sent < total

        async def caller() -> None:
            nonlocal sent, failures, latency_sum
            next_at = time.perf_counter()
            while more():
                sent += 1
                if sent == WARMUP + 1:
                    marks["start"] = (time.perf_counter(), _cpu())
                call_start = time.perf_counter()
                try:
                    await infer(body, timeout=5.0)
                except grpc.aio.AioRpcError:
                    failures += 1
                latency_sum += time.perf_counter() - call_start
                if gap:
                    next_at += gap
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        end = (time.perf_counter(), _cpu())
    start = marks.get("start", (began, 0.0))
    measured = sent - WARMUP if sent > WARMUP else sent
    wall = end[0] - start[0]
    cpu = end[1] - start[1]
    return {
        "variant": "grpc-aio-ceiling",
        "requests": measured,
        "requests_total": sent - failures,
        "failures": failures,
        "client_mean_ms": round(latency_sum / sent * 1e3, 4) if sent else None,
        "wall_s": round(wall, 4),
        "rps": round(measured / wall, 1) if wall else 0.0,
        "client_cpu_s": round(cpu, 4),
        "client_cpu_us_per_request": round(cpu / measured * 1e6, 1) if measured else 0.0,
        "client_core_util": round(cpu / wall, 3) if wall else 0.0,
    }


def main(argv: list[str]) -> int:
    address, model, concurrency = argv[0], argv[1], int(argv[2])
    seconds = float(argv[3][:-1]) if argv[3].endswith("s") else None
    requests = 0 if seconds is not None else int(argv[3])
    rate = float(argv[4]) if len(argv) > 4 and argv[4] not in ("", "none") else None
    result = asyncio.run(measure(address, model, concurrency, requests, rate, seconds))
    if len(argv) > 5:
        Path(argv[5]).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
