"""report.html: one self-contained page (figures, SLO checks, plots over time) from a results folder.

Reads ``summary.json`` and ``windows.csv`` (contract: README, "Results") and an optional
``gpu.csv`` (columns ``time, gpu, util_pct, mem_used_bytes, power_w``), and writes ``report.html``
next to them. Plots are PNGs embedded as ``data:`` URIs, so the file opens offline. Missing or
empty data never raises: the report says what is missing instead. Only a summary.json that cannot
be read raises ``ResultsError``, naming the file and the key that is wrong.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferload.errors import InferloadError

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn (compare never needs it)
    from matplotlib.axes import Axes

REPORT_NAME = "report.html"
SUMMARY_NAME = "summary.json"
WINDOWS_NAME = "windows.csv"
GPU_NAME = "gpu.csv"

LATENCY_KEYS = ("mean", "p50", "p90", "p95", "p99", "p999", "max")
SERVER_SIDE_KEYS = ("queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size")
TARGET_NUMBER_KEYS = ("requests", "failures", "error_rate", "throughput_rps", "cold_start_s")
WINDOW_NUMBER_COLUMNS = ("elapsed_s", "requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "users", "target_rps")
GPU_NUMBER_COLUMNS = ("util_pct", "mem_used_bytes", "power_w")
MAX_ROW_NOTES = 5  # bad rows of a CSV reported one by one, then counted
WARMUP_COLOUR = "#d9d9d9"
PNG_DPI = 100
EXIT_USAGE = 2


class ResultsError(InferloadError):
    """A results file (summary.json) is missing or cannot be read."""


# -- summary.json ---------------------------------------------------------------------------
def summary_file(path: Path) -> Path:
    """A results folder or a summary.json path -> the summary.json path (ResultsError if absent)."""
    if path.is_dir():
        candidate = path / SUMMARY_NAME
        if not candidate.is_file():
            raise ResultsError(f"{path}: no {SUMMARY_NAME} in this folder (is it a results folder?)")
        return candidate
    if not path.exists():
        raise ResultsError(f"{path}: no such file or folder")
    return path


def read_summary(path: Path) -> dict[str, Any]:
    """Load and check a summary.json (or the one in a results folder)."""
    file = summary_file(path)
    try:
        data: Any = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{file}: cannot be read: {exc}") from exc
    problem = summary_problem(data)
    if problem:
        raise ResultsError(f"{file}: {problem}")
    checked: dict[str, Any] = data
    return checked


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def summary_problem(data: Any) -> str | None:
    """The first thing wrong with a loaded summary.json, as 'key.path: expected ...; got ...'."""
    if not isinstance(data, dict):
        return f"expected a JSON object with a 'targets' key; got {_got(data)}"
    targets = data.get("targets")
    if not isinstance(targets, dict):
        return f"targets: expected an object of target name -> figures; got {_got(targets)}"
    for name, figures in targets.items():
        where = f"targets.{name}"
        if not isinstance(figures, dict):
            return f"{where}: expected an object of figures; got {_got(figures)}"
        for key in TARGET_NUMBER_KEYS:
            if figures.get(key) is not None and not _is_number(figures[key]):
                return f"{where}.{key}: expected a number or null; got {_got(figures[key])}"
        for section, keys in (("latency_ms", LATENCY_KEYS), ("server_side", SERVER_SIDE_KEYS)):
            block = figures.get(section)
            if block is None:
                continue
            if not isinstance(block, dict):
                return f"{where}.{section}: expected an object or null; got {_got(block)}"
            for key in keys:
                if block.get(key) is not None and not _is_number(block[key]):
                    return f"{where}.{section}.{key}: expected a number or null; got {_got(block[key])}"
        histogram = (figures.get("server_side") or {}).get("batch_size_histogram")
        if histogram is not None and not (
            isinstance(histogram, dict) and all(_is_number(v) for v in histogram.values())
        ):
            return f"{where}.server_side.batch_size_histogram: expected an object of size -> count; got {_got(histogram)}"
    slo = data.get("slo")
    if slo is not None:
        if not isinstance(slo, dict):
            return f"slo: expected an object with 'passed' and 'checks'; got {_got(slo)}"
        checks = slo.get("checks", [])
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            return f"slo.checks: expected a list of objects (target, metric, limit, value, passed); got {_got(checks)}"
    return None


# -- windows.csv and gpu.csv -----------------------------------------------------------------
def _number(text: str | None) -> float | None:
    """A CSV cell as a float; '' and missing cells are None. ValueError on anything else."""
    if text is None or text.strip() == "":
        return None
    value = float(text)
    return value if math.isfinite(value) else None


@dataclass
class TargetSeries:
    """One target's per-window rows from windows.csv, oldest first."""

    elapsed_s: list[float] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)
    requests: list[float | None] = field(default_factory=list)
    failures: list[float | None] = field(default_factory=list)
    rps: list[float | None] = field(default_factory=list)
    p50_ms: list[float | None] = field(default_factory=list)
    p95_ms: list[float | None] = field(default_factory=list)
    p99_ms: list[float | None] = field(default_factory=list)
    users: list[float | None] = field(default_factory=list)
    target_rps: list[float | None] = field(default_factory=list)  # open loop only: intended arrivals/s


