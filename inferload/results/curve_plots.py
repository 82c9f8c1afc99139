"""Latency against load, drawn by load (never in the order the steps ran): a sweep's or capacity
search's curve with its SLO as a line, each rate's interval, the fitted curve and the boundary's
interval as a band; and several servers' curves on one chart (the demo's comparison). Plain data in,
a base64 PNG out (matplotlib loads on first use)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferload.results.plots import _new_figure, _png

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
