"""sweep.html next to sweep.json: what was found, in words; the curve drawn by load (never in the order
the steps ran) with the SLO as a line; for a capacity search each rate's p99 interval, the fitted
curve, the boundary's interval as a band and the verification runs; and the table of steps."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from inferload.results.plots import (
    Curve,
    CurvePoint,
    RampWindowPoint,
    plot_capacity_curve,
    plot_ramp_hold,
    plot_sweep_curve,
)
from inferload.tune.capacity_steps import answer_lines, level_key, ramp_lines, record_unit

SWEEP_HTML = "sweep.html"
COLUMNS = (
    ("step", "step"),
    ("role", "for"),
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
    ("unsent", "unsent"),
    ("client_cpu_per_worker", "client cores"),
    ("stable", "stable"),
)
#: a capacity search's levels (after the level's own column: the rate, or the users)
LEVEL_COLUMNS = (
    ("runs", "runs"),
    ("requests", "requests"),
    ("interval", "p99 [95 % interval] ms"),
    ("fitted_p99_ms", "fitted p99 ms"),
    ("verdict", "verdict"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def slo_words(slo: dict[str, float]) -> str:
    """`{'p99_ms': 30.0, 'error_rate': 0.01}` as people write it: p99 ≤ 30 ms, errors ≤ 1%."""
    parts = []
    for key, bound in slo.items():
        if key == "error_rate":
            parts.append(f"errors ≤ {bound:.2%}")
        elif key == "min_goodput_pct":
            parts.append(f"goodput ≥ {bound:g} % of requests")
        else:
            parts.append(f"{key.removesuffix('_ms')} ≤ {bound:g} ms")
    return ", ".join(parts) or "no SLO"


def latency_bounds(slo: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in slo.items() if key not in ("error_rate", "min_goodput_pct")}


def capacity_curve(document: dict[str, Any], label: str = "") -> Curve | None:
    """A capacity search's levels (and verification runs) as a curve to draw; None when it has none."""
    capacity = document.get("capacity") or {}
    levels = capacity.get("levels")
    if not levels:
        return None
    unit = record_unit(capacity)
    key = level_key(unit)
    p50_by_step = {s["step"]: s.get("p50_ms") for s in document.get("steps", [])}
    points = []
    for level in levels:
        p50s = [p50_by_step.get(step) for step in level.get("steps", [])]
        present = [v for v in p50s if v is not None]
        points.append(
            CurvePoint(
                load=float(level[key]),
                p99_ms=level.get("p99_ms"),
                p50_ms=sum(present) / len(present) if present else None,
                p99_low_ms=level.get("p99_ms_low"),
                p99_high_ms=level.get("p99_ms_high"),
                fitted_ms=level.get("fitted_p99_ms"),
                verdict=level.get("verdict"),
            )
        )
    for run in (capacity.get("verification") or {}).get("runs") or []:
        points.append(
            CurvePoint(
                float(run[key]),
                run.get("p99_ms"),
                p99_low_ms=run.get("p99_ms_low"),
                p99_high_ms=run.get("p99_ms_high"),
                verdict=run.get("verdict"),
                verify=True,
            )
        )
    low, high = (capacity.get(f"interval_{unit.key}") or [None, None])[:2]
    band = (float(low), high) if low is not None and (low > 0 or high is not None) else None
    return Curve(label, points, band, capacity.get(f"estimate_{unit.key}"))


def _answer_html(capacity: dict[str, Any]) -> list[str]:
    lines = answer_lines(capacity)
    out = [f"<p class='answer'><b>{html.escape(lines[0])}</b></p>", "<ul>"]
    out += [f"<li>{html.escape(line.strip())}</li>" for line in lines[1:]]
    out.append("</ul>")
    return out


def _levels_table(levels: list[dict[str, Any]], users: bool) -> list[str]:
    columns: tuple[tuple[str, str], ...] = ((("users", "users"),) if users else (("rate", "rate (req/s)"),)) + LEVEL_COLUMNS
    if any(level.get("goodput_pct") is not None for level in levels):  # a goodput bound: its share, with its interval
        columns = (*columns[:-1], ("goodput", "goodput % of requests [95 % interval]"), columns[-1])
    key, each = ("users", "user count") if users else ("rate", "rate")
    out = [f"<h2>Each {each}, all its runs pooled</h2><table><tr>" + "".join(f"<th>{t}</th>" for _, t in columns) + "</tr>"]
    for level in sorted(levels, key=lambda item: item[key]):
        row = dict(level, runs=len(level.get("steps", [])))
        high = level.get("p99_ms_high")
        row["interval"] = (
            f"{_cell(level.get('p99_ms'))} [{_cell(level.get('p99_ms_low'))}, {'∞' if high is None else _cell(high)}]"
            if level.get("p99_ms") is not None
            else "-"
        )
        if level.get("goodput_pct") is not None:
            row["goodput"] = (
                f"{_cell(level['goodput_pct'])} [{_cell(level.get('goodput_pct_low'))}, {_cell(level.get('goodput_pct_high'))}]"
            )
        out.append(
            f"<tr class='{html.escape(str(level.get('verdict')))}'>"
            + "".join(f"<td>{_cell(row.get(k))}</td>" for k, _ in columns)
            + "</tr>"
        )
    out.append("</table>")
    return out


