"""report.html's tail anatomy of a traced target: the verdict, a stacked bar per group (median
milliseconds of each part above the p99 and around the p50), the table of medians and shares
(`inferload.results.tail`), and the per-request residual (``tail.residual_ms``): its percentiles in
a table and its histogram as an inline SVG (no image, no script, nothing fetched)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from inferload.measure.trace_join import COMPONENTS
from inferload.results.plots import _new_figure, _png

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
