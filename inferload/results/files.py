"""Reading a results folder: summary.json (checked against the contract), windows.csv, gpu.csv.

A summary.json that cannot be read raises ``ResultsError`` naming the file and the key that is
wrong; bad rows of a CSV are skipped and described, never raised.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError

SUMMARY_NAME = "summary.json"
WINDOWS_NAME = "windows.csv"
GPU_NAME = "gpu.csv"

LATENCY_KEYS = ("mean", "p50", "p90", "p95", "p99", "p999", "max")
SERVER_SIDE_KEYS = ("queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size")
TARGET_NUMBER_KEYS = ("requests", "failures", "error_rate", "throughput_rps", "cold_start_s")
WINDOW_NUMBER_COLUMNS = ("elapsed_s", "requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "users", "target_rps")
GPU_NUMBER_COLUMNS = ("util_pct", "mem_used_bytes", "power_w")
MAX_ROW_NOTES = 5  # bad rows of a CSV reported one by one, then counted


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
