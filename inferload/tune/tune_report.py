"""tune.html and the winners' ready config: a table of every candidate, a Pareto plot (capacity
under the SLO against p99 at that rate, one point per candidate, per server), and for each server
its winner as a config.pbtxt fragment (Triton) or config.properties `models=` entry and
registration call (TorchServe)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from inferload.tune.sweep_report import slo_words

TUNE_HTML = "tune.html"


def config_fragment(
    server: str,
    settings: dict[str, Any],
    model: str,
    management_url: str | None = None,
    response_timeout_s: int | None = None,
    management_key: bool = False,
) -> str:
    """The winner's settings in the server's own configuration syntax. TorchServe: a ``models=`` entry
    (with the model's own ``responseTimeout``, when known) and the registration call on its management
    API at ``management_url`` (with its key, ``management_key``)."""
    if server == "triton":
        lines = []
        if settings.get("dynamic_batching") and settings.get("max_batch_size"):
            lines.append(f"max_batch_size: {settings['max_batch_size']}")
        if settings.get("dynamic_batching"):
            lines.append("dynamic_batching {")
            if settings.get("preferred_batch_size"):
                lines.append(f"  preferred_batch_size: [ {', '.join(str(n) for n in settings['preferred_batch_size'])} ]")
            lines.append(f"  max_queue_delay_microseconds: {settings.get('max_queue_delay_microseconds') or 0}")
            lines.append("}")
        lines.append(f"instance_group [ {{ kind: KIND_CPU, count: {settings.get('instance_count', 1)} }} ]")
        return "\n".join(lines)
    version: dict[str, Any] = {
        "marName": f"{model}.mar",
        "batchSize": settings.get("batch_size", 1),
        "maxBatchDelay": settings.get("max_batch_delay_ms", 0),
        "minWorkers": settings.get("workers", 1),
        "maxWorkers": settings.get("workers", 1),
    }
    query = f"url={model}.mar&batch_size={settings.get('batch_size', 1)}&max_batch_delay={settings.get('max_batch_delay_ms', 0)}"
    query += f"&initial_workers={settings.get('workers', 1)}"
    if response_timeout_s is not None:
        version["responseTimeout"] = response_timeout_s
        query += f"&response_timeout={response_timeout_s}"
    url = (management_url or "http://127.0.0.1:8081").rstrip("/")
    key = " -H 'Authorization: Bearer <management key of key_file.json>'" if management_key else ""
    register = f"curl{key} -X DELETE '{url}/models/{model}' && curl{key} -X POST '{url}/models?{query}&synchronous=true'"
    entry = {model: {"1.0": version}}
    return (
        f"models={json.dumps(entry, separators=(',', ':'))}\n"
        f"# or, on a running server with enable_model_api=true (unregister, then register): {register}"
    )


def _capacity(candidate: dict[str, Any]) -> float | None:
    estimate = candidate.get("capacity_estimate_rps")
    return estimate if estimate is not None else candidate.get("capacity_rps")


def _pareto_png(candidates: list[dict[str, Any]]) -> str | None:
    points = [c for c in candidates if _capacity(c) is not None and c.get("p99_ms") is not None]
    if not points:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.6), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    for server, marker in (("triton", "o"), ("torchserve", "s")):
        mine = [c for c in points if c["server"] == server]
        if mine:
            axes.scatter([_capacity(c) or 0.0 for c in mine], [c["p99_ms"] for c in mine], marker=marker, label=server)
            for c in mine:
                low, high = c.get("capacity_low_rps"), c.get("capacity_high_rps")
                if low is not None:
                    right = high if high is not None else (_capacity(c) or low) * 1.2
                    axes.hlines(c["p99_ms"], low, right, alpha=0.5)
                axes.annotate(
                    c["name"], (_capacity(c) or 0.0, c["p99_ms"]), fontsize=7, xytext=(4, 4), textcoords="offset points"
                )
    axes.set_xlabel("capacity under the SLO (req/s; bars: its 95 % interval)")
    axes.set_ylabel("p99 at that rate (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else html.escape(str(value))


def write_tune_report(out: Path, document: dict[str, Any]) -> Path:
    candidates = document["candidates"]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>inferload tune</title>",
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px}pre{background:#f4f4f4;padding:8px}</style>",
        f"<h1>Tuning under {html.escape(slo_words(document['slo']))}</h1>",
    ]
    png = _pareto_png(candidates)
    if png:
        parts.append(f"<img alt='capacity against p99' src='data:image/png;base64,{png}'>")
    columns = (
        "server",
        "name",
        "capacity_estimate_rps",
        "capacity_low_rps",
        "capacity_high_rps",
        "capacity_rps",
        "first_failing_rps",
        "p50_ms",
        "p99_ms",
        "avg_batch",
        "queue_ms",
        "compute_ms",
        "server_memory_mib",
        "gpu_util_pct",
        "gpu_memory_mib",
        "binding",
        "error",
    )
    parts.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>")
    for candidate in candidates:
        parts.append("<tr>" + "".join(f"<td>{_cell(candidate.get(c))}</td>" for c in columns) + "</tr>")
    parts.append("</table>")
    for server, winner in document["winners"].items():
        capacity = _capacity(winner)
        low, high = winner.get("capacity_low_rps"), winner.get("capacity_high_rps")
        span = "" if low is None else f" [{low:g}, {'∞' if high is None else f'{high:g}'}]"
        head = f"{html.escape(server)}: {html.escape(winner['name'])}, {capacity:g}{span} req/s"
        if winner.get("tied_with"):
            head += f" (tied within noise with {html.escape(', '.join(winner['tied_with']))})"
        parts.append(f"<h2>{head}</h2>")
        parts.append(f"<pre>{html.escape(winner['fragment'])}</pre>")
    path = out / TUNE_HTML
    path.write_text("\n".join(parts))
    return path
