"""The collector's sources on captures of the real endpoints: Triton and TorchServe adapters turn
servermetrics readings into `server` and `batch_sizes` points (the parsing itself is pinned in
test_servermetrics.py), and NVML (through a stand-in module)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import cast

import pytest

from inferload.errors import ScrapeError
from inferload.observe.sources.nvml import GpuReading, NvmlSource, gpu_point
from inferload.observe.sources.server import ServerSource, TorchServeSource, TritonSource, batch_size_points
from inferload.servermetrics.readers import server_side
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.servermetrics.torchserve import parse_torchserve_metrics
from inferload.servermetrics.triton import parse_triton_statistics

CAPTURES = Path(__file__).resolve().parent.parent / "captures"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def zero_like(snap: ServerSnapshot, taken_at: float) -> ServerSnapshot:
    return ServerSnapshot(
        snap.server, snap.model, taken_at, dict.fromkeys(snap.counters, 0.0), {}, snap.has_batch_stats, snap.pending
    )


class PagesHttp:
    """A stand-in for servermetrics' HttpClient: each `text(url)` answers the next page."""

    def __init__(self, *pages: str | Exception) -> None:
        self.pages = list(pages)
        self.closed = False

    def text(self, url: str) -> str:
        page = self.pages.pop(0)
        if isinstance(page, Exception):
            raise page
        return page

    def close(self) -> None:
        self.closed = True


class ScriptedStatistics:
    """A stand-in for TritonStatisticsReader: each `read` answers the next reading (its time set)."""

    def __init__(self, *readings: ServerSnapshot) -> None:
        self.readings = list(readings)

    def read(self, model: str, version: str | None = None, taken_at: float | None = None) -> ServerSnapshot:
        reading = self.readings.pop(0)
        return ServerSnapshot(
            reading.server, reading.model, taken_at or 0.0, reading.counters, reading.batches, reading.has_batch_stats
        )

    def close(self) -> None:
        pass


class ScriptedSource(ServerSource):
    def __init__(self, *readings: ServerSnapshot | Exception | None) -> None:
        super().__init__("scripted:t", "t", "cnn")
        self.readings = list(readings)

    def read(self, now: float) -> ServerSnapshot | None:
        reading = self.readings.pop(0)
        if isinstance(reading, Exception):
            raise reading
        return reading


def server_fields(points: list) -> dict:
    [server] = [p for p in points if p.measurement == "server"]
    return dict(server.fields)


def batch_counts(points: list) -> dict[str, int]:
    return {p.tags["batch_size"]: p.fields["count"] for p in points if p.measurement == "batch_sizes"}


# --- Triton --------------------------------------------------------------------------------------


def test_triton_figures_come_from_the_statistics_reading_and_pending_from_the_metrics_page() -> None:
    stats = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    metrics = capture("triton_metrics.txt")
    source = TritonSource(
        "t", "cnn", "http://m/metrics", ScriptedStatistics(zero_like(stats, 0.0), stats), http=PagesHttp(metrics, metrics)
    )
    assert source.scrape(0.0) == []  # the baseline
    points = source.scrape(10.0)
    fields = server_fields(points)
    side = server_side(zero_like(stats, 0.0), stats)  # summary.json's figures of the same two readings
    assert fields["queue_ms"] == side["queue_ms_avg"] == pytest.approx(447418623 / 201 / 1e6)  # not the metrics' 447318 us
    assert fields["compute_ms"] == side["compute_ms_avg"] and fields["request_ms"] == side["request_ms_avg"]
    assert fields["avg_batch_size"] == side["avg_batch_size"] == pytest.approx(201 / 73)
    assert fields["inferences_per_s"] == pytest.approx(20.1) and fields["executions_per_s"] == pytest.approx(7.3)
    assert fields["pending"] == 0 and fields["failures_per_s"] == 0
    assert batch_counts(points) == side["batch_size_histogram"]
    assert points[0].tags == {"target": "t", "server": "triton", "model": "cnn"}


