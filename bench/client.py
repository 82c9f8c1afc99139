"""One measurement of one client variant, in its own process (run by `bench.run`).

    python -m bench.client SPEC_JSON OUT_JSON

SPEC_JSON holds a `MeasureSpec` (variant, addresses, users, rate or closed loop, how many
requests to warm up and to measure, server pids to watch, Triton statistics, InfluxDB). The
process runs Locust as a library (LocalRunner, the same greenlets as `locust --headless`),
waits out the warm-up, and then reads its own CPU accounting (`getrusage(RUSAGE_SELF)`: all
threads, gRPC's C threads and the native engine's included) plus its child processes' (psutil), the servers' CPU (psutil, process trees), the machine's
idle time and Locust's request totals at the start and at the end of the measured span.
A request counter is polled, never hooked, so measuring adds no per-request cost.
"""

from __future__ import annotations

import grpc.experimental.gevent as grpc_gevent
import locust  # noqa: F401  (first: gevent monkey patching)

grpc_gevent.init_gevent()  # before any gRPC channel

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
from locust import constant, constant_throughput  # noqa: E402
from locust.env import Environment  # noqa: E402

from bench.cpu_accounting import children_cpu, self_cpu, tree_cpu_s  # noqa: E402
from bench.plain_users import PlainFastHttpUser, PlainTritonGrpcUser, triton_infer_request  # noqa: E402

VARIANTS = (
    "grpc-inferload",
    "grpc-inferload-python",  # the same user on the Python transport (INFERLOAD_TRANSPORT=python)
    "grpc-plain",
    "http-inferload",
    "http-inferload-python",
    "http-plain",
    "rest-inferload",
    "rest-plain",
)
POLL_S = 0.005


@dataclass
class MeasureSpec:
    """What one client process measures (JSON-friendly)."""

    variant: str
    model: str = "identity"
    input_shape: tuple[int, ...] = (16,)
    triton_grpc: str = ""  # host:port
    triton_http: str = ""  # host:port
    torchserve: str = ""  # http://host:port
    users: int = 4
    rate_rps: float | None = None  # total paced rate; None: closed loop
    warmup_requests: int = 300
    requests: int | None = 3000  # stop after this many measured requests ...
    seconds: float | None = None  # ... or after this many seconds
    server_pids: list[int] = field(default_factory=list)
    triton_stats: bool = False  # read Triton's own statistics over the measured span
    influx_url: str | None = None  # stream windows to this InfluxDB (inferload variants)
    timeout_s: float = 120.0
    dataset: str | None = None  # an absolute data-set path the input is fed from (rotated per request)


@dataclass
class Measurement:
    """What one client process measured over its measured span."""

    variant: str
    requests: int
    failures: int
    wall_s: float
    rps: float
    client_cpu_s: float
    client_cpu_user_s: float
    client_cpu_sys_s: float
    client_cpu_us_per_request: float
    client_core_util: float  # client CPU seconds per wall second (1.0 = one core)
    server_core_util: float | None
    machine_idle_frac: float
    client_mean_ms: float | None
    server_request_ms_avg: float | None = None
    server_queue_ms_avg: float | None = None
    server_compute_ms_avg: float | None = None
    server_avg_batch_size: float | None = None
    streaming: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    #: the part of client_cpu_us_per_request spent in child processes (none today)
    client_children_cpu_us_per_request: float = 0.0


def _input_array(spec: MeasureSpec) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.random((1, *spec.input_shape), dtype=np.float32)


def _scenario_target(spec: MeasureSpec) -> dict[str, Any]:
    kind, address = {
        "grpc": ("triton-grpc", spec.triton_grpc),
        "http": ("triton-http", spec.triton_http),
        "rest": ("torchserve-rest", spec.torchserve),
    }[spec.variant.split("-")[0]]
    return {
        "name": spec.variant,
        "kind": kind,
        "address": address,
        "model": spec.model,
        "inputs": [
            {
                "name": "INPUT__0",
                "shape": list(spec.input_shape),
                "dtype": "FP32",
                "data": {"dataset": spec.dataset} if spec.dataset else {"generator": "random", "seed": 1},
            }
        ],
        "timeout": "5s",
    }


