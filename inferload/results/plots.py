"""The report's plots: matplotlib figures rendered to base64 PNG (matplotlib loads on first use)."""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING, Any

from inferload.results.figures import is_number
from inferload.results.files import GpuSeries, TargetSeries
from inferload.results.model import ServerSide

if TYPE_CHECKING:
    from matplotlib.axes import Axes

WARMUP_COLOUR = "#d9d9d9"
PNG_DPI = 100


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=PNG_DPI, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no global figure registry

    return Figure(figsize=(width, height), layout="constrained")


def warmup_span(series: TargetSeries, warmup_s: float | None) -> tuple[float, float] | None:
    """The warm-up's x range: from the phase column when it says so, else [0, warmup_s]."""
    warm = [x for x, p in zip(series.elapsed_s, series.phase, strict=False) if p == "warmup"]
    steady = [x for x, p in zip(series.elapsed_s, series.phase, strict=False) if p == "steady"]
    if warm:
        end = min(steady) if steady else max(warm) + _window_width(series)
        return min(min(warm), 0.0), end
    if any(series.phase) or not warmup_s:
        return None
    return 0.0, float(warmup_s)


def _window_width(series: TargetSeries) -> float:
    steps = sorted(b - a for a, b in zip(series.elapsed_s, series.elapsed_s[1:], strict=False) if b > a)
    return steps[len(steps) // 2] if steps else 1.0


def stage_changes(series: TargetSeries) -> list[tuple[float, int]]:
    """(elapsed_s, new user count) wherever the users column changes."""
    changes: list[tuple[float, int]] = []
    previous: float | None = None
    for x, users in zip(series.elapsed_s, series.users, strict=False):
        if users is None:
            continue
        if previous is not None and users != previous:
            changes.append((x, int(users)))
        previous = users
    return changes


def _decorate(axes: Axes, span: tuple[float, float] | None, changes: list[tuple[float, int]]) -> None:
    if span is not None:
        axes.axvspan(span[0], span[1], color=WARMUP_COLOUR, alpha=0.6, label="warm-up (excluded)", zorder=0)
    for x, _ in changes:
        axes.axvline(x, color="#7f7f7f", linestyle="--", linewidth=0.8, zorder=1)
    axes.grid(True, alpha=0.3)


def plot_timeline(name: str, series: TargetSeries, warmup_s: float | None) -> str:
    """Latency p50/p95/p99, throughput and users, error rate over time: one PNG (base64)."""
    figure = _new_figure(10, 7.5)
    latency, load, errors = figure.subplots(3, 1, sharex=True)
    span = warmup_span(series, warmup_s)
    changes = stage_changes(series)
    x = series.elapsed_s

    for key, colour in (("p50_ms", "#1f77b4"), ("p95_ms", "#ff7f0e"), ("p99_ms", "#d62728")):
        latency.plot(x, _nan(getattr(series, key)), marker=".", markersize=3, color=colour, label=key[:-3])
    if all(v is None for v in series.p50_ms + series.p95_ms + series.p99_ms):
        latency.text(0.5, 0.5, "no successful requests: no latency", transform=latency.transAxes, ha="center")
        latency.set_yticks([])
    latency.set_ylabel("latency (ms)")
    latency.set_title(f"{name}: latency percentiles, throughput and users, error rate per window", loc="left")

    load.plot(x, _nan(series.rps), color="#2ca02c", label="requests/s (all)")
    if any(v is not None for v in series.target_rps):
        load.plot(x, _nan(series.target_rps), color="#2ca02c", linestyle=":", label="intended arrivals/s (open loop)")
    load.set_ylabel("req/s")
    users = load.twinx()
    users.step(x, _nan(series.users), where="post", color="#9467bd", label="users")
    users.set_ylabel("users")
    known_users = [u for u in series.users if u is not None]
    users.set_ylim(bottom=0, top=max(known_users, default=1) * 1.3)  # room for the legend above the line
    for stage_x, count in changes[:20]:
        users.annotate(str(count), (stage_x, count), xytext=(2, 2), textcoords="offset points", fontsize=8, color="#9467bd")

    rates = [None if not r or f is None else 100.0 * f / r for r, f in zip(series.requests, series.failures, strict=False)]
    errors.plot(x, _nan(rates), color="#d62728", marker=".", markersize=3, label="error rate (%)")
    errors.set_ylabel("errors (%)")
    errors.set_ylim(bottom=0, top=max([1.0] + [r * 1.1 for r in rates if r is not None]))
    errors.set_xlabel("seconds since the run started")

    for axes in (latency, load, errors):
        _decorate(axes, span, changes)
    handles, labels = load.get_legend_handles_labels()
    more_handles, more_labels = users.get_legend_handles_labels()
    load.legend(handles + more_handles, labels + more_labels, loc="upper left", fontsize=8)
    latency.legend(loc="upper left", fontsize=8)
    errors.legend(loc="best", fontsize=8)
    return _png(figure)


def plot_stream(name: str, series: TargetSeries, warmup_s: float | None) -> str | None:
    """A streamed target's windows: time to the first response and between responses (p50, p99),
    and responses per second; None when no window has a stream figure."""
    if not series.streamed:
        return None
    figure = _new_figure(10, 5)
    gaps, rate = figure.subplots(2, 1, sharex=True)
    span = warmup_span(series, warmup_s)
    changes = stage_changes(series)
    x = series.elapsed_s
    lines = (
        ("first_response_p50_ms", "first response p50", "#1f77b4", "-"),
        ("first_response_p99_ms", "first response p99", "#d62728", "-"),
        ("inter_response_p50_ms", "between responses p50", "#1f77b4", ":"),
        ("inter_response_p99_ms", "between responses p99", "#d62728", ":"),
    )
    for key, label, colour, style in lines:
        gaps.plot(x, _nan(getattr(series, key)), marker=".", markersize=3, color=colour, linestyle=style, label=label)
    gaps.set_ylabel("ms")
    gaps.set_title(f"{name}: streamed responses per window (successful requests)", loc="left")
    gaps.legend(loc="upper left", fontsize=8)
    rate.plot(x, _nan(series.responses_per_s), color="#2ca02c", label="responses/s")
    rate.set_ylabel("responses/s")
    rate.set_xlabel("seconds since the run started")
    rate.legend(loc="upper left", fontsize=8)
    for axes in (gaps, rate):
        _decorate(axes, span, changes)
    return _png(figure)


def plot_server_side(name: str, server_side: ServerSide) -> str | None:
    """Batch sizes the server formed (bars) and queue vs compute time (bars); None if neither."""
    histogram = server_side.batch_size_histogram or {}
    times = {
        label: value
        for label, value in (
            ("queue", server_side.queue_ms_avg),
            ("compute", server_side.compute_ms_avg),
            ("request (total)", server_side.request_ms_avg),
        )
        if is_number(value)
    }
    if not histogram and not times:
        return None
    figure = _new_figure(10, 3.2)
    batches, split = figure.subplots(1, 2, width_ratios=(3, 2))
    if histogram:
        if all(str(size).isdigit() for size in histogram):  # a numeric axis: sizes never formed stay visible as gaps
            sizes = sorted(histogram, key=int)
            batches.bar([int(size) for size in sizes], [histogram[size] for size in sizes], color="#1f77b4")
            largest = max(int(size) for size in sizes)
            if largest <= 32:  # beyond that, matplotlib's own ticks read better
                batches.set_xticks(range(1, largest + 1))
        else:
            batches.bar([str(size) for size in histogram], list(histogram.values()), color="#1f77b4")
        batches.set_xlabel("batch size formed by the server")
        batches.set_ylabel("executions")
    else:
        batches.text(0.5, 0.5, "no batch size histogram", transform=batches.transAxes, ha="center")
    batches.set_title(f"{name}: batch sizes", loc="left")
    if times:
        colours = {"queue": "#ff7f0e", "compute": "#2ca02c", "request (total)": "#7f7f7f"}
        split.bar(list(times), list(times.values()), color=[colours[k] for k in times])
        split.set_ylabel("ms per request (server avg)")
    else:
        split.text(0.5, 0.5, "no queue/compute times", transform=split.transAxes, ha="center")
    split.set_title("queue vs compute", loc="left")
    for axes in (batches, split):
        axes.grid(True, axis="y", alpha=0.3)
    return _png(figure)


def plot_gpu(by_gpu: dict[str, GpuSeries], warmup_s: float | None) -> str:
    """GPU utilisation, memory used and power over time, one line per GPU."""
    figure = _new_figure(10, 6)
    panels = figure.subplots(3, 1, sharex=True)
    for axes, key, label in zip(
        panels, ("util_pct", "mem_used_gib", "power_w"), ("util (%)", "memory used (GiB)", "power (W)"), strict=True
    ):
        for gpu, series in sorted(by_gpu.items()):
            axes.plot(series.seconds, _nan(getattr(series, key)), label=f"GPU {gpu}")
        axes.set_ylabel(label)
        if warmup_s:
            axes.axvspan(0.0, float(warmup_s), color=WARMUP_COLOUR, alpha=0.6, zorder=0)
        axes.grid(True, alpha=0.3)
    panels[0].set_title("GPU (from gpu.csv)", loc="left")
    panels[0].legend(loc="upper left", fontsize=8)
    panels[-1].set_xlabel("seconds since the run started")
    return _png(figure)


def plot_latency_curve(rps: list[float], p50_ms: list[float | None], p99_ms: list[float | None], knee: int | None) -> str:
    """p50 and p99 against achieved throughput, one point per sweep step, the knee (an index) marked."""
    figure = _new_figure(7.5, 3.6)
    axes = figure.add_subplot(1, 1, 1)
    axes.plot(rps, _nan(p50_ms), marker="o", label="p50")
    axes.plot(rps, _nan(p99_ms), marker="o", label="p99")
    if knee is not None and p99_ms[knee] is not None:
        axes.annotate(
            "knee", (rps[knee], p99_ms[knee]), xytext=(10, 15), textcoords="offset points", arrowprops={"arrowstyle": "->"}
        )
    axes.set_xlabel("achieved throughput (req/s)")
    axes.set_ylabel("latency (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left")
    return _png(figure)
