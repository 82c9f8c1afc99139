"""report.html: one self-contained page (figures, SLO checks, plots over time) from a results folder.

Reads ``summary.json`` and ``windows.csv`` (contract: docs/results.md) and an optional
``gpu.csv`` (columns ``time, gpu, util_pct, mem_used_bytes, power_w``) through
``inferload.results.files``, and writes ``report.html`` next to them. Plots
(``inferload.results.plots``) are PNGs embedded as ``data:`` URIs, so the file opens offline.
Missing or empty data never raises: the report says what is missing instead. Only a summary.json
that cannot be read, or a windows.csv or gpu.csv that is there but is no regular file (a FIFO, a
folder, a device), raises ``ResultsError``, naming the file and what is wrong.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferload.measure.trace_join import COMPONENTS
from inferload.paths import write_atomically
from inferload.results.figures import (
    REPORT,
    REPORT_OPEN_LOOP,
    is_number,
    server_side_notes,
    stream_figures_of,
    turn_notes,
    value_at,
)
from inferload.results.files import (
    GPU_NAME,
    WINDOWS_NAME,
    GpuSeries,
    ResultsError,
    TargetSeries,
    Windows,
    read_gpu,
    read_summary,
    read_windows,
    started_epoch,
)
from inferload.results.plots import (
    Curve,
    CurvePoint,
    _new_figure,
    _png,
    plot_curves_side_by_side,
    plot_generation,
    plot_gpu,
    plot_server_side,
    plot_stream,
    plot_timeline,
)
from inferload.results.schema import RunSummary, TargetSummary
from inferload.results.slo import bound

# report.html's tail anatomy of a traced target: the verdict, a stacked bar per group (median
# milliseconds of each part above the p99 and around the p50), the table of medians and shares
# (`inferload.results.tail`), and the per-request residual (``tail.residual_ms``): its percentiles in
# a table and its histogram as an inline SVG (no image, no script, nothing fetched).
COLOURS = ("#9e9e9e", "#bdbdbd", "#e6550d", "#9ecae1", "#3182bd", "#08519c")


def tail_html(tail: Mapping[str, Any] | None) -> str:
    """The section ('' for a target without ``tail``)."""
    if not tail:
        return ""
    if not tail.get("available"):
        return f'<h3>Tail anatomy</h3><p class="muted">Not available: {html.escape(str(tail.get("reason")))}</p>'
    groups = [("above the p99", tail.get("above_p99") or {}), ("around the p50", tail.get("around_p50") or {})]
    head = "<tr><th>part</th>" + "".join(f"<th>{label}: median ms</th><th>share</th>" for label, _ in groups) + "</tr>"
    rows = []
    for part in COMPONENTS:
        cells = "".join(
            f"<td>{group.get('median_ms', {}).get(part, 0):.2f}</td><td>{group.get('median_share', {}).get(part, 0):.0%}</td>"
            for _, group in groups
        )
        rows.append(f"<tr><td>{part.removesuffix('_ms')}</td>{cells}</tr>")
    batch = "".join(f"<td>{group.get('batch_size_median', '-')}</td><td></td>" for _, group in groups)
    rows.append(f"<tr><td>batch size (median)</td>{batch}</tr>")
    count = "".join(f"<td>{group.get('count', 0)}</td><td></td>" for _, group in groups)
    rows.append(f"<tr><td>requests</td>{count}</tr>")
    line = html.escape(str(tail.get("verdict_line", "")))
    image = f'<img alt="tail anatomy: median ms of each part" src="data:image/png;base64,{plot_tail(groups)}">'
    residual = residual_html(tail.get("residual_ms"))
    return f"<h3>Tail anatomy</h3><p><b>{line}</b></p>{image}<table>{head}{''.join(rows)}</table>{residual}"


def plot_tail(groups: list[tuple[str, Mapping[str, Any]]]) -> str:
    """One horizontal bar per group, its parts' median milliseconds stacked (a PNG, base64)."""
    figure = _new_figure(8, 2.2)
    axes = figure.add_subplot(1, 1, 1)
    labels = [label for label, _ in groups]
    left = [0.0] * len(groups)
    for part, colour in zip(COMPONENTS, COLOURS, strict=True):
        widths = [float(group.get("median_ms", {}).get(part, 0.0)) for _, group in groups]
        axes.barh(labels, widths, left=left, color=colour, label=part.removesuffix("_ms"))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_xlabel("median ms per part")
    axes.invert_yaxis()
    axes.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
    return _png(figure)


