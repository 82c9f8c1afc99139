"""Metric sources on captures of the real endpoints: Triton's metrics and statistics API,
TorchServe's /metrics with our handler's counters, and NVML (through a stand-in module)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inferload.observe.sources.base import SourceError
from inferload.observe.sources.nvml import GpuReading, NvmlSource, gpu_point
from inferload.observe.sources.prometheus import parse_samples
from inferload.observe.sources.torchserve import TorchServeCounters, torchserve_counters, torchserve_rates
from inferload.observe.sources.triton import (
    TritonCounters,
    batch_executions,
    batch_size_points,
    counts_diff,
    triton_counters,
    triton_rates,
)

CAPTURES = Path(__file__).resolve().parent.parent / "captures"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


# --- Triton ----------------------------------------------------------------------------------------


def test_triton_counters_are_read_by_the_names_the_parser_gives() -> None:
    counters = triton_counters(parse_samples(capture("triton_metrics.txt")), "cnn", 10.0)
    assert counters is not None
    assert counters.values["success"] == 201 and counters.values["inferences"] == 201
    assert counters.values["executions"] == 73 and counters.values["queue_us"] == 447318
    assert counters.values["failure"] == 0 and counters.pending == 0


def test_a_model_the_server_does_not_serve_has_no_counters() -> None:
    assert triton_counters(parse_samples(capture("triton_metrics.txt")), "resnet", 0.0) is None


def test_triton_rates_over_an_interval() -> None:
    zero = TritonCounters(
        0.0, {k: 0.0 for k in triton_counters(parse_samples(capture("triton_metrics.txt")), "cnn", 0).values}, 0.0
    )
    later = triton_counters(parse_samples(capture("triton_metrics.txt")), "cnn", 10.0)
    rates = triton_rates(zero, later)
    assert rates is not None
    assert rates["inferences_per_s"] == pytest.approx(20.1)
    assert rates["executions_per_s"] == pytest.approx(7.3)
    assert rates["avg_batch_size"] == pytest.approx(201 / 73)
    assert rates["queue_ms"] == pytest.approx(447318 / 201 / 1000)
    assert rates["compute_ms"] == pytest.approx((16207 + 2445336 + 38677) / 201 / 1000)
    assert rates["request_ms"] == pytest.approx(2948628 / 201 / 1000)
    assert rates["pending"] == 0 and rates["failures_per_s"] == 0


def test_counters_that_went_down_mean_a_restart_and_give_no_rates() -> None:
    later = triton_counters(parse_samples(capture("triton_metrics.txt")), "cnn", 10.0)
    restarted = TritonCounters(11.0, {k: 0.0 for k in later.values}, 0.0)
    assert triton_rates(later, restarted) is None


def test_an_idle_interval_has_rates_of_zero_and_no_averages() -> None:
    later = triton_counters(parse_samples(capture("triton_metrics.txt")), "cnn", 10.0)
    idle = TritonCounters(12.0, dict(later.values), 0.0)
    rates = triton_rates(later, idle)
    assert rates["inferences_per_s"] == 0 and rates["avg_batch_size"] is None and rates["queue_ms"] is None


@pytest.mark.parametrize("name", ["triton_stats_cnn_http.json", "triton_stats_cnn_grpc.json"])
def test_batch_stats_give_executions_per_batch_size_that_add_up_to_the_inference_count(name: str) -> None:
    statistics = json.loads(capture(name))
    executions = batch_executions(statistics, "cnn")
    assert executions == {1: 30, 2: 16, 3: 9, 4: 2, 5: 6, 6: 1, 7: 5, 8: 3, 9: 1}
    assert sum(size * n for size, n in executions.items()) == 201  # = inference_count: exact
    assert sum(executions.values()) == 73  # = execution_count


def test_the_batch_histogram_of_an_interval_is_the_difference_of_two_polls() -> None:
    assert counts_diff({1: 30, 8: 3}, {1: 32, 8: 3, 16: 4}) == {1: 2, 16: 4}
    assert counts_diff({1: 30}, {1: 2}) is None  # restarted
    points = batch_size_points("t", "cnn", {1: 2, 16: 4}, 5.0)
    assert [(p.tags["batch_size"], p.fields["count"]) for p in points] == [("1", 2), ("16", 4)]
    assert points[0].tags == {"target": "t", "model": "cnn", "batch_size": "1"} and points[0].time_ns == 5_000_000_000


# --- TorchServe ------------------------------------------------------------------------------------


def test_torchserve_counters_include_our_handler_batches() -> None:
    counters = torchserve_counters(parse_samples(capture("torchserve_metrics.txt")), "cnn", 10.0)
    assert counters is not None and counters.has_handler_metrics
    assert counters.values["requests"] == 201 and counters.values["items"] == 201
    assert counters.batches == {1: 1, 3: 1, 5: 1, 8: 24}
    assert sum(size * n for size, n in counters.batches.items()) == counters.values["items"]


def test_torchserve_rates_over_an_interval() -> None:
    later = torchserve_counters(parse_samples(capture("torchserve_metrics.txt")), "cnn", 10.0)
    zero = TorchServeCounters(0.0, {k: 0.0 for k in later.values}, {}, True)
    rates = torchserve_rates(zero, later)
    assert rates["inferences_per_s"] == pytest.approx(20.1)
    assert rates["executions_per_s"] == pytest.approx(2.7)
    assert rates["avg_batch_size"] == pytest.approx(201 / 27)
    assert rates["request_ms"] == pytest.approx(7747069.549 / 201 / 1000)
    assert rates["queue_ms"] == pytest.approx(3742469.52 / 201 / 1000)
    assert rates["compute_ms"] == pytest.approx(2455460 / 201 / 1000)
    assert rates["failures_per_s"] == 0
    assert "pending" not in rates  # TorchServe does not export it


def test_prometheus_text_that_does_not_parse_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="not Prometheus text"):
        parse_samples('metric{model="cnn" 1\n')


# --- NVML ------------------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_nvml(devices: list[dict] | None, init_error: str | None = None) -> SimpleNamespace:
    """A stand-in for the pynvml module: `devices` readings, or an init failure."""

    def init() -> None:
        if init_error:
            raise FakeNVMLError(init_error)

    def unsupported() -> None:
        raise FakeNVMLError("Not Supported")

    def field(name: str):
        def read(handle, *_):
            value = devices[handle][name]
            return unsupported() if value is None else value

        return read

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        nvmlInit=init,
        nvmlDeviceGetCount=lambda: len(devices or []),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=field("name"),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=devices[h]["util"]),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=devices[h]["used"], total=devices[h]["total"]),
        nvmlDeviceGetPowerUsage=field("power_mw"),
        nvmlDeviceGetTemperature=field("temp"),
        nvmlDeviceGetClockInfo=field("sm"),
    )


def test_without_a_driver_nvml_says_why_once_and_scrapes_nothing(caplog) -> None:
    source = NvmlSource(host="h", nvml=fake_nvml(None, init_error="NVML Shared Library Not Found"))
    assert (
        source.unavailable_reason == "NVML is unavailable: NVML Shared Library Not Found (no NVIDIA driver or GPU on this host)"
    )
    assert source.scrape(1.0) == [] and source.scrape(2.0) == []
    assert caplog.text.count("GPU metrics off") == 1


def test_nvml_readings_become_gpu_points_and_unsupported_readings_are_left_out() -> None:
    devices = [
        {
            "name": "NVIDIA H200",
            "util": 87,
            "used": 10 * 2**30,
            "total": 141 * 2**30,
            "power_mw": 412_000,
            "temp": 55,
            "sm": 1980,
        },
        {"name": b"NVIDIA H200", "util": 0, "used": 0, "total": 141 * 2**30, "power_mw": None, "temp": 30, "sm": 345},
    ]
    points = NvmlSource(host="gpu-host", nvml=fake_nvml(devices)).scrape(3.0)
    assert [p.tags for p in points] == [
        {"host": "gpu-host", "gpu": "0", "name": "NVIDIA H200"},
        {"host": "gpu-host", "gpu": "1", "name": "NVIDIA H200"},
    ]
    assert points[0].fields == {
        "util_pct": 87.0,
        "mem_used_bytes": 10 * 2**30,
        "mem_total_bytes": 141 * 2**30,
        "power_w": 412.0,
        "temp_c": 55.0,
        "sm_clock_mhz": 1980.0,
    }
    assert points[1].fields["power_w"] is None and points[0].time_ns == 3_000_000_000


def test_gpu_point_is_tagged_host_gpu_and_name() -> None:
    point = gpu_point("h", GpuReading(2, "A100", 1.0, 2, 3, 4.0, 5.0, 6.0), 1.0)
    assert point.measurement == "gpu" and point.tags == {"host": "h", "gpu": "2", "name": "A100"}
