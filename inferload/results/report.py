"""report.html: one self-contained page (figures, SLO checks, plots over time) from a results folder.

Reads ``summary.json`` and ``windows.csv`` (contract: docs/results.md) and an optional
``gpu.csv`` (columns ``time, gpu, util_pct, mem_used_bytes, power_w``) through
``inferload.results.files``, and writes ``report.html`` next to them. Plots
(``inferload.results.plots``) are PNGs embedded as ``data:`` URIs, so the file opens offline.
Missing or empty data never raises: the report says what is missing instead. Only a summary.json
that cannot be read raises ``ResultsError``, naming the file and the key that is wrong.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from inferload.files import write_atomically
from inferload.results.curve_plots import Curve, CurvePoint, plot_curves_side_by_side
from inferload.results.figures import REPORT, REPORT_OPEN_LOOP, STREAMING, is_number, server_side_notes, streamed, value_at
from inferload.results.files import GPU_NAME, WINDOWS_NAME, GpuSeries, ResultsError, TargetSeries, Windows, read_gpu, read_windows
from inferload.results.model import RunSummary, TargetSummary
from inferload.results.plots import plot_gpu, plot_server_side, plot_stream, plot_timeline
from inferload.results.slo import bound
from inferload.results.summary_file import read_summary
from inferload.results.tail_report import tail_html

REPORT_NAME = "report.html"
EXIT_USAGE = 2
UNIT_IN_CELL = frozenset({"cold_start_s"})  # "8.93 s" reads better than a "(s)" heading here

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px;
       color: #222; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 4px; } h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 4px 10px; } th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.fail td { background: #fdecea; } .fail-tag { color: #b71c1c; font-weight: bold; }
.pass-tag { color: #1b5e20; font-weight: bold; }
.notes { background: #fff8e1; border-left: 4px solid #f9a825; padding: 8px 16px; }
img { max-width: 100%; display: block; margin: 8px 0; } .muted { color: #666; }
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if not is_number(value):
        return "n/a"
    return format(value, spec) + suffix


def _text(target: Any, key: str) -> str:
    value = value_at(target, (key,))
    return "?" if value is None else str(value)


def header_html(summary: RunSummary) -> str:
    checks = summary.slo.checks
    verdict = (
        "no thresholds set"
        if not checks
        else '<span class="pass-tag">passed</span>'
        if summary.slo.passed
        else '<span class="fail-tag">FAILED</span>'
    )
    rows = [
        ("run id", _esc(summary.run_id)),
        ("scenario", _esc(summary.scenario)),
        ("started", _esc(summary.started_at or "?")),
        ("duration", _esc(fmt(summary.duration_s, ".1f", " s"))),
        ("warm-up (excluded)", _esc(fmt(summary.warmup_s, ".1f", " s"))),
        ("steady state", _esc(fmt(summary.steady_s, ".1f", " s"))),
        ("workers", _esc(summary.workers)),
        ("SLO", verdict),
    ]
    if summary.interrupted:
        rows.append(("stopped early", '<span class="fail-tag">interrupted</span> (figures cover the part that ran)'))
    body = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<h1>inferload report: {_esc(summary.run_id)}</h1><table class="header">{body}</table>'


def targets_html(targets: Mapping[str, Any]) -> str:
    """The per-target table; `targets`: name -> `TargetSummary` (or its JSON form)."""
    if not targets:
        return "<h2>Targets</h2><p>No targets in summary.json.</p>"
    head = "<tr><th></th>" + "".join(f"<th>{_esc(n)}</th>" for n in targets) + "</tr>"
    text_rows = [
        ("server / protocol", [f"{_text(t, 'server')} / {_text(t, 'protocol')}" for t in targets.values()]),
        ("model", [_text(t, "model") for t in targets.values()]),
    ]
    if any(value_at(t, ("server_side", "shared_with")) for t in targets.values()):
        text_rows.append(("server figures", [_scope(t) for t in targets.values()]))
    shown = REPORT + (REPORT_OPEN_LOOP if any(value_at(t, ("open_loop",)) for t in targets.values()) else ())
    shown += STREAMING if streamed(*targets.values()) else ()
    figure_rows = [
        (f.heading(f.name in UNIT_IN_CELL), [f.cell(t, f.name in UNIT_IN_CELL) for t in targets.values()]) for f in shown
    ]
    rows = "".join(
        f"<tr><th>{_esc(label)}</th>" + "".join(f'<td class="num">{_esc(cell)}</td>' for cell in cells) + "</tr>"
        for label, cells in text_rows + figure_rows
    )
    return (
        "<h2>Targets (steady state)</h2>"
        '<p class="muted">Latency over successful requests; server-side figures from the servers\' own statistics.</p>'
        f'<table class="targets">{head}{rows}</table>'
    )


def _scope(target: Any) -> str:
    """Whose server figures these are: the model's, shared with the named targets, or this target's."""
    shared = value_at(target, ("server_side", "shared_with"))
    if shared:
        return "model-wide, shared with " + ", ".join([*shared])
    return "n/a" if value_at(target, ("server_side",)) is None else "this target only"


def slo_html(summary: RunSummary) -> str:
    checks = summary.slo.checks
    if not checks:
        return "<h2>SLO checks</h2><p>No SLO thresholds set for this run.</p>"
    rows = []
    for check in checks:
        rows.append(
            f'<tr class="{"pass" if check.passed else "fail"}"><td>{_esc(check.target)}</td><td>{_esc(check.metric)}</td>'
            f'<td class="num">{_esc(bound(check.metric))} {_esc(fmt(check.limit, "g"))}</td>'
            f'<td class="num">{_esc(fmt(check.value, ".4g"))}</td>'
            f"<td>{'<span class=pass-tag>pass</span>' if check.passed else '<span class=fail-tag>FAIL</span>'}</td>"
            f'<td class="muted">{_esc(check.note or "")}</td></tr>'
        )
    head = "<tr><th>target</th><th>check</th><th>limit</th><th>value</th><th>result</th><th>note</th></tr>"
    return f'<h2>SLO checks</h2><table class="slo">{head}{"".join(rows)}</table>'


def _image(png_b64: str, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{png_b64}">'


def capacity_html(summary: RunSummary) -> str:
    """The demo's capacity pass: every server's p99 against the offered rate on one chart (the SLO a
    line, each boundary's interval a band in its server's colour), and each answer in a table."""
    capacity = summary.capacity
    if not capacity:
        return ""
    p99_ms = next(iter(capacity.values())).p99_ms
    curves = []
    for server, answer in capacity.items():
        points = [
            CurvePoint(p.rate, p.p99_ms, None, p.p99_low_ms, p.p99_high_ms, p.fitted_p99_ms, p.verdict)
            for p in answer.curve or []
        ]
        interval = answer.interval_rps or [None, None]
        band = (float(interval[0]), interval[1]) if interval[0] is not None and (interval[0] or interval[1]) else None
        curves.append(Curve(server, points, band, answer.estimate_rps))
    rows = []
    for server, answer in capacity.items():
        interval = answer.interval_rps or [None, None]
        span = "-" if interval[0] is None else f"[{interval[0]:g}, {'∞' if interval[1] is None else f'{interval[1]:g}'}]"
        rows.append(
            f"<tr><td>{_esc(server)}</td><td class='num'>{_esc(fmt(answer.estimate_rps, '.4g'))}</td>"
            f"<td class='num'>{_esc(span)}</td><td class='num'>{_esc(fmt(answer.max_rps, 'g'))}</td>"
            f"<td>{_esc(answer.binding or '-')}</td><td>{_esc(answer.config)}</td></tr>"
        )
    head = (
        "<tr><th>server</th><th>capacity (req/s)</th><th>95 % interval</th><th>highest rate passed</th>"
        "<th>binding constraint</th><th>settings</th></tr>"
    )
    chart = ""
    if any(curve.points for curve in curves):
        png = plot_curves_side_by_side(curves, {"p99_ms": float(p99_ms)}, "offered rate (req/s), open loop")
        chart = _image(png, "every server's p99 against the offered rate, the SLO and each capacity's interval")
    return (
        f"<h2>Capacity under p99 ≤ {_esc(fmt(p99_ms, 'g'))} ms, each server as configured</h2>{chart}"
        f"<table>{head}{''.join(rows)}</table>"
        "<p class='muted'>Open loop, one capacity search per server (capacity/&lt;server&gt;/sweep.html has each"
        " search's own curve, levels and steps). The band is the capacity's 95 % interval.</p>"
    )


def target_section(
    name: str, figures: TargetSummary, series: TargetSeries | None, warmup_s: float | None
) -> tuple[str, list[str]]:
    """One target's plots, and the notes about what it lacks."""
    notes: list[str] = []
    parts = [f"<h2>{_esc(name)}</h2>"]
    requests = figures.requests
    failures = figures.failures or 0
    if not requests:
        notes.append(f"{name}: no requests in the steady state.")
    elif requests - failures <= 0:
        notes.append(f"{name}: no successful requests in the steady state ({failures:.0f} failed): latency figures are n/a.")
    if series is not None and series.elapsed_s:
        parts.append(_image(plot_timeline(name, series, warmup_s), f"{name}: latency, throughput, users, error rate over time"))
        stream = plot_stream(name, series, warmup_s) if figures.streaming is not None else None
        if stream is not None:
            parts.append(_image(stream, f"{name}: first response, between responses and responses per second over time"))
    else:
        parts.append('<p class="muted">No rows for this target in windows.csv: no plots over time.</p>')
    notes.extend(server_side_notes(name, figures))
    plot = plot_server_side(name, figures.server_side) if figures.server_side is not None else None
    if plot is not None:
        parts.append(_image(plot, f"{name}: batch sizes and queue vs compute"))
    else:
        notes.append(f"{name}: no server-side figures (batch sizes, queue vs compute): the server's statistics were not read.")
        parts.append('<p class="muted">No server-side figures for this target.</p>')
    if figures.bursts:
        parts.append(bursts_html(figures))
    parts.append(tail_html(figures.tail))
    return "".join(parts), notes