WIDTH, HEIGHT, AXIS = 480, 120, 18  # the SVG's size in px, and the room under the bars for labels
FIGURES = ("n", "mean", "p50", "p90", "p99", "max")


def residual_html(residual: Mapping[str, Any] | None) -> str:
    """The block ('' without a residual)."""
    if not residual or not residual.get("n"):
        return ""
    head = "".join(f"<th>{name}</th>" for name in FIGURES)
    cells = "".join(f"<td>{residual.get(name, '-')}</td>" for name in FIGURES)
    text = (
        "Per request: client latency minus Triton's own span of it (REQUEST_START to its response's send), "
        "in ms: the client, the wire both ways and Triton's frontend before the request. "
        "Exact for the joined requests only (one in <i>every_nth</i>)."
    )
    return (
        f'<h4>Per-request residual</h4><p class="muted">{text}</p>'
        f"<table><tr>{head}</tr><tr>{cells}</tr></table>{histogram_svg(residual.get('histogram') or {})}"
    )


def histogram_svg(histogram: Mapping[str, Any]) -> str:
    """Bars of the histogram's counts (and one for the requests above its last edge), as inline SVG."""
    counts = [int(c) for c in histogram.get("counts", [])]
    edges = [float(e) for e in histogram.get("edges_ms", [])]
    if not counts or len(edges) != len(counts) + 1:
        return ""
    above = int(histogram.get("above", 0))
    bars = [*counts, above]
    top = max(bars) or 1
    step = WIDTH / len(bars)
    shapes = []
    for i, count in enumerate(bars):
        height = (HEIGHT - AXIS) * count / top
        label = f"&gt; {edges[-1]:g} ms: {count}" if i == len(counts) else f"{edges[i]:g} to {edges[i + 1]:g} ms: {count}"
        colour = "#e6550d" if i == len(counts) else "#3182bd"
        shapes.append(
            f'<rect x="{i * step + 1:.1f}" y="{HEIGHT - AXIS - height:.1f}" width="{step - 2:.1f}" '
            f'height="{height:.1f}" fill="{colour}"><title>{label}</title></rect>'
        )
        if count:  # the count over its bar: a bar of 1 in 1,000 is too thin to see
            y = max(9.0, HEIGHT - AXIS - height - 2)
            shapes.append(f'<text x="{(i + 0.5) * step:.1f}" y="{y:.1f}" font-size="9" text-anchor="middle">{count}</text>')
    shapes.append(f'<text x="0" y="{HEIGHT - 4}" font-size="11">{edges[0]:g} ms</text>')
    shapes.append(
        f'<text x="{WIDTH - step * 1.5:.1f}" y="{HEIGHT - 4}" font-size="11" text-anchor="end">{edges[-1]:g} ms (p99)</text>'
    )
    shapes.append(f'<text x="{WIDTH - 2}" y="{HEIGHT - 4}" font-size="11" text-anchor="end">above</text>')
    title = html.escape("per-request residual: requests per bin, the last bar above the p99")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{title}">'
        f"{''.join(shapes)}</svg>"
    )


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


#: control characters (a target name's terminal escapes) shown as U+FFFD, never written raw
_CONTROL = {code: "\ufffd" for code in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]}


