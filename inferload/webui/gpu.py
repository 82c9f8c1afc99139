"""The GPUs' utilisation and memory for the Inference tab, when the collector streams them.

The sidecar collector (`python -m collectors`) writes `gpu` points (NVML) to InfluxDB; the
master has no other way to them, so with `--influx-url` a greenlet reads the newest point of each
GPU back with InfluxQL (`/query`, which InfluxDB 1.x, 2.x through its v1 API and 3.x serve) every
few seconds. Without InfluxDB, or with no `gpu` point in the last `RECENT_S`, the tab shows "—"
and the reason (`why`). `parse_gpu_answer` is the pure part.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import gevent
import requests

from inferload.observe.sink import SinkSettings, mask_secrets

logger = logging.getLogger(__name__)

#: a GPU point older than this is not shown (the collector scrapes every few seconds)
RECENT_S = 30
EVERY_S = 5.0
QUERY = (
    "SELECT last(util_pct) AS util_pct, last(mem_used_bytes) AS mem_used_bytes, "
    f"last(mem_total_bytes) AS mem_total_bytes FROM gpu WHERE time > now() - {RECENT_S}s GROUP BY host, gpu, name"
)
NO_INFLUX = "no --influx-url: GPU figures come from the collector through InfluxDB (docs/web-ui.md)"
NO_POINTS = f"no GPU figures in InfluxDB in the last {RECENT_S} s: is the collector running with NVML on a GPU node?"


def parse_gpu_answer(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An InfluxQL JSON answer (one series per host, gpu and name) -> one dict per GPU."""
    devices: list[dict[str, Any]] = []
    for result in answer.get("results", []):
        if "error" in result:
            raise ValueError(str(result["error"]))
        for series in result.get("series", []) or []:
            columns = series.get("columns", [])
            values = (series.get("values") or [[]])[-1]
            row = dict(zip(columns, values, strict=False))
            tags = series.get("tags", {})
            devices.append(
                {
                    "host": tags.get("host", ""),
                    "gpu": tags.get("gpu", ""),
                    "name": tags.get("name", ""),
                    "util_pct": row.get("util_pct"),
                    "mem_used_bytes": row.get("mem_used_bytes"),
                    "mem_total_bytes": row.get("mem_total_bytes"),
                }
            )
    return sorted(devices, key=lambda d: (d["host"], d["gpu"]))


def gpu_view(devices: list[dict[str, Any]] | None, why: str | None) -> dict[str, Any]:
    """The tab's `gpu` object: devices (None: unknown) and why they are missing."""
    if devices is not None and not devices:
        return {"devices": None, "why": NO_POINTS}
    return {"devices": devices, "why": why if devices is None else None}


class GpuWatch:
    """Reads the collector's newest GPU points every `EVERY_S` while the web UI runs."""

    def __init__(self, settings: SinkSettings | None) -> None:
        self.settings = settings
        self.view: dict[str, Any] = gpu_view(None, NO_INFLUX if settings is None else "not read yet")
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self.settings is not None and self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _loop(self) -> None:
        while True:
            self.read_once()
            gevent.sleep(EVERY_S)

    def read_once(self) -> None:
        settings = self.settings
        if settings is None:
            return
        if settings.api != "v1":
            self.view = gpu_view(None, "GPU figures are read with InfluxQL: give --influx-api v1 (InfluxDB 2.x: a DBRP mapping)")
            return
        headers: dict[str, str] = {}
        auth = None
        if settings.token is not None:
            headers["Authorization"] = f"Token {settings.token.get_secret_value()}"
        elif settings.username and settings.password is not None:
            auth = (settings.username, settings.password.get_secret_value())
        try:
            response = requests.get(
                f"{settings.url}/query",
                params={"db": settings.database, "q": QUERY, "epoch": "s"},
                headers=headers,
                auth=auth,
                timeout=settings.timeout_s,
            )
            response.raise_for_status()
            self.view = gpu_view(parse_gpu_answer(response.json()), None)
        except (requests.RequestException, ValueError) as exc:
            why = mask_secrets(f"cannot read GPU figures from {settings.url}: {exc}", settings.secrets())
            self.view = gpu_view(None, why)