def _wait_time(spec: MeasureSpec) -> Any:
    return constant(0) if spec.rate_rps is None else constant_throughput(spec.rate_rps / spec.users)


def inferload_user_class(spec: MeasureSpec) -> tuple[type, Any, Environment]:
    """The user class a real run makes for this target, set up as `InferloadRun` does (its fit in
    the environment's wiring of it)."""
    from inferload.run.plugin import InferloadRun
    from inferload.scenario.schema import Scenario

    scenario = Scenario.model_validate(
        {
            "name": "bench",
            "duration": "1h",
            "warmup": "0s",
            "targets": [_scenario_target(spec)],
            "shape": {"kind": "steady", "users": spec.users},
        }
    )
    run = InferloadRun(scenario)
    (cls,) = run.user_classes.values()
    cls.wait_time = _wait_time(spec)
    env = Environment(user_classes=[cls])
    run.check_models(env)  # fits the class to its model (its ModelFit) as a real run does
    return cls, scenario, env


def plain_user_class(spec: MeasureSpec) -> type:
    array = _input_array(spec)
    wait = _wait_time(spec)
    if spec.variant == "grpc-plain":
        request = triton_infer_request(spec.model, "INPUT__0", array)
        return type(
            "PlainGrpc",
            (PlainTritonGrpcUser,),
            {
                "abstract": False,
                "grpc_address": spec.triton_grpc,
                "infer_request": request,
                "wait_time": wait,
            },
        )
    if spec.variant == "http-plain":
        import tritonclient.http as httpclient

        infer_input = httpclient.InferInput("INPUT__0", list(array.shape), "FP32")
        infer_input.set_data_from_numpy(array, binary_data=True)
        body, json_size = httpclient.InferenceServerClient.generate_request_body([infer_input])
        headers = {"Content-Type": "application/octet-stream"}
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = str(json_size)
        return type(
            "PlainHttp",
            (PlainFastHttpUser,),
            {
                "abstract": False,
                "host": f"http://{spec.triton_http}",
                "post_path": f"/v2/models/{spec.model}/infer",
                "body": body,
                "headers": headers,
                "wait_time": wait,
            },
        )
    if spec.variant == "rest-plain":
        return type(
            "PlainRest",
            (PlainFastHttpUser,),
            {
                "abstract": False,
                "host": spec.torchserve,
                "post_path": f"/predictions/{spec.model}",
                "body": array.tobytes(),
                "headers": {"Content-Type": "application/octet-stream"},
                "wait_time": wait,
            },
        )
    raise ValueError(f"unknown variant {spec.variant!r}; expected one of {VARIANTS}")


@dataclass
class _Mark:
    at: float
    cpu_user: float
    cpu_sys: float
    server_cpu: float
    machine: Any
    requests: int
    failures: int
    total_ms: float
    triton: Any = None
    children_cpu: float = 0.0


def _mark(env: Environment, spec: MeasureSpec) -> _Mark:
    from inferload.servermetrics import readers as server_stats

    triton = None
    if spec.triton_stats:
        triton = server_stats.snapshot("triton-grpc", spec.triton_grpc, spec.model)
    total = env.stats.total
    user, system = self_cpu()
    children = sum(children_cpu())
    return _Mark(
        time.perf_counter(),
        user,
        system,
        tree_cpu_s(spec.server_pids),
        psutil.cpu_times(),
        total.num_requests,
        total.num_failures,
        total.total_response_time,
        triton,
        children,
    )


def _measured_enough(env: Environment, spec: MeasureSpec, start: _Mark) -> bool:
    if spec.requests is not None and env.stats.total.num_requests - start.requests >= spec.requests:
        return True
    return spec.seconds is not None and time.perf_counter() - start.at >= spec.seconds


