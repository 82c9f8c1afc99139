"""The native engine's own cost and pacing, without Locust (issue 20): a micro-benchmark, not a test.

- **Saturation** (closed loop, 16 slots, gRPC and HTTP): client CPU per request, as difference over
  difference of a short and a long run on the same warm engine (start-up cancels): this process's
  CPU (``getrusage``: the engine's threads included) over the requests the engine recorded.
- **Paced** (open loop, 200 req/s, 8 senders, gRPC and HTTP): the send lag (actual write − intended
  send time) p50/p99/p99.9/max from the engine's own lag histogram, and the achieved rate.

Against the real Triton ``identity`` model (started here on free ports unless ``--grpc``/``--http``
name a running one), so the server, not the engine, bounds the rate::

    python -m bench.engine_micro [--grpc HOST:PORT --http HOST:PORT] [--out engine-micro.json]

Prints one line per figure and writes them as JSON. The engine must be built (``make build``).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from inferload import _native
from inferload.local.models.build import ensure_models
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import stop_group
from inferload.local.servers.triton_local import start_triton
from inferload.measure.hdr import LatencyStats
from inferload.scenario.limits import DEFAULT_MAX_ANSWER_BYTES

SATURATION_SLOTS = 16
SHORT_S, LONG_S = 2.0, 6.0
PACED_RATE = 200.0
PACED_S = 10.0
PACED_SENDERS = 8


def identity_requests(protocol: str) -> list[Any]:
    array = np.zeros((1, 16), dtype=np.float32)
    if protocol == "grpc":
        request = service_pb2.ModelInferRequest(model_name="identity")
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = "INPUT__0", "FP32"
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(array.tobytes())
        return [request.SerializeToString()]
    infer_input = httpclient.InferInput("INPUT__0", list(array.shape), "FP32")
    infer_input.set_data_from_numpy(array, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [infer_input], outputs=[httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)]
    )
    return [("/v2/models/identity/infer", body, [("Inference-Header-Content-Length", str(json_size))])]


def add_target(engine: Any, protocol: str, address: str, open_loop: bool) -> int:
    check = (
        {"answer": "grpc_shapes", "shapes": {"OUTPUT__0": [-1, 16]}}
        if protocol == "grpc"
        else {"answer": "triton_http", "shapes": {"OUTPUT__0": [1, 16]}}
    )
    url = address if protocol == "grpc" else f"http://{address}"
    return int(
        engine.add_target(
            f"identity-{protocol}",
            "gRPC" if protocol == "grpc" else "HTTP",
            protocol,
            url,
            address,
            10.0,
            [],
            identity_requests(protocol),
            check,
            open_loop_max_queue=1000 if open_loop else None,
            max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES,
        )
    )


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def closed_run(engine: Any, target: int, seconds: float) -> tuple[float, int, int]:
    """(CPU s, requests, failures) of a closed loop on SATURATION_SLOTS slots for ``seconds``."""
    engine.drain()
    slots = [engine.open_slot(target) for _ in range(SATURATION_SLOTS)]
    started = cpu_s()
    for slot in slots:
        engine.run_closed(slot)
    time.sleep(seconds)
    for slot in slots:
        engine.close_slot(slot)
    spent = cpu_s() - started
    entries = engine.drain()["locust"]
    return spent, sum(e["num_requests"] for e in entries), sum(e["num_failures"] for e in entries)


def saturation(protocol: str, address: str) -> dict[str, Any]:
    engine = _native.Engine(threads=1)
    target = add_target(engine, protocol, address, open_loop=False)
    closed_run(engine, target, 1.0)  # warm: connections, allocator
    short_cpu, short_n, short_f = closed_run(engine, target, SHORT_S)
    long_cpu, long_n, long_f = closed_run(engine, target, LONG_S)
    engine.close()
    return {
        "protocol": protocol,
        "slots": SATURATION_SLOTS,
        "rate_rps": long_n / LONG_S,
        "cpu_us_per_request": (long_cpu - short_cpu) / (long_n - short_n) * 1e6,
        "client_cores": long_cpu / LONG_S,
        "failures": short_f + long_f,
    }


def paced(protocol: str, address: str) -> dict[str, Any]:
    engine = _native.Engine(threads=1)
    target = add_target(engine, protocol, address, open_loop=True)
    senders = [engine.open_slot(target) for _ in range(PACED_SENDERS)]
    for slot in senders:
        engine.run_open(slot)
    count = int(PACED_RATE * PACED_S)
    start = time.time() + 0.5
    intended = [start + i / PACED_RATE for i in range(count)]
    lag, latency = LatencyStats(), LatencyStats()
    arrivals = unsent = done = failures = 0
    position = 0
    while done < count and time.time() < intended[-1] + 10:
        horizon = time.time() + 0.5
        end = position
        while end < count and intended[end] < horizon:
            end += 1
        if end > position:
            engine.feed(target, np.array(intended[position:end], dtype=np.float64).tobytes())
            position = end
        time.sleep(0.25)
        wire = engine.drain()
        record = wire["record"]
        for data in record["lag_steady"].values():
            lag.merge(LatencyStats.from_wire(data))
        for data in record["steady"].values():
            latency.merge(LatencyStats.from_wire(data))
        for sent, left in record["arrivals_steady"].values():
            arrivals, unsent = arrivals + sent, unsent + left
        done += sum(e["num_requests"] for e in wire["locust"])
        failures += sum(e["num_failures"] for e in wire["locust"])
    engine.end_arrivals(target)
    engine.close()
    lag_ms, latency_ms = lag.latency_ms(), latency.latency_ms()
    return {
        "protocol": protocol,
        "rate_rps": PACED_RATE,
        "senders": PACED_SENDERS,
        "arrivals": arrivals,
        "unsent": unsent,
        "completed": done,
        "failures": failures,
        "achieved_rps": done / PACED_S,
        "send_lag_ms": {k: lag_ms[k] for k in ("p50", "p99", "p999", "max")},
        "latency_ms": {k: latency_ms[k] for k in ("p50", "p99", "max")},
    }


def wait_ready(http: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://{http}/v2/models/identity/ready", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit(f"Triton at {http} did not serve identity in 180 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpc", help="a running Triton's gRPC host:port serving identity")
    parser.add_argument("--http", help="the same Triton's HTTP host:port")
    parser.add_argument("--out", type=Path, default=Path("engine-micro.json"))
    options = parser.parse_args()
    record = None
    if options.grpc and options.http:
        grpc_address, http_address = options.grpc, options.http
    else:
        ensure_models(("identity",))
        ports = ServerPorts.free()
        state = Path(tempfile.mkdtemp(prefix="engine-micro-"))
        record = start_triton(state, ports, ("identity",))
        grpc_address, http_address = f"127.0.0.1:{ports.triton_grpc}", f"127.0.0.1:{ports.triton_http}"
    try:
        wait_ready(http_address)
        figures: dict[str, Any] = {"saturation": [], "paced": []}
        for protocol, address in (("grpc", grpc_address), ("http", http_address)):
            found = saturation(protocol, address)
            figures["saturation"].append(found)
            print(
                f"saturation {protocol}: {found['rate_rps']:.0f} req/s, {found['cpu_us_per_request']:.1f} µs CPU/request, "
                f"{found['client_cores']:.2f} client cores, {found['failures']} failures"
            )
        for protocol, address in (("grpc", grpc_address), ("http", http_address)):
            found = paced(protocol, address)
            figures["paced"].append(found)
            lag = found["send_lag_ms"]
            print(
                f"paced {protocol} at {PACED_RATE:.0f} req/s: achieved {found['achieved_rps']:.2f} req/s "
                f"({found['arrivals']} arrivals, {found['unsent']} unsent, {found['failures']} failures); send lag ms "
                f"p50 {lag['p50']:.4f} p99 {lag['p99']:.4f} p99.9 {lag['p999']:.4f} max {lag['max']:.4f}"
            )
        options.out.write_text(json.dumps(figures, indent=2))
    finally:
        if record is not None:
            stop_group(record, term_timeout_s=15)


if __name__ == "__main__":
    main()
