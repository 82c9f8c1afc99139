"""report.html's per-request residual of a traced target (``tail.residual_ms``,
`inferload.results.residual`): its percentiles in a table and its histogram as an inline SVG (no
image, no script, nothing fetched)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

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
