"""sweep.html: the sweep's steps as a table and the latency-throughput curve (p50 and p99 against
achieved throughput, the knee marked), next to sweep.json."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from inferload.results.plots import plot_latency_curve

SWEEP_HTML = "sweep.html"
COLUMNS = (
    ("level", "level"),
    ("achieved_rps", "achieved req/s"),
    ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"),
    ("p99_ms", "p99 ms"),
    ("p999_ms", "p99.9 ms"),
    ("error_rate", "error rate"),
    ("avg_batch", "avg batch"),
    ("queue_ms", "queue ms"),
    ("compute_ms", "compute ms"),
    ("client_cpu_per_worker", "client cores"),
    ("stable", "stable"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def write_sweep_report(out: Path, document: dict[str, Any]) -> Path:
    steps = document["steps"]
    knee = document.get("knee")
    plan = document["plan"]
    measured = [s for s in steps if s.get("achieved_rps") is not None]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>inferload sweep</title>",
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
        "tr.knee{background:#fff3c4}</style>",
        f"<h1>Sweep of {html.escape(plan['target'])} ({html.escape(plan['mode'])})</h1>",
        f"<p>scenario {html.escape(plan['scenario'])}</p>",
    ]
    stopped = document.get("stopped")
    if stopped:
        parts.append(f"<p><b>stopped:</b> {html.escape(stopped['rule'])}: {html.escape(stopped['reason'])}</p>")
    capacity = document.get("capacity")
    if capacity and capacity.get("max_rps") is not None:
        parts.append(
            f"<p><b>capacity under the SLO</b> {html.escape(str(capacity['slo']))}: {capacity['max_rps']:g} req/s"
            f" (first failing rate: {_cell(capacity.get('first_failing_rps'))})</p>"
        )
    if measured:
        knee_index = next((i for i, s in enumerate(measured) if knee and s["step"] == knee["step"]), None)
        png = plot_latency_curve(
            [float(s["achieved_rps"]) for s in measured],
            [s.get("p50_ms") for s in measured],
            [s.get("p99_ms") for s in measured],
            knee_index,
        )
        parts.append(f"<img alt='latency against throughput' src='data:image/png;base64,{png}'>")
    parts.append("<table><tr>" + "".join(f"<th>{title}</th>" for _, title in COLUMNS) + "</tr>")
    for step in steps:
        css = " class='knee'" if knee and step["step"] == knee["step"] else ""
        parts.append(f"<tr{css}>" + "".join(f"<td>{_cell(step.get(key))}</td>" for key, _ in COLUMNS) + "</tr>")
    parts.append("</table><p>The knee (highlighted) is the step of highest throughput / p99 (Kleinrock's power).</p>")
    path = out / SWEEP_HTML
    path.write_text("\n".join(parts))
    return path
