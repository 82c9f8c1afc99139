"""A description of the machine a benchmark ran on (figures mean little without it)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = ("locust", "gevent", "grpcio", "tritonclient", "geventhttpclient", "hdrhistogram", "numpy")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe() -> dict[str, Any]:
    """CPU model, cores, memory, OS, Python and package versions, load average now."""
    load1, load5, load15 = os.getloadavg()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "packages": {name: _version(name) for name in PACKAGES},
        "load_average_at_start": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }
