"""The Inference tab, wired into Locust's web UI through its own extension points.

- `extended_tabs` / `extended_tables` in the web UI's template args: Locust's stock page gets an
  "Inference" tab whose table (one row per target) Locust fills from `extended_stats`, which this
  module adds to every `/stats/requests` answer (the page polls it every 2 s).
- `GET /inference/stats`: the whole figure set as JSON (`live.inference_stats`); the tab's charts
  and panels read it, and so can anything else (a test, a script).
- `GET /inference/tab.js`: a small script (no CDN, no build step) that draws the charts as inline
  SVG under the table; `/` gets one `<script>` tag for it. Without the script the table still works.
- `extended_csv_files`: the per-window figures so far as CSV (`/inference/windows.csv`).

Every route sits behind Locust's `--web-login` when that is on, and under `--web-base-path`.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, jsonify, request
from locust.env import Environment

from inferload.observe.sink import SinkSettings
from inferload.scenario.schema import Scenario
from inferload.webui.live import LiveInputs, LocustError, ServerReadings, inference_stats, phase_of, server_views

# `attach_inference_tab`: the one call `inferload.run.plugin` makes (master or local runner with a
# web UI). It gathers the live inputs from the run's parts each time the tab asks.
if TYPE_CHECKING:
    from inferload.measure.run_record import RunRecord
import logging
from collections.abc import Mapping

import gevent
import requests

from inferload.observe.sink import mask_secrets

# The GPUs' utilisation and memory for the Inference tab, when the collector streams them.
#
# The sidecar collector (`python -m collectors`) writes `gpu` points (NVML) to InfluxDB; the
# master has no other way to them, so with `--influx-url` a greenlet reads the newest point of each
# GPU back with InfluxQL (`/query`, which InfluxDB 1.x, 2.x through its v1 API and 3.x serve) every
# few seconds. Without InfluxDB, or with no `gpu` point in the last `RECENT_S`, the tab shows "—"
# and the reason (`why`). `parse_gpu_answer` is the pure part.
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
        except (requests.RequestException, ValueError, RecursionError) as exc:
            why = mask_secrets(f"cannot read GPU figures from {settings.url}: {exc}", settings.secrets())
            self.view = gpu_view(None, why)


def locust_errors(environment: Environment) -> list[LocustError]:
    """Locust's error table (merged over workers on a master) as plain rows."""
    runner = environment.runner
    if runner is None:
        return []
    return [LocustError(str(e.name), str(e.error), int(e.occurrences)) for e in runner.stats.errors.values()]


def attach_inference_tab(
    environment: Environment,
    scenario: Scenario,
    record: RunRecord,
    server_readings: Callable[[], ServerReadings],
    workers: Callable[[], int],
    influx: SinkSettings | None,
) -> InferenceTab | None:
    """The Inference tab on the environment's web UI (None when there is no web UI)."""
    if environment.web_ui is None:
        return None
    gpu = GpuWatch(influx)
    environment.events.test_start.add_listener(lambda **_: gpu.start())
    environment.events.quitting.add_listener(lambda **_: gpu.stop())
    gpu.start()

    def inputs() -> LiveInputs:
        now = time.time()
        phase = phase_of(record, now)
        runner = environment.runner
        return LiveInputs(
            scenario=scenario,
            record=record,
            now=now,
            state=str(runner.state) if runner is not None else "missing",
            workers=workers(),
            servers=server_views(scenario, server_readings(), stopped=phase == "stopped", in_warmup=phase == "warmup"),
            errors=locust_errors(environment),
            gpu=gpu.view,
        )

    tab = InferenceTab(environment, inputs)
    tab.install()
    return tab


TAB_KEY = "inference"
SCRIPT_TAG = '<script src="./inference/tab.js" defer></script>'

#: the stock table's columns: key in a row of `table_rows`, title
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "Target"),
    ("requests", "# requests"),
    ("p50", "p50 (ms, exact)"),
    ("p95", "p95 (ms, exact)"),
    ("p99", "p99 (ms, exact)"),
    ("throughput", "Throughput (req/s)"),
    ("errors", "Errors"),
    ("batch", "Avg batch (server)"),
    ("queue_compute", "Queue / compute (ms, server)"),
    ("residual", "Client − server (ms)"),
    ("open_loop", "Target / achieved (req/s)"),
    ("send_lag", "Send lag p99 (ms) / unsent"),
    ("slo", "SLO"),
)
DASH = "—"


def fmt(value: Any, digits: int = 2) -> str:
    """A figure for a table cell: rounded, or "—" when not known."""
    if value is None:
        return DASH
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table_rows(stats: dict[str, Any]) -> list[dict[str, str]]:
    """One row per target of the stock table, from `/inference/stats`' JSON (strings, "—" for unknown)."""
    checks = stats["slo"]["checks"]
    rows = []
    for target in stats["targets"]:
        latency = target["latency_ms"]
        side = target.get("server_side") or {}
        loop = target.get("open_loop")
        mine = [c["state"] for c in checks if c["target"] == target["name"]]
        errors = ", ".join(f"{e['class']} {e['count']}" for e in target["errors"]) or ("0" if target["failures"] == 0 else DASH)
        rows.append(
            {
                "name": target["name"],
                "requests": fmt(target["requests"]),
                "p50": fmt(latency["p50"]),
                "p95": fmt(latency["p95"]),
                "p99": fmt(latency["p99"]),
                "throughput": fmt(target["throughput_rps"], 1),
                "errors": errors,
                "batch": fmt(side.get("avg_batch_size")),
                "queue_compute": f"{fmt(side.get('queue_ms_avg'), 3)} / {fmt(side.get('compute_ms_avg'), 3)}",
                "residual": fmt(target.get("residual_ms"), 3),
                "open_loop": DASH if loop is None else f"{fmt(loop['configured_rps'], 1)} / {fmt(loop['achieved_rps'], 1)}",
                "send_lag": DASH if loop is None else f"{fmt(loop['send_lag_ms']['p99'])} / {fmt(loop['unsent'])}",
                "slo": "no SLO" if not mine else "fail" if "fail" in mine else "pending" if "pending" in mine else "pass",
            }
        )
    return rows


def windows_csv(stats: dict[str, Any]) -> str:
    """The charts' data as CSV: target, elapsed_s, phase, requests, rps, p99_ms, target_rps, unsent."""
    out = io.StringIO()
    columns = ["target", "elapsed_s", "phase", "requests", "rps", "p99_ms", "target_rps", "unsent"]
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for target in stats["targets"]:
        for point in target["windows"]:
            writer.writerow({"target": target["name"], "elapsed_s": point["t"], **point})
    return out.getvalue()


def script_text() -> str:
    return resources.files("inferload.webui").joinpath("static/inference.js").read_text(encoding="utf-8")


class InferenceTab:
    """The tab on one Locust web UI; `inputs` gathers the run's figures each time they are asked for."""

    def __init__(self, environment: Environment, inputs: Callable[[], LiveInputs]) -> None:
        self.environment = environment
        self.inputs = inputs

    def stats(self) -> dict[str, Any]:
        return inference_stats(self.inputs())

    def install(self) -> None:
        web_ui = self.environment.web_ui
        if web_ui is None or web_ui.app is None:
            return
        base = getattr(self.environment.parsed_options, "web_base_path", None) or None
        blueprint = Blueprint("inferload_inference", __name__, url_prefix=base)
        guard = web_ui.auth_required_if_enabled
        blueprint.add_url_rule("/inference/stats", "stats", guard(lambda: jsonify(self.stats())))
        blueprint.add_url_rule("/inference/tab.js", "script", guard(self._script))
        blueprint.add_url_rule("/inference/windows.csv", "windows_csv", guard(self._windows_csv))
        web_ui.app.register_blueprint(blueprint)
        web_ui.app.after_request(self._after_request)
        web_ui.template_args.update(
            extended_tabs=[{"title": "Inference", "key": TAB_KEY}],
            extended_tables=[{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TABLE_COLUMNS]}],
            extended_csv_files=[{"href": "./inference/windows.csv", "title": "Download inference per-window figures CSV"}],
        )

    def _script(self) -> Response:
        return Response(script_text(), mimetype="application/javascript")

    def _windows_csv(self) -> Response:
        response = Response(windows_csv(self.stats()), mimetype="text/csv")
        response.headers["Content-Disposition"] = "attachment;filename=inference_windows.csv"
        return response

    def _after_request(self, response: Response) -> Response:
        """The table's rows into `/stats/requests`; the chart script into `/`."""
        endpoint = request.endpoint or ""
        if endpoint == "locust.request_stats" and response.status_code == 200 and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": table_rows(self.stats())}]
            response.set_data(json.dumps(data))
        elif endpoint == "locust.index" and response.status_code == 200 and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            if SCRIPT_TAG not in page and "</body>" in page:
                response.set_data(page.replace("</body>", f"{SCRIPT_TAG}\n</body>", 1))
        return response
