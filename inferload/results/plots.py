"""The report's plots: matplotlib figures rendered to base64 PNG (matplotlib loads on first use)."""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING, Any

from inferload.results.figures import is_number
from inferload.results.files import GpuSeries, TargetSeries
from inferload.results.schema import ServerSide

if TYPE_CHECKING:
    from matplotlib.axes import Axes
from collections.abc import Sequence
from dataclasses import dataclass, field

# Latency against load, drawn by load (never in the order the steps ran): a sweep's or capacity
# search's curve with its SLO as a line, each rate's interval, the fitted curve and the boundary's
# interval as a band; and several servers' curves on one chart (the demo's comparison). Plain data in,
# a base64 PNG out (matplotlib loads on first use).
#: one colour per curve on a shared chart (matplotlib's default cycle, fixed so a server keeps its colour)
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
VERDICT_MARKERS = {"pass": "o", "unsure": "D", "fail": "X"}


@dataclass(frozen=True)
class CurvePoint:
    """One load level: its latency (ms) and, for a capacity search, the p99's interval and verdict."""

    load: float
    p99_ms: float | None
    p50_ms: float | None = None
    p99_low_ms: float | None = None
    p99_high_ms: float | None = None  # None with a low end: open upwards (too few requests to bound it)
    fitted_ms: float | None = None  # the isotonic fit at this load
    verdict: str | None = None  # "pass" | "fail" | "unsure"
    verify: bool = False  # a verification run (not in the fit)


@dataclass(frozen=True)
class Curve:
    label: str
    points: list[CurvePoint] = field(default_factory=list)
    #: the boundary's 95 % interval (load units); high None: open
    band: tuple[float, float | None] | None = None
    estimate: float | None = None


def _sorted(points: Sequence[CurvePoint]) -> list[CurvePoint]:
    return sorted(points, key=lambda p: p.load)


def _log_scale_wanted(values: Sequence[float]) -> bool:
    present = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return bool(present) and max(present) / min(present) > 20


def _slo_lines(axes: Any, slo_ms: dict[str, float]) -> None:
    for index, (key, bound) in enumerate(slo_ms.items()):
        name = key.removesuffix("_ms")
        axes.axhline(bound, color="#b22222", linestyle="--", linewidth=1.2, zorder=1)
        axes.annotate(
            f"SLO: {name} ≤ {bound:g} ms",
            (0.01, bound),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3 + 11 * index),
            textcoords="offset points",
            fontsize=8,
            color="#b22222",
        )


def _band(axes: Any, band: tuple[float, float | None], colour: str, right: float, label: str | None) -> None:
    low, high = band
    axes.axvspan(low, high if high is not None else right, color=colour, alpha=0.15, zorder=0, label=label)


def plot_capacity_curve(curve: Curve, slo_ms: dict[str, float], x_label: str) -> str:
    """One search: each rate's p99 with its interval (marker by verdict), p50, the fitted curve, the
    SLO as a line, the boundary's interval as a band and its estimate as a line."""
    return _png(capacity_figure(curve, slo_ms, x_label))


def capacity_figure(curve: Curve, slo_ms: dict[str, float], x_label: str) -> Any:
    figure = _new_figure(7.5, 3.8)
    axes = figure.add_subplot(1, 1, 1)
    points = _sorted([p for p in curve.points if not p.verify])
    checks = _sorted([p for p in curve.points if p.verify])
    loads = [p.load for p in points]
    every = [*(p.p99_ms or 0 for p in curve.points), *slo_ms.values(), *(p.p50_ms or 0 for p in curve.points)]
    top = max([v for v in every if v and math.isfinite(v)], default=1.0) * 1.6
    if curve.band is not None:
        right = max([p.load for p in curve.points], default=curve.band[0]) * 1.05
        _band(axes, curve.band, "#2ca02c", right, "boundary (95 % interval)")
    if curve.estimate is not None:
        axes.axvline(curve.estimate, color="#2ca02c", linewidth=1.5, label=f"capacity {curve.estimate:.4g}")
    if any(p.p50_ms is not None for p in points):
        axes.plot(loads, [math.nan if p.p50_ms is None else p.p50_ms for p in points], color="#7f7f7f", marker=".", label="p50")
    if any(p.fitted_ms is not None for p in points):
        axes.plot(loads, [math.nan if p.fitted_ms is None else p.fitted_ms for p in points], color="#1f77b4", label="p99, fitted")
    for point in points:
        if point.p99_ms is None:
            continue
        if point.p99_low_ms is not None:
            high = point.p99_high_ms if point.p99_high_ms is not None else top
            axes.vlines(point.load, point.p99_low_ms, high, color="#1f77b4", alpha=0.5, linewidth=2)
        axes.scatter(
            [point.load], [point.p99_ms], marker=VERDICT_MARKERS.get(point.verdict or "", "o"), color="#1f77b4", zorder=3
        )
    for point in checks:
        if point.p99_ms is not None:
            axes.scatter([point.load], [point.p99_ms], marker="*", s=120, color="#9467bd", zorder=4)
    if checks:
        axes.scatter([], [], marker="*", s=120, color="#9467bd", label="verification")
    for verdict, marker in VERDICT_MARKERS.items():
        if any(p.verdict == verdict for p in points):
            axes.scatter([], [], marker=marker, color="#1f77b4", label=f"p99: {verdict}")
    _slo_lines(axes, slo_ms)
    if _log_scale_wanted(every):
        axes.set_yscale("log")
    axes.set_ylim(top=top)
    axes.set_xlabel(x_label)
    axes.set_ylabel("latency (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", fontsize=7, ncols=2)
    return figure