def bursts_html(figures: TargetSummary) -> str:
    """Per burst: the p99 before it, its peak, the time back to within 20 % of it (client and server)."""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "burst (s)",
            "p99 before (ms)",
            "peak p99 (ms)",
            "p99 back after (s)",
            "server back after (s)",
            "failed",
            "unsent",
        )
    )
    rows = [
        "<tr>"
        + "".join(
            f"<td>{cell}</td>"
            for cell in (
                f"{b.start_s:g}–{b.end_s:g}",
                fmt(b.pre_burst_p99_ms),
                fmt(b.peak_p99_ms),
                "not back" if b.recovery_s is None else fmt(b.recovery_s, ".1f"),
                "-" if b.server_recovery_s is None else fmt(b.server_recovery_s, ".1f"),
                b.failures,
                b.unsent,
            )
        )
        + "</tr>"
        for b in figures.bursts or []
    ]
    return f"<h3>Bursts: peak and recovery</h3><table><tr>{head}</tr>{''.join(rows)}</table>"


def _started_epoch(summary: RunSummary) -> float | None:
    text = summary.started_at
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def render_report(summary: RunSummary, windows: Windows, gpu: tuple[dict[str, GpuSeries], list[str]]) -> str:
    """The whole page as a string (pure: no file access)."""
    targets = summary.targets
    warmup_s = summary.warmup_s
    notes: list[str] = []
    if warmup_s:
        notes.append(
            f"Warm-up: the first {warmup_s:g} s are excluded from every figure in the tables "
            "(shaded grey in the plots; dashed lines mark changes in the number of users)."
        )
    else:
        notes.append("No warm-up: every request counts in the figures.")
    notes.extend(windows.notes)
    sections: list[str] = []
    for name, figures in targets.items():
        section, target_notes = target_section(name, figures, windows.by_target.get(name), warmup_s)
        sections.append(section)
        notes.extend(target_notes)
    extra = sorted(set(windows.by_target) - set(targets))
    if extra:
        notes.append(f"windows.csv has rows for targets not in summary.json, not plotted: {', '.join(extra)}.")
    by_gpu, gpu_notes = gpu
    notes.extend(gpu_notes)
    if by_gpu:
        sections.append("<h2>GPU</h2>" + _image(plot_gpu(by_gpu, warmup_s), "GPU utilisation, memory and power over time"))
    note_list = "".join(f"<li>{_esc(n)}</li>" for n in notes)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>inferload report: {_esc(summary.run_id)}</title><style>{STYLE}</style></head><body>"
        + header_html(summary)
        + f'<div class="notes"><ul>{note_list}</ul></div>'
        + targets_html(targets)
        + slo_html(summary)
        + capacity_html(summary)
        + "".join(sections)
        + "</body></html>\n"
    )


def write_report(results_dir: Path) -> Path:
    """Read a results folder and write its report.html; returns the report's path."""
    results_dir = Path(results_dir)
    summary = read_summary(results_dir)
    folder = results_dir if results_dir.is_dir() else results_dir.parent
    windows = read_windows(folder / WINDOWS_NAME)
    gpu = read_gpu(folder / GPU_NAME, _started_epoch(summary))
    report = folder / REPORT_NAME
    return write_atomically(report, render_report(summary, windows, gpu))


def main_report(results_dir: Path) -> int:
    """The CLI command: (re)write a folder's report.html; exit 2 when summary.json cannot be read."""
    try:
        path = write_report(results_dir)
    except ResultsError as exc:
        print(f"inferload report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0
