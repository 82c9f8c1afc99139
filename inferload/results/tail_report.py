"""report.html's tail anatomy of a traced target: the verdict, a stacked bar per group (median
milliseconds of each part above the p99 and around the p50), the table of medians and shares
(`inferload.results.tail`), and the per-request residual (`inferload.results.residual_report`)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from inferload.measure.trace_join import COMPONENTS
from inferload.results.plots import _new_figure, _png
from inferload.results.residual_report import residual_html

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