def plot_sweep_curve(points: Sequence[CurvePoint], slo_ms: dict[str, float], knee: float | None, x_label: str) -> str:
    """A sweep: p50 and p99 against load, sorted by load, the SLO as a line, the knee marked."""
    return _png(sweep_figure(points, slo_ms, knee, x_label))


def sweep_figure(points: Sequence[CurvePoint], slo_ms: dict[str, float], knee: float | None, x_label: str) -> Any:
    figure = _new_figure(7.5, 3.6)
    axes = figure.add_subplot(1, 1, 1)
    ordered = _sorted(points)
    loads = [p.load for p in ordered]
    axes.plot(loads, [math.nan if p.p50_ms is None else p.p50_ms for p in ordered], marker="o", label="p50")
    axes.plot(loads, [math.nan if p.p99_ms is None else p.p99_ms for p in ordered], marker="o", label="p99")
    knee_point = next((p for p in ordered if knee is not None and p.load == knee), None)
    if knee_point is not None and knee_point.p99_ms is not None:
        axes.annotate(
            "knee",
            (knee_point.load, knee_point.p99_ms),
            xytext=(10, 15),
            textcoords="offset points",
            arrowprops={"arrowstyle": "->"},
        )
    _slo_lines(axes, slo_ms)
    if _log_scale_wanted([*(p.p99_ms or 0 for p in ordered), *(p.p50_ms or 0 for p in ordered)]):
        axes.set_yscale("log")
    axes.set_xlabel(x_label)
    axes.set_ylabel("latency (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left")
    return figure


def plot_curves_side_by_side(curves: Sequence[Curve], slo_ms: dict[str, float], x_label: str) -> str:
    """Several servers' p99 against load on one chart, each with its boundary's interval as a band in
    its colour, and the SLO as a line: the comparison at a glance."""
    return _png(side_by_side_figure(curves, slo_ms, x_label))


def side_by_side_figure(curves: Sequence[Curve], slo_ms: dict[str, float], x_label: str) -> Any:
    figure = _new_figure(7.5, 4.0)
    axes = figure.add_subplot(1, 1, 1)
    right = max([p.load for c in curves for p in c.points], default=1.0) * 1.05
    values: list[float] = list(slo_ms.values())
    for index, curve in enumerate(curves):
        colour = COLOURS[index % len(COLOURS)]
        points = _sorted([p for p in curve.points if not p.verify and p.p99_ms is not None])
        values += [p.p99_ms for p in points if p.p99_ms is not None]
        shown = [p.fitted_ms if p.fitted_ms is not None else p.p99_ms for p in points]
        axes.plot([p.load for p in points], shown, color=colour, linewidth=1.5)
        axes.scatter([p.load for p in points], [p.p99_ms for p in points], color=colour, s=18, zorder=3)
        capacity = f": {curve.estimate:.4g}" if curve.estimate is not None else ""
        axes.plot([], [], color=colour, marker="o", label=f"{curve.label}{capacity}")
        if curve.band is not None:
            _band(axes, curve.band, colour, right, None)
    _slo_lines(axes, slo_ms)
    if _log_scale_wanted(values):
        axes.set_yscale("log")
    axes.set_xlabel(x_label)
    axes.set_ylabel("p99 (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", fontsize=8, title="capacity (req/s)", title_fontsize=8)
    return figure


@dataclass(frozen=True)
class RampWindowPoint:
    """One window of a ramp-and-hold run: seconds since its first window, the rate offered, its p99."""

    t_s: float
    rate: float
    p99_ms: float | None
    phase: str  # "ramp" | "hold" | "settling"
    breaks: bool


def plot_ramp_hold(points: Sequence[RampWindowPoint], slo_ms: dict[str, float], hold: tuple[float, float] | None) -> str:
    """The ramp-and-hold run over time: the offered rate (top) and each window's p99 (bottom, the SLO a
    line, a window that broke it marked), the hold shaded."""
    return _png(ramp_hold_figure(points, slo_ms, hold))