@dataclass
class Windows:
    """windows.csv by target, and what could not be read from it."""

    by_target: dict[str, TargetSeries]
    notes: list[str]


def read_windows(path: Path) -> Windows:
    """Parse windows.csv; bad rows are skipped and named in ``notes``, never raised."""
    if not path.is_file():
        return Windows({}, [f"{path.name} not found: no plots over time."])
    notes: list[str] = []
    by_target: dict[str, TargetSeries] = {}
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None:
                return Windows({}, [f"{path.name} is empty: no plots over time."])
            missing = [c for c in ("target", "elapsed_s") if c not in reader.fieldnames]
            if missing:
                return Windows({}, [f"{path.name}: missing column(s) {', '.join(missing)}: no plots over time."])
            bad_rows = 0
            for row in reader:
                try:
                    values = {c: _number(row.get(c)) for c in WINDOW_NUMBER_COLUMNS}
                except ValueError:
                    bad_rows += 1
                    if bad_rows <= MAX_ROW_NOTES:
                        notes.append(f"{path.name} line {reader.line_num}: a non-numeric value; row skipped.")
                    continue
                if values["elapsed_s"] is None or not row.get("target"):
                    continue
                series = by_target.setdefault(row["target"], TargetSeries())
                series.elapsed_s.append(values["elapsed_s"])
                series.phase.append((row.get("phase") or "").strip())
                for column in WINDOW_NUMBER_COLUMNS[1:]:
                    getattr(series, column).append(values[column])
            if bad_rows > MAX_ROW_NOTES:
                notes.append(f"{path.name}: {bad_rows} rows skipped in all.")
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return Windows({}, [f"{path.name} could not be read ({exc}): no plots over time."])
    if not by_target and not notes:
        notes.append(f"{path.name} has no rows: no plots over time.")
    return Windows(by_target, notes)


@dataclass
class GpuSeries:
    """gpu.csv by GPU: seconds since the run started, and the three figures."""

    seconds: list[float] = field(default_factory=list)
    util_pct: list[float | None] = field(default_factory=list)
    mem_used_gib: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)


def _timestamp(text: str) -> float:
    """Epoch seconds or an ISO-8601 time -> epoch seconds (ValueError otherwise)."""
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()


def read_gpu(path: Path, started_at: float | None) -> tuple[dict[str, GpuSeries], list[str]]:
    """gpu.csv (optional) by GPU; times made relative to ``started_at`` (else the first sample)."""
    if not path.is_file():
        return {}, []
    rows: list[tuple[float, str, dict[str, float | None]]] = []
    notes: list[str] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if "time" not in (reader.fieldnames or []):
                return {}, [f"{path.name}: no 'time' column: GPU plot left out."]
            for row in reader:
                try:
                    when = _timestamp(row.get("time") or "")
                    values = {c: _number(row.get(c)) for c in GPU_NUMBER_COLUMNS}
                except ValueError:
                    if len(notes) < MAX_ROW_NOTES:
                        notes.append(f"{path.name} line {reader.line_num}: a value that is not a number or time; row skipped.")
                    continue
                rows.append((when, (row.get("gpu") or "0").strip(), values))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return {}, [f"{path.name} could not be read ({exc}): GPU plot left out."]
    if not rows:
        return {}, notes + [f"{path.name} has no usable rows: GPU plot left out."]
    origin = started_at if started_at is not None else min(r[0] for r in rows)
    by_gpu: dict[str, GpuSeries] = {}
    for when, gpu, values in sorted(rows, key=lambda r: r[0]):
        series = by_gpu.setdefault(gpu, GpuSeries())
        series.seconds.append(when - origin)
        series.util_pct.append(values["util_pct"])
        mem = values["mem_used_bytes"]
        series.mem_used_gib.append(None if mem is None else mem / 2**30)
        series.power_w.append(values["power_w"])
    return by_gpu, notes


# -- plots ---------------------------------------------------------------------------------
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
    warm = [x for x, p in zip(series.elapsed_s, series.phase) if p == "warmup"]
    steady = [x for x, p in zip(series.elapsed_s, series.phase) if p == "steady"]
    if warm:
        end = min(steady) if steady else max(warm) + _window_width(series)
        return min(min(warm), 0.0), end
    if any(series.phase) or not warmup_s:
        return None
    return 0.0, float(warmup_s)


