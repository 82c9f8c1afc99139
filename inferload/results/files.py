"""Reading a results folder: summary.json (through `inferload.results.files`), windows.csv, gpu.csv.

A summary.json that cannot be read raises ``ResultsError`` naming the file and the key that is
wrong; bad rows of a CSV are skipped and described, never raised.
"""

from __future__ import annotations

import csv
import json
import math
import types
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from inferload.errors import InferloadError
from inferload.paths import write_atomically
from inferload.results.schema import Count, Number, RunSummary


# A run's identifier: given with --run-id, else <scenario>-<UTC start time> (results folder,
# summary.json and the InfluxDB points all use the same one).
def default_run_id(scenario_name: str, started_at: float) -> str:
    stamp = datetime.fromtimestamp(started_at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario_name}-{stamp}"


# The one writer and the one reader of summary.json.
#
# `write_summary` turns a `RunSummary` into the file (2-space indented JSON and a newline, keys in
# the model's order); `read_summary` turns a file back into a `RunSummary`, or raises
# `ResultsError` naming the file and the one thing wrong with it, as ``key.path: what was
# expected; what it got``. Written, read and written again, a summary is the same bytes.
#
# Which problem is named when there are several: first the envelope (a JSON object with a
# ``targets`` object), then a value of the wrong type, then a missing key.
SUMMARY_NAME = "summary.json"


class ResultsError(InferloadError):
    """A results file (summary.json) is missing or cannot be read."""


# -- writing ---------------------------------------------------------------------------------
def summary_json(summary: RunSummary) -> str:
    """The file's text: what `write_summary` writes."""
    return json.dumps(summary.model_dump(mode="python"), indent=2) + "\n"


def write_summary(results_dir: Path, summary: RunSummary) -> Path:
    """Write `results_dir`/summary.json whole or not at all (the folder is made if needed); its path."""
    return write_atomically(results_dir / SUMMARY_NAME, summary_json(summary))


# -- reading ---------------------------------------------------------------------------------
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


def read_summary(path: Path) -> RunSummary:
    """Load and check a summary.json (or the one in a results folder)."""
    file = summary_file(Path(path))
    try:
        data: Any = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{file}: cannot be read: {exc}") from exc
    return summary_from_data(data, str(file))


def summary_from_data(data: Any, source: str) -> RunSummary:
    """A loaded summary.json as a `RunSummary`; ResultsError('source: problem') when it is not one."""
    problem = envelope_problem(data)
    if problem is None:
        try:
            return RunSummary.model_validate(data)
        except ValidationError as exc:
            problem = first_problem(exc.errors())
    raise ResultsError(f"{source}: {problem}")


def envelope_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"expected a JSON object with a 'targets' key; got {_got(data)}"
    if not isinstance(data.get("targets"), dict):
        return f"targets: expected an object of target name -> figures; got {_got(data.get('targets'))}"
    return None


def first_problem(errors: list[ErrorDetails]) -> str:
    """The problem to name: a wrong value before a missing key, each in the file's order."""
    error = next((e for e in errors if e["type"] != "missing"), errors[0])
    path = key_path(error["loc"])
    annotation = annotation_at(error["loc"])
    expected = "a whole number" if error["type"] == "count" and isinstance(error["input"], float) else describe(annotation)
    if error["type"] == "missing":
        return f"{path}: missing; expected {expected}"
    return f"{path}: expected {expected}; got {_got(error['input'])}"


def key_path(loc: tuple[int | str, ...]) -> str:
    """('slo', 'checks', 0, 'value') -> 'slo.checks[0].value'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def annotation_at(loc: tuple[int | str, ...]) -> Any:
    """The declared type of the value at `loc` in a `RunSummary` (None when it cannot be told)."""
    current: Any = RunSummary
    for part in loc:
        current = _without_none(current)[0]
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.rebuild_annotation()
        elif get_origin(current) in (dict, list):
            current = get_args(current)[-1]
        else:
            return None
    return current


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None was allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) < len(get_args(annotation)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return annotation, False


def describe(annotation: Any) -> str:
    """What a value of this type looks like in JSON, for messages."""
    inner, nullable = _without_none(annotation)
    return _describe(inner) + (" or null" if nullable else "")


def _describe(annotation: Any) -> str:
    if annotation in (Number, Count, int, float):
        return "a number"
    if annotation is str:
        return "a string"
    if annotation is bool:
        return "true or false"
    if get_origin(annotation) is Annotated:
        return _describe(get_args(annotation)[0])
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            required = [name for name, field in item.model_fields.items() if field.is_required()]
            return f"a list of objects ({', '.join(required)})"
        return f"a list of {_describe(item).removeprefix('a ').removeprefix('an ')}s"
    if get_origin(annotation) is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "an object"
    return "a valid value"


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