def measure(spec: MeasureSpec) -> Measurement:
    streaming = None
    if spec.variant.endswith("-python"):
        from inferload.users.engine import TRANSPORT_ENV

        os.environ[TRANSPORT_ENV] = "python"
    if "-inferload" in spec.variant:
        from inferload.run.recorder import RunRecorder

        cls, scenario, env = inferload_user_class(spec)
        from inferload.users.engine import assign_engine

        engine = assign_engine(env, [cls], scenario.window)  # before the recorder, as a run wires it
        recorder = RunRecorder(env, scenario.warmup, scenario.window)
        if engine is not None:
            engine.attach(recorder.record, None, scenario.warmup)
        if spec.influx_url:
            from inferload.observe.influx_export import InfluxExport
            from inferload.observe.sink import settings_from_mapping

            settings = settings_from_mapping({"url": spec.influx_url, "database": "bench"}, environ={})
            assert settings is not None  # a URL was given
            streaming = InfluxExport(env, recorder.record, scenario, settings, run_id=lambda: "bench")
    else:
        env = Environment(user_classes=[plain_user_class(spec)])
    runner = env.create_local_runner()
    deadline = time.perf_counter() + spec.timeout_s
    runner.start(spec.users, spawn_rate=max(spec.users, 1) * 10.0)
    while env.stats.total.num_requests < spec.warmup_requests and time.perf_counter() < deadline:
        gevent.sleep(POLL_S)
    start = _mark(env, spec)
    while not _measured_enough(env, spec, start) and time.perf_counter() < deadline:
        gevent.sleep(POLL_S)
    end = _mark(env, spec)
    runner.quit()
    stream_stats = streaming.close() if streaming is not None else None
    return _summarise(spec, start, end, stream_stats)


def _summarise(spec: MeasureSpec, start: _Mark, end: _Mark, stream_stats: dict[str, Any] | None) -> Measurement:
    from inferload.servermetrics import readers as server_stats

    wall = end.at - start.at
    requests = end.requests - start.requests
    failures = end.failures - start.failures
    cpu_user = end.cpu_user - start.cpu_user
    cpu_sys = end.cpu_sys - start.cpu_sys
    cpu = cpu_user + cpu_sys
    busy_fields = ("user", "nice", "system", "irq", "softirq", "steal")
    idle = (end.machine.idle - start.machine.idle) + (getattr(end.machine, "iowait", 0) - getattr(start.machine, "iowait", 0))
    busy = sum(getattr(end.machine, f, 0) - getattr(start.machine, f, 0) for f in busy_fields)
    result = Measurement(
        variant=spec.variant,
        requests=requests,
        failures=failures,
        wall_s=round(wall, 4),
        rps=round(requests / wall, 1) if wall > 0 else 0.0,
        client_cpu_s=round(cpu, 4),
        client_cpu_user_s=round(cpu_user, 4),
        client_cpu_sys_s=round(cpu_sys, 4),
        client_cpu_us_per_request=round(cpu / requests * 1e6, 1) if requests else 0.0,
        client_core_util=round(cpu / wall, 3) if wall > 0 else 0.0,
        server_core_util=round((end.server_cpu - start.server_cpu) / wall, 3) if spec.server_pids and wall > 0 else None,
        machine_idle_frac=round(idle / (idle + busy), 3) if idle + busy > 0 else 0.0,
        client_mean_ms=round((end.total_ms - start.total_ms) / requests, 4) if requests else None,
        streaming=stream_stats,
        client_children_cpu_us_per_request=round((end.children_cpu - start.children_cpu) / requests * 1e6, 1)
        if requests
        else 0.0,
    )
    if failures:
        result.errors.append(f"{failures} of {requests} requests failed")
    if start.triton is not None and end.triton is not None:
        side = server_stats.server_side(start.triton, end.triton)
        result.server_request_ms_avg = side["request_ms_avg"]
        result.server_queue_ms_avg = side["queue_ms_avg"]
        result.server_compute_ms_avg = side["compute_ms_avg"]
        result.server_avg_batch_size = side["avg_batch_size"]
    return result


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    data = json.loads(spec_path.read_text())
    data["input_shape"] = tuple(data.get("input_shape", (16,)))
    spec = MeasureSpec(**data)
    result = measure(spec)
    out_path.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