def ramp_html(ramp: dict[str, Any], slo: dict[str, float]) -> list[str]:
    """The ramp-and-hold answer in words, and the run over time."""
    lines = ramp_lines(ramp)
    out = [f"<p class='answer'><b>{html.escape(lines[0])}</b></p>", "<ul>"]
    out += [f"<li>{html.escape(line.strip())}</li>" for line in lines[1:]]
    out.append("</ul>")
    windows = ramp.get("windows") or []
    if windows:
        first = float(windows[0]["start"])
        points = [
            RampWindowPoint(float(w["start"]) - first, float(w["rate"]), w.get("p99_ms"), w["phase"], bool(w.get("breaks")))
            for w in windows
        ]
        hold = ramp.get("hold") or {}
        span = (hold["from"] - first, hold["to"] - first) if hold.get("from") is not None and hold.get("to") is not None else None
        png = plot_ramp_hold(points, latency_bounds(slo), span)
        out.append(
            f"<img alt='the offered rate and the p99 of each window over the run, the hold shaded'"
            f" src='data:image/png;base64,{png}'>"
        )
    return out


def write_sweep_report(out: Path, document: dict[str, Any]) -> Path:
    steps = document["steps"]
    knee = document.get("knee")
    plan = document["plan"]
    slo = (plan.get("stop_rules") or {}).get("slo") or {}
    capacity = document.get("capacity")
    if plan["mode"] in ("find-max-rps", "find-max-users", "ramp-hold"):
        how = "ramp and hold, one run" if plan["mode"] == "ramp-hold" else "capacity search"
        title = f"Capacity of {plan['target']} under {slo_words(slo)} ({how})"
    else:
        title = f"Sweep of {plan['target']} ({plan['mode']})"
    parts = [
        "<!doctype html><meta charset='utf-8'><title>inferload sweep</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:70em}td,th{padding:2px 8px;text-align:right}"
        "tr.knee{background:#fff3c4}tr.pass td:last-child{color:#2a7d2a}tr.fail td:last-child{color:#b22222}"
        "p.answer{font-size:120%}</style>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>scenario {html.escape(plan['scenario'])}</p>",
    ]
    if capacity:
        parts += _answer_html(capacity)
    ramp = document.get("ramp_hold")
    if ramp:
        parts += ramp_html(ramp, slo)
    stopped = document.get("stopped")
    if stopped:
        parts.append(f"<p><b>stopped:</b> {html.escape(stopped['rule'])}: {html.escape(stopped['reason'])}</p>")
    curve = capacity_curve(document) if capacity else None
    if curve is not None:
        users = record_unit(capacity or {}).whole
        axis, each = ("users (closed loop)", "user count") if users else ("offered rate (req/s), open loop", "rate")
        png = plot_capacity_curve(curve, latency_bounds(slo), axis)
        against = "the users" if users else "the offered rate"
        parts.append(f"<img alt='p99 against {against}, the SLO and the boundary' src='data:image/png;base64,{png}'>")
        parts.append(
            f"<p>Each {each}'s p99 with its 95 % interval (all its runs pooled; a bar reaching the top is open: too few"
            f" requests to bound it), the p99 fitted nondecreasing in the {each}, the SLO as a dashed line, the boundary's"
            " interval as the green band and the capacity as the green line; stars are the verification runs.</p>"
        )
        parts += _levels_table((capacity or {}).get("levels") or [], users)
    elif not ramp:
        measured = [s for s in steps if s.get("achieved_rps") is not None]
        if measured:
            closed_loop = plan["mode"] == "users"
            points = [CurvePoint(float(s["level"]), s.get("p99_ms"), s.get("p50_ms")) for s in measured]
            png = plot_sweep_curve(
                points,
                latency_bounds(slo),
                float(knee["level"]) if knee else None,
                "users (closed loop)" if closed_loop else "offered rate (req/s), open loop",
            )
            parts.append(f"<img alt='latency against load' src='data:image/png;base64,{png}'>")
    parts.append("<h2>Steps, in the order they ran</h2>")
    parts.append("<table><tr>" + "".join(f"<th>{title}</th>" for _, title in COLUMNS) + "</tr>")
    for step in steps:
        css = " class='knee'" if knee and step["step"] == knee["step"] else ""
        parts.append(f"<tr{css}>" + "".join(f"<td>{_cell(step.get(key))}</td>" for key, _ in COLUMNS) + "</tr>")
    parts.append("</table>")
    if not capacity:
        parts.append("<p>The knee (highlighted) is the step of highest throughput / p99 (Kleinrock's power).</p>")
    path = out / SWEEP_HTML
    path.write_text("\n".join(parts))
    return path
