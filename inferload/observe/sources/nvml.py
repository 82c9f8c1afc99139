"""NVML through pynvml: per GPU utilisation, memory, power, temperature and SM clock.

`gpu_point` is the pure part (readings → a `gpu` point). `NvmlSource` initialises NVML once; on a
machine without an NVIDIA driver or GPU it records why (`unavailable_reason`), says it once in
the log, and its scrapes return nothing, so the collector goes on with the other sources. A
reading a GPU does not support (power on some boards) is left out of that point.
"""

from __future__ import annotations

import logging
import socket
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from inferload.observe.sink import Point, seconds_to_ns

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    temp_c: float | None
    sm_clock_mhz: float | None


def gpu_point(host: str, reading: GpuReading, time_s: float) -> Point:
    fields = {
        "util_pct": reading.util_pct,
        "mem_used_bytes": reading.mem_used_bytes,
        "mem_total_bytes": reading.mem_total_bytes,
        "power_w": reading.power_w,
        "temp_c": reading.temp_c,
        "sm_clock_mhz": reading.sm_clock_mhz,
    }
    return Point("gpu", {"host": host, "gpu": str(reading.index), "name": reading.name}, fields, seconds_to_ns(time_s))


def _load_pynvml() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pynvml 13 is a shim over nvidia-ml-py
        import pynvml
    return pynvml


class NvmlSource:
    """Every GPU NVML sees on this host."""

    def __init__(self, host: str | None = None, nvml: ModuleType | None = None) -> None:
        self.name = "nvml"
        self.host = host or socket.gethostname()
        self.unavailable_reason: str | None = None
        self._nvml = nvml
        self._handles: list[Any] = []
        try:
            self._nvml = nvml or _load_pynvml()
        except ImportError as exc:
            self.unavailable_reason = f"pynvml is not installed ({exc}); pip install pynvml"
        else:
            self._open(self._nvml)
        if self.unavailable_reason:
            logger.warning("GPU metrics off: %s", self.unavailable_reason)

    def _open(self, nvml: ModuleType) -> None:
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as exc:
            self.unavailable_reason = f"NVML is unavailable: {exc} (no NVIDIA driver or GPU on this host)"
        else:
            if not self._handles:
                self.unavailable_reason = "NVML found no GPU on this host"

    def read(self) -> list[GpuReading]:
        if self.unavailable_reason:
            return []
        nvml = self._nvml
        assert nvml is not None
        readings = []
        for index, handle in enumerate(self._handles):
            memory = self._maybe(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._maybe(nvml.nvmlDeviceGetPowerUsage, handle)
            name = self._maybe(nvml.nvmlDeviceGetName, handle)
            utilization = self._maybe(nvml.nvmlDeviceGetUtilizationRates, handle)
            temp_c = self._maybe(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            sm_clock_mhz = self._maybe(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
            readings.append(
                GpuReading(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name or f"gpu{index}"),
                    util_pct=float(utilization.gpu) if utilization is not None else None,
                    mem_used_bytes=int(memory.used) if memory is not None else None,
                    mem_total_bytes=int(memory.total) if memory is not None else None,
                    power_w=power_mw / 1000.0 if power_mw is not None else None,
                    temp_c=float(temp_c) if temp_c is not None else None,
                    sm_clock_mhz=float(sm_clock_mhz) if sm_clock_mhz is not None else None,
                )
            )
        return readings

    def scrape(self, now: float) -> list[Point]:
        return [gpu_point(self.host, reading, now) for reading in self.read()]

    def _maybe(self, query: Callable[..., Any], *args: Any) -> Any:
        """One NVML query, or None when this GPU does not support it."""
        assert self._nvml is not None
        try:
            return query(*args)
        except self._nvml.NVMLError:
            return None
