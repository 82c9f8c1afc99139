"""Reading a results folder: summary.json (through `inferload.results.summary_file`), windows.csv, gpu.csv.

A summary.json that cannot be read raises ``ResultsError`` naming the file and the key that is
wrong; bad rows of a CSV are skipped and described, never raised.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from inferload.results.summary_file import SUMMARY_NAME, ResultsError, read_summary, summary_file

__all__ = [
    "GPU_NAME",
    "SUMMARY_NAME",
    "WINDOWS_NAME",
    "GpuSeries",
    "ResultsError",
    "TargetSeries",
    "Windows",
    "read_gpu",
    "read_summary",
    "read_windows",
    "summary_file",
]

WINDOWS_NAME = "windows.csv"
GPU_NAME = "gpu.csv"

WINDOW_NUMBER_COLUMNS = (
    "elapsed_s",
    "requests",
    "failures",
    "rps",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "users",
    "target_rps",
    # streamed targets only (empty otherwise; absent from files written before they existed)
    "responses_per_s",
    "first_response_p50_ms",
    "first_response_p99_ms",
    "inter_response_p50_ms",
    "inter_response_p99_ms",
)
GPU_NUMBER_COLUMNS = ("util_pct", "mem_used_bytes", "power_w")
MAX_ROW_NOTES = 5  # bad rows of a CSV reported one by one, then counted


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
    # streamed targets only (decoupled models): responses per second, send -> first response, between responses
    responses_per_s: list[float | None] = field(default_factory=list)
    first_response_p50_ms: list[float | None] = field(default_factory=list)
    first_response_p99_ms: list[float | None] = field(default_factory=list)
    inter_response_p50_ms: list[float | None] = field(default_factory=list)
    inter_response_p99_ms: list[float | None] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        """Whether any window has a stream figure."""
        return any(v is not None for v in self.responses_per_s + self.first_response_p99_ms)


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
        return {}, [*notes, f"{path.name} has no usable rows: GPU plot left out."]
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