def ramp_hold_figure(points: Sequence[RampWindowPoint], slo_ms: dict[str, float], hold: tuple[float, float] | None) -> Any:
    figure = _new_figure(7.5, 4.6)
    rate_axes, latency_axes = figure.subplots(2, 1, sharex=True)
    times = [p.t_s for p in points]
    rate_axes.step(times, [p.rate for p in points], where="post", color="#1f77b4")
    rate_axes.set_ylabel("offered (req/s)")
    latency_axes.plot(times, [math.nan if p.p99_ms is None else p.p99_ms for p in points], marker=".", color="#ff7f0e")
    broken = [p for p in points if p.breaks and p.p99_ms is not None]
    if broken:
        latency_axes.scatter([p.t_s for p in broken], [p.p99_ms for p in broken], marker="X", color="#b22222", zorder=3)
    _slo_lines(latency_axes, slo_ms)
    if _log_scale_wanted([*(p.p99_ms or 0 for p in points), *slo_ms.values()]):
        latency_axes.set_yscale("log")
    latency_axes.set_ylabel("p99 per window (ms)")
    latency_axes.set_xlabel("seconds since the first steady window")
    for axes in (rate_axes, latency_axes):
        if hold is not None:
            axes.axvspan(hold[0], hold[1], color="#2ca02c", alpha=0.15)
        axes.grid(True, alpha=0.3)
    return figure


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


def _percentiles(axes: Any, series: TargetSeries, lines: Sequence[tuple[str, str, str, str]], title: str) -> None:
    """Per-window percentile lines (column, label, colour, line style) on `axes`, in ms."""
    for key, label, colour, style in lines:
        axes.plot(
            series.elapsed_s, _nan(getattr(series, key)), marker=".", markersize=3, color=colour, linestyle=style, label=label
        )
    axes.set_ylabel("ms")
    axes.set_title(title, loc="left")
    axes.legend(loc="upper left", fontsize=8)


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
    _percentiles(gaps, series, lines, f"{name}: streamed responses per window (successful requests)")
    rate.plot(x, _nan(series.responses_per_s), color="#2ca02c", label="responses/s")
    rate.set_ylabel("responses/s")
    rate.set_xlabel("seconds since the run started")
    rate.legend(loc="upper left", fontsize=8)
    for axes in (gaps, rate):
        _decorate(axes, span, changes)
    return _png(figure)


def plot_generation(name: str, series: TargetSeries, warmup_s: float | None) -> str | None:
    """A generative target's windows: time to the first token and per output token (p50, p99), output
    tokens and good generations per second, and the server's waiting and running requests with its
    KV cache's use where its page gives them; None for a target that generated nothing."""
    if not series.generated:
        return None
    gauged = any(v is not None for v in series.server_waiting + series.server_running + series.server_kv_cache_used_pct)
    figure = _new_figure(10, 7.5 if gauged else 5)
    panels = figure.subplots(3 if gauged else 2, 1, sharex=True)
    times, tokens = panels[0], panels[1]
    span = warmup_span(series, warmup_s)
    changes = stage_changes(series)
    x = series.elapsed_s
    lines = (
        ("first_response_p50_ms", "TTFT p50", "#1f77b4", "-"),
        ("first_response_p99_ms", "TTFT p99", "#d62728", "-"),
        ("tpot_p50_ms", "TPOT p50", "#1f77b4", ":"),
        ("tpot_p99_ms", "TPOT p99", "#d62728", ":"),
    )
    _percentiles(times, series, lines, f"{name}: generations per window (successful requests)")
    tokens.plot(x, _nan(series.output_tokens_per_s), color="#2ca02c", label="output tokens/s")
    tokens.set_ylabel("tokens/s")
    handles, labels = tokens.get_legend_handles_labels()
    if any(v is not None for v in series.goodput_per_s):
        good = tokens.twinx()
        good.plot(x, _nan(series.goodput_per_s), color="#9467bd", linestyle="--", label="goodput (req/s)")
        good.set_ylabel("good req/s")
        more_handles, more_labels = good.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    tokens.legend(handles, labels, loc="upper left", fontsize=8)
    if gauged:
        server = panels[2]
        server.step(x, _nan(series.server_waiting), where="post", color="#d62728", label="waiting (server)")
        server.step(x, _nan(series.server_running), where="post", color="#1f77b4", label="running (server)")
        server.set_ylabel("requests")
        handles, labels = server.get_legend_handles_labels()
        if any(v is not None for v in series.server_kv_cache_used_pct):
            kv = server.twinx()
            kv.plot(x, _nan(series.server_kv_cache_used_pct), color="#ff7f0e", linestyle=":", label="KV cache used (%)")
            kv.set_ylabel("KV cache (%)")
            kv.set_ylim(0, 105)
            more_handles, more_labels = kv.get_legend_handles_labels()
            handles, labels = handles + more_handles, labels + more_labels
        server.legend(handles, labels, loc="upper left", fontsize=8)
    panels[-1].set_xlabel("seconds since the run started")
    for axes in panels:
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