def _esc(value: Any) -> str:
    return html.escape(str(value).translate(_CONTROL))


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
    shown += stream_figures_of(*targets.values())
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
    first = next(iter(capacity.values()))
    p99_ms, bound = first.p99_ms, first.bound
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
        slo = {} if p99_ms is None else {"p99_ms": float(p99_ms)}
        png = plot_curves_side_by_side(curves, slo, "offered rate (req/s), open loop")
        chart = _image(png, "every server's p99 against the offered rate, the SLO and each capacity's interval")
    under = bound if p99_ms is None else f"p99 ≤ {fmt(p99_ms, 'g')} ms"
    return (
        f"<h2>Capacity under {_esc(under or '-')}, each server as configured</h2>{chart}"
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
        generated = plot_generation(name, series, warmup_s) if figures.generation is not None else None
        stream = plot_stream(name, series, warmup_s) if figures.decoupled is not None and generated is None else None
        if stream is not None:
            parts.append(_image(stream, f"{name}: first response, between responses and responses per second over time"))
        if generated is not None:
            parts.append(
                _image(generated, f"{name}: TTFT and TPOT, tokens and goodput per second, the server's requests over time")
            )
        notes.extend(boundary_notes(name, series, figures))
    else:
        parts.append('<p class="muted">No rows for this target in windows.csv: no plots over time.</p>')
    notes.extend(server_side_notes(name, figures))
    notes.extend(turn_notes(name, figures))
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


#: a KV cache this full (%) is named as near full
KV_NEAR_FULL_PCT = 90.0


def boundary_notes(name: str, series: TargetSeries, figures: Any) -> list[str]:
    """Where the server became the limit, when its own gauges show it (windows.csv's ``server_*``
    columns, summary.json's ``server_side.preemptions``) over the steady windows: requests kept
    waiting (named with the p99 time to first token before and from then on: where it bends), a KV
    cache near full, preemptions; or that no request waited. Nothing when the server gives no gauge."""
    steady = [i for i, phase in enumerate(series.phase) if phase == "steady"]
    notes: list[str] = []

    def median(values: list[float | None]) -> float | None:
        known = sorted(v for v in values if v is not None)
        return known[len(known) // 2] if known else None

    waiting = [i for i in steady if (series.server_waiting[i] or 0) > 0]
    running = max((series.server_running[i] or 0.0 for i in steady), default=0.0)
    if waiting:
        first = waiting[0]
        most = max(series.server_waiting[i] or 0.0 for i in waiting)
        before = median([series.first_response_p99_ms[i] for i in steady if i < first])
        after = median([series.first_response_p99_ms[i] for i in steady if i >= first])
        bend = ""
        if before is not None and after is not None:
            bend = f"; p99 time to first token {before:.1f} ms before, {after:.1f} ms from then on (window medians)"
        elif after is not None:
            bend = f"; p99 time to first token {after:.1f} ms (window median)"
        notes.append(
            f"{name}: the server kept requests waiting from {series.elapsed_s[first]:.0f} s on (up to {most:g} waiting,"
            f" at most {running:g} running){bend}: its slots are the limit at this load"
        )
    full = [i for i in steady if (series.server_kv_cache_used_pct[i] or 0.0) >= KV_NEAR_FULL_PCT]
    if full:
        most_used = max(series.server_kv_cache_used_pct[i] or 0.0 for i in full)
        notes.append(
            f"{name}: the server's KV cache was {most_used:.0f} % used from {series.elapsed_s[full[0]]:.0f} s on: near"
            " full, new requests wait for room or running ones are preempted"
        )
    preempted = value_at(figures, ("server_side", "preemptions"))
    if is_number(preempted) and preempted > 0:
        notes.append(f"{name}: the server preempted {preempted:.0f} requests in the steady state (its KV cache full)")
    gauged = any(series.server_waiting[i] is not None or series.server_running[i] is not None for i in steady)
    if not notes and gauged:
        notes.append(f"{name}: no request waited at the server in the steady state (at most {running:g} running)")
    return notes


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
    """Read a results folder and write its report.html; returns the report's path. ResultsError when
    summary.json cannot be read or report.html cannot be written (a folder in its place, a full disk)."""
    results_dir = Path(results_dir)
    summary = read_summary(results_dir)
    folder = results_dir if results_dir.is_dir() else results_dir.parent
    windows = read_windows(folder / WINDOWS_NAME)
    gpu = read_gpu(folder / GPU_NAME, started_epoch(summary))
    report = folder / REPORT_NAME
    try:
        return write_atomically(report, render_report(summary, windows, gpu))
    except OSError as error:
        raise ResultsError(f"cannot write {report}: {error.strerror or type(error).__name__}") from None


def main_report(results_dir: Path) -> int:
    """The CLI command: (re)write a folder's report.html; exit 2 when summary.json cannot be read or
    report.html cannot be written."""
    try:
        path = write_report(results_dir)
    except ResultsError as exc:
        print(f"inferload report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0