def test_without_a_statistics_address_triton_figures_come_from_the_metrics_page_without_batch_sizes() -> None:
    metrics = capture("triton_metrics.txt")
    zero = "\n".join(line if line.startswith("#") else line.rsplit(" ", 1)[0] + " 0" for line in metrics.splitlines()) + "\n"
    source = TritonSource("t", "cnn", "http://m/metrics", http=PagesHttp(zero, metrics))
    assert source.scrape(0.0) == []
    points = source.scrape(10.0)
    assert server_fields(points)["queue_ms"] == pytest.approx(447318 / 201 / 1000)
    assert batch_counts(points) == {}


def test_a_failed_read_is_raised_and_the_next_reading_is_a_fresh_baseline() -> None:
    stats = parse_triton_statistics(json.loads(capture("triton_stats_cnn_http.json")), "cnn")
    metrics = capture("triton_metrics.txt")
    http = PagesHttp(metrics, ScrapeError("GET http://m/metrics: connection refused"), metrics, metrics)
    source = TritonSource(
        "t", "cnn", "http://m/metrics", ScriptedStatistics(zero_like(stats, 0.0), zero_like(stats, 0.0), stats), http=http
    )
    source.scrape(0.0)
    with pytest.raises(ScrapeError, match="connection refused"):
        source.scrape(1.0)
    assert source.scrape(2.0) == []  # no rates smeared over the gap
    assert server_fields(source.scrape(3.0))["avg_batch_size"] == pytest.approx(201 / 73)


# --- any server source ---------------------------------------------------------------------------


def test_counters_that_went_down_mean_a_restart_and_give_no_points_then_a_new_baseline() -> None:
    later = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn", 10.0)
    restarted = zero_like(later, 11.0)
    source = ScriptedSource(later, restarted, dataclasses.replace(later, taken_at=12.0))
    assert source.scrape(10.0) == [] and source.scrape(11.0) == []
    assert server_fields(source.scrape(12.0))["inferences_per_s"] == pytest.approx(201)


def test_torchserve_points_over_an_interval() -> None:
    later = parse_torchserve_metrics(capture("torchserve_metrics.txt"), "cnn", 10.0)
    source = ScriptedSource(zero_like(later, 0.0), later)
    source.scrape(0.0)
    points = source.scrape(10.0)
    fields = server_fields(points)
    assert fields["inferences_per_s"] == pytest.approx(20.1)
    assert fields["executions_per_s"] == pytest.approx(2.7)
    assert fields["avg_batch_size"] == pytest.approx(201 / 27)
    assert fields["request_ms"] == pytest.approx(7747069.549 / 201 / 1000)
    assert fields["queue_ms"] == pytest.approx(3742469.52 / 201 / 1000)
    assert fields["compute_ms"] == pytest.approx(2455460 / 201 / 1000)
    assert fields["failures_per_s"] == 0
    assert "pending" not in fields  # TorchServe does not export it
    assert batch_counts(points) == {"1": 1, "3": 1, "5": 1, "8": 24}


def test_torchserve_gives_no_points_until_it_shows_the_model() -> None:
    page = capture("torchserve_metrics.txt")
    source = TorchServeSource("t", "resnet", "http://m/metrics", http=PagesHttp(page, page))
    assert source.scrape(0.0) == [] and source.scrape(1.0) == []


def test_batch_size_points_are_tagged_and_timed() -> None:
    points = batch_size_points("t", "cnn", {16: 4, 1: 2}, 5.0)
    assert [(p.tags["batch_size"], p.fields["count"]) for p in points] == [("1", 2), ("16", 4)]
    assert points[0].tags == {"target": "t", "model": "cnn", "batch_size": "1"} and points[0].time_ns == 5_000_000_000


# --- NVML ------------------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_nvml(devices: list[dict] | None, init_error: str | None = None) -> ModuleType:
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

    rows = devices or []
    fake = SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        nvmlInit=init,
        nvmlDeviceGetCount=lambda: len(devices or []),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=field("name"),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=rows[h]["util"]),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=rows[h]["used"], total=rows[h]["total"]),
        nvmlDeviceGetPowerUsage=field("power_mw"),
        nvmlDeviceGetTemperature=field("temp"),
        nvmlDeviceGetClockInfo=field("sm"),
    )
    return cast(ModuleType, fake)  # a stand-in for pynvml: only the calls NvmlSource makes


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
