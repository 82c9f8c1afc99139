"""The raw-Python gRPC ceiling: a `grpc.aio` client with no Locust and no gevent (run by `bench.run`).

    python -m bench.grpc_ceiling HOST:PORT MODEL CONCURRENCY REQUESTS [RATE_RPS] [OUT_JSON]

CONCURRENCY coroutines send Triton `ModelInfer` with one pre-built, pre-serialized request (FP32
`[1, 16]`, the bench's identity model) over one channel, as fast as the server answers or, with
RATE_RPS, paced to that total rate. 300 warm-up requests, then REQUESTS measured; the process's own
CPU (`getrusage(RUSAGE_SELF)`, gRPC's C threads included) over the measured span, per request.
This is what Python can do per request at all: the floor that the Locust users are held to.
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


async def measure(address: str, model: str, concurrency: int, requests: int, rate_rps: float | None) -> dict[str, Any]:
    body = request_bytes(model)
    async with grpc.aio.insecure_channel(address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )
        sent = 0
        marks: dict[str, tuple[float, float]] = {}
        total = WARMUP + requests
        gap = concurrency / rate_rps if rate_rps else 0.0

        async def caller() -> None:
            nonlocal sent
            next_at = time.perf_counter()
            while sent < total:
                sent += 1
                if sent == WARMUP + 1:
                    marks["start"] = (time.perf_counter(), _cpu())
                await infer(body, timeout=5.0)
                if gap:
                    next_at += gap
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        end = (time.perf_counter(), _cpu())
    wall = end[0] - marks["start"][0]
    cpu = end[1] - marks["start"][1]
    return {
        "variant": "grpc-aio-ceiling",
        "requests": requests,
        "wall_s": round(wall, 4),
        "rps": round(requests / wall, 1),
        "client_cpu_s": round(cpu, 4),
        "client_cpu_us_per_request": round(cpu / requests * 1e6, 1),
        "client_core_util": round(cpu / wall, 3),
    }


def main(argv: list[str]) -> int:
    address, model, concurrency, requests = argv[0], argv[1], int(argv[2]), int(argv[3])
    rate = float(argv[4]) if len(argv) > 4 and argv[4] not in ("", "none") else None
    result = asyncio.run(measure(address, model, concurrency, requests, rate))
    if len(argv) > 5:
        Path(argv[5]).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