def _window_width(series: TargetSeries) -> float:
    steps = sorted(b - a for a, b in zip(series.elapsed_s, series.elapsed_s[1:]) if b > a)
    return steps[len(steps) // 2] if steps else 1.0


def stage_changes(series: TargetSeries) -> list[tuple[float, int]]:
    """(elapsed_s, new user count) wherever the users column changes."""
    changes: list[tuple[float, int]] = []
    previous: float | None = None
    for x, users in zip(series.elapsed_s, series.users):
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

    rates = [
        None if not r or f is None else 100.0 * f / r for r, f in zip(series.requests, series.failures)
    ]
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


def plot_server_side(name: str, server_side: dict[str, Any]) -> str | None:
    """Batch sizes the server formed (bars) and queue vs compute time (bars); None if neither."""
    histogram = server_side.get("batch_size_histogram") or {}
    times = {
        label: server_side.get(key)
        for label, key in (("queue", "queue_ms_avg"), ("compute", "compute_ms_avg"), ("request (total)", "request_ms_avg"))
        if _is_number(server_side.get(key))
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
    for axes, key, label in zip(panels, ("util_pct", "mem_used_gib", "power_w"), ("util (%)", "memory used (GiB)", "power (W)")):
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


# -- HTML ----------------------------------------------------------------------------------
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
    if not _is_number(value):
        return "n/a"
    return format(value, spec) + suffix


def _side(figures: dict[str, Any], key: str) -> Any:
    return (figures.get("server_side") or {}).get(key)


def _latency(figures: dict[str, Any], key: str) -> Any:
    return (figures.get("latency_ms") or {}).get(key)


def _cold_start(value: Any) -> str:
    return fmt(value, ".2f", " s")


TARGET_ROWS: tuple[tuple[str, Any], ...] = (
    ("server / protocol", lambda t: f"{t.get('server', '?')} / {t.get('protocol', '?')}"),
    ("model", lambda t: str(t.get("model", "?"))),
    ("requests", lambda t: fmt(t.get("requests"), ".0f")),
    ("failures", lambda t: fmt(t.get("failures"), ".0f")),
    ("error rate", lambda t: fmt(t["error_rate"] * 100, ".2f", " %") if _is_number(t.get("error_rate")) else "n/a"),
    ("throughput (req/s)", lambda t: fmt(t.get("throughput_rps"), ".1f")),
    *((f"{k} (ms)", (lambda key: lambda t: fmt(_latency(t, key)))(k)) for k in LATENCY_KEYS),
    ("avg batch (server)", lambda t: fmt(_side(t, "avg_batch_size"))),
    ("queue (ms, server)", lambda t: fmt(_side(t, "queue_ms_avg"), ".3f")),
    ("compute (ms, server)", lambda t: fmt(_side(t, "compute_ms_avg"), ".3f")),
    ("request (ms, server)", lambda t: fmt(_side(t, "request_ms_avg"), ".3f")),
    ("client − server (ms)", lambda t: fmt(t.get("residual_ms"), ".3f")),
    ("cold start", lambda t: _cold_start(t.get("cold_start_s"))),
)

#: shown only when a target ran open loop
OPEN_LOOP_ROWS: tuple[tuple[str, Any], ...] = (
    ("target rate (req/s)", lambda t: fmt(_open_loop(t, "configured_rps"), ".1f")),
    ("achieved rate (req/s)", lambda t: fmt(_open_loop(t, "achieved_rps"), ".1f")),
    ("unsent arrivals", lambda t: fmt(_open_loop(t, "unsent"), ".0f")),
    ("send lag p99 (ms)", lambda t: fmt(((t.get("open_loop") or {}).get("send_lag_ms") or {}).get("p99"), ".3f")),
)


def _open_loop(target: dict[str, Any], key: str) -> Any:
    return (target.get("open_loop") or {}).get(key)


def header_html(summary: dict[str, Any]) -> str:
    slo = summary.get("slo") or {}
    checks = slo.get("checks") or []
    verdict = (
        "no thresholds set" if not checks
        else '<span class="pass-tag">passed</span>' if slo.get("passed") else '<span class="fail-tag">FAILED</span>'
    )
    rows = [
        ("run id", _esc(summary.get("run_id", "?"))),
        ("scenario", _esc(summary.get("scenario", "?"))),
        ("started", _esc(summary.get("started_at") or "?")),
        ("duration", _esc(fmt(summary.get("duration_s"), ".1f", " s"))),
        ("warm-up (excluded)", _esc(fmt(summary.get("warmup_s"), ".1f", " s"))),
        ("steady state", _esc(fmt(summary.get("steady_s"), ".1f", " s"))),
        ("workers", _esc(summary.get("workers", "?"))),
        ("SLO", verdict),
    ]
    body = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<h1>inferload report: {_esc(summary.get("run_id", "?"))}</h1><table class="header">{body}</table>'


def targets_html(targets: dict[str, dict[str, Any]]) -> str:
    if not targets:
        return "<h2>Targets</h2><p>No targets in summary.json.</p>"
    head = "<tr><th></th>" + "".join(f"<th>{_esc(n)}</th>" for n in targets) + "</tr>"
    shown = TARGET_ROWS + (OPEN_LOOP_ROWS if any(t.get("open_loop") for t in targets.values()) else ())
    rows = "".join(
        f"<tr><th>{_esc(label)}</th>" + "".join(f'<td class="num">{_esc(get(t))}</td>' for t in targets.values()) + "</tr>"
        for label, get in shown
    )
    return (
        "<h2>Targets (steady state)</h2>"
        '<p class="muted">Latency over successful requests; server-side figures from the servers\' own statistics.</p>'
        f'<table class="targets">{head}{rows}</table>'
    )


def slo_html(summary: dict[str, Any]) -> str:
    from inferload.slo import CHECKS  # direction of each check (max/min)

    checks = (summary.get("slo") or {}).get("checks") or []
    if not checks:
        return "<h2>SLO checks</h2><p>No SLO thresholds set for this run.</p>"
    rows = []
    for check in checks:
        metric = str(check.get("metric", "?"))
        bound = {"max": "<=", "min": ">="}.get(CHECKS.get(metric, ("", ""))[1], "")
        limit = check.get("limit")
        passed = bool(check.get("passed"))
        rows.append(
            f'<tr class="{"pass" if passed else "fail"}"><td>{_esc(check.get("target", "?"))}</td><td>{_esc(metric)}</td>'
            f'<td class="num">{_esc(bound)} {_esc(fmt(limit, "g"))}</td><td class="num">{_esc(fmt(check.get("value"), ".4g"))}</td>'
            f'<td>{"<span class=pass-tag>pass</span>" if passed else "<span class=fail-tag>FAIL</span>"}</td></tr>'
        )
    head = "<tr><th>target</th><th>check</th><th>limit</th><th>value</th><th>result</th></tr>"
    return f'<h2>SLO checks</h2><table class="slo">{head}{"".join(rows)}</table>'


def _image(png_b64: str, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{png_b64}">'


def target_section(name: str, figures: dict[str, Any], series: TargetSeries | None, warmup_s: float | None) -> tuple[str, list[str]]:
    """One target's plots, and the notes about what it lacks."""
    notes: list[str] = []
    parts = [f"<h2>{_esc(name)}</h2>"]
    requests = figures.get("requests")
    failures = figures.get("failures") or 0
    if not requests:
        notes.append(f"{name}: no requests in the steady state.")
    elif _is_number(requests) and requests - failures <= 0:
        notes.append(f"{name}: no successful requests in the steady state ({failures:.0f} failed): latency figures are n/a.")
    if series is not None and series.elapsed_s:
        parts.append(_image(plot_timeline(name, series, warmup_s), f"{name}: latency, throughput, users, error rate over time"))
    else:
        parts.append('<p class="muted">No rows for this target in windows.csv: no plots over time.</p>')
    server_side = figures.get("server_side")
    plot = plot_server_side(name, server_side) if isinstance(server_side, dict) else None
    if plot is not None:
        parts.append(_image(plot, f"{name}: batch sizes and queue vs compute"))
    else:
        notes.append(f"{name}: no server-side figures (batch sizes, queue vs compute): the server's statistics were not read.")
        parts.append('<p class="muted">No server-side figures for this target.</p>')
    return "".join(parts), notes


def _started_epoch(summary: dict[str, Any]) -> float | None:
    text = summary.get("started_at")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def render_report(summary: dict[str, Any], windows: Windows, gpu: tuple[dict[str, GpuSeries], list[str]]) -> str:
    """The whole page as a string (pure: no file access)."""
    targets: dict[str, dict[str, Any]] = summary["targets"]
    warmup_s = summary.get("warmup_s") if _is_number(summary.get("warmup_s")) else None
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
        f'<title>inferload report: {_esc(summary.get("run_id", "?"))}</title><style>{STYLE}</style></head><body>'
        + header_html(summary)
        + f'<div class="notes"><ul>{note_list}</ul></div>'
        + targets_html(targets)
        + slo_html(summary)
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
    report.write_text(render_report(summary, windows, gpu), encoding="utf-8")
    return report


def main_report(results_dir: Path) -> int:
    """The CLI command: (re)write a folder's report.html; exit 2 when summary.json cannot be read."""
    try:
        path = write_report(results_dir)
    except ResultsError as exc:
        print(f"inferload report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0
