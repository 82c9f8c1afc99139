"""Reading a results folder: summary.json (through `inferload.results.files`), windows.csv, gpu.csv.

A summary.json that cannot be read raises ``ResultsError`` naming the file and the key that is
wrong; bad rows of a CSV are skipped and described, never raised. Every results file is read the
same way (`present`, `read_json_file`, `parse_json`, `model_problem`, also for histograms.jsonl and
repeat.json): a file that is there but is no regular file (a FIFO, a folder, a device, a kernel
file) is refused before it is opened, a JSON file is read up to `MAX_JSON_BYTES`, and JSON nested
too deeply, NaN, an infinity or a number of more than `MAX_NUMBER_DIGITS` digits is refused, naming
the key path, before any of it is used.
"""

from __future__ import annotations

import csv
import json
import types
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from inferload.errors import InferloadError
from inferload.paths import write_atomically
from inferload.results.schema import SCHEMA_VERSION, Count, Number, RunSummary, TailView
from inferload.scenario.input_files import not_regular_problem, read_limited
from inferload.scenario.limits import MAX_NUMBER_DIGITS


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
    """A results file (summary.json) is missing or cannot be read, or one cannot be written."""


# -- writing ---------------------------------------------------------------------------------
def summary_json(summary: RunSummary) -> str:
    """The file's text: what `write_summary` writes."""
    return json.dumps(summary.model_dump(mode="python"), indent=2) + "\n"


def write_summary(results_dir: Path, summary: RunSummary) -> Path:
    """Write `results_dir`/summary.json whole or not at all (the folder is made if needed); its path."""
    return write_atomically(results_dir / SUMMARY_NAME, summary_json(summary))


# -- reading ----------------------------------------------------------------------------------
#: the largest summary.json or repeat.json read (a run writes kilobytes; each tail anatomy adds a few)
MAX_JSON_BYTES = 16 * 1024 * 1024
#: what a summary.json is, in messages
SUMMARY_EXPECTED = "a run's summary.json (a JSON object with a 'targets' key)"


def present(path: Path, expected: str) -> bool:
    """Whether the results file `path` is there to be read: False when nothing is; ResultsError
    ('<why it is no regular file>; expected <expected>') when something is that is not a regular
    file (a FIFO, a folder, a device, a kernel file, a broken link), which is never opened."""
    if not (path.exists() or path.is_symlink()):
        return False
    problem = not_regular_problem(path)
    if problem is not None:
        raise ResultsError(f"{problem}; expected {expected}")
    return True


def read_json_file(path: Path, expected: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of the regular file `path` (at most `max_bytes`, UTF-8, checked by `parse_json`);
    ResultsError naming the file, what was wrong and `expected` (what the file should be) otherwise."""
    try:
        raw = read_limited(path, max_bytes)  # a regular file: never a FIFO or /dev/zero
    except ValueError as error:
        raise ResultsError(f"{error}; expected {expected}") from None
    return parse_json(utf8_text(raw, str(path), expected), str(path), expected)


def utf8_text(raw: bytes, source: str, expected: str) -> str:
    """`raw` as UTF-8 text; ResultsError 'source: not UTF-8 text (...)' otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultsError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start:,}); expected {expected}") from None


class _Unreadable:
    """A JSON number no results file holds (NaN, an infinity, more than `MAX_NUMBER_DIGITS` digits),
    kept in the value's place so that `parse_json` can name its key path."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _json_int(text: str) -> int | _Unreadable:
    return int(text) if len(text.lstrip("-")) <= MAX_NUMBER_DIGITS else _Unreadable(text)


def in_range(value: float) -> bool:
    """Whether `value` is finite and of at most `MAX_NUMBER_DIGITS` digits (NaN is not)."""
    return abs(value) < 10.0**MAX_NUMBER_DIGITS


def _json_float(text: str) -> float | _Unreadable:
    value = float(text)  # never raises: the decoder hands over JSON number syntax only
    return value if in_range(value) else _Unreadable(text)


_DECODER = json.JSONDecoder(parse_int=_json_int, parse_float=_json_float, parse_constant=_Unreadable)


def parse_json(text: str, source: str, expected: str, one_line: bool = False) -> Any:
    """`text` as JSON whose every number is finite and of at most `MAX_NUMBER_DIGITS` digits;
    ResultsError 'source: problem' when it is not JSON (where: line and column, or the column alone
    for `one_line` text, a line that `source` names), and 'source: problem; expected <expected>' when it
    is nested too deeply for Python's reader or holds another number (named by its key path)."""
    try:
        data = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        place = f"column {exc.pos + 1}" if one_line else f"line {exc.lineno}, column {exc.colno}"
        raise ResultsError(f"{source}: not valid JSON: {exc.msg} at {place}") from None
    except RecursionError:  # json's own depth limit: not a ValueError
        raise ResultsError(f"{source}: JSON nested too deeply to read; expected {expected}") from None
    found = _first_unreadable(data)
    if found is not None:
        loc, number = found
        shown = number.text if len(number.text) <= 24 else f"a number of {len(number.text):,} characters ({number.text[:12]}...)"
        where = f"{key_path(loc)}: " if loc else ""
        raise ResultsError(f"{source}: {where}expected a finite number of at most {MAX_NUMBER_DIGITS} digits; got {shown}")
    return data


def _first_unreadable(data: Any) -> tuple[tuple[int | str, ...], _Unreadable] | None:
    """The key path and value of the first `_Unreadable` in `data`, in the file's order (None: none)."""
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, _Unreadable):
            return loc, value
        if isinstance(value, dict):
            stack.extend(((*loc, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*loc, index), item) for index, item in reversed(list(enumerate(value))))
    return None


def summary_file(path: Path) -> Path:
    """A results folder or a summary.json path -> the summary.json path (ResultsError if absent)."""
    if path.is_dir():
        candidate = path / SUMMARY_NAME
        if not (candidate.exists() or candidate.is_symlink()):
            raise ResultsError(f"{path}: no {SUMMARY_NAME} in this folder (is it a results folder?)")
        return candidate
    if not (path.exists() or path.is_symlink()):
        raise ResultsError(f"{path}: no such file or folder")
    return path


def read_summary(path: Path) -> RunSummary:
    """Load and check a summary.json (or the one in a results folder): `read_json_file`, then
    `summary_from_data`; ResultsError naming the file and the first problem."""
    file = summary_file(Path(path))
    return summary_from_data(read_json_file(file, SUMMARY_EXPECTED), str(file))


def summary_from_data(data: Any, source: str) -> RunSummary:
    """A loaded summary.json as a `RunSummary`; ResultsError('source: problem') when it is not one
    (the parts of each target's ``tail`` that readers read included: `TailView`)."""
    problem = envelope_problem(data)
    if problem is None:
        try:
            summary = RunSummary.model_validate(data)
        except ValidationError as exc:
            problem = first_problem(exc.errors())
        else:
            problem = next(
                (
                    found
                    for name, target in summary.targets.items()
                    if target.tail is not None
                    and (found := model_problem(TailView, target.tail, ("targets", name, "tail"))) is not None
                ),
                None,
            )
            if problem is None:
                return summary
    raise ResultsError(f"{source}: {problem}")


def started_epoch(summary: RunSummary) -> float | None:
    """The run's start (``started_at``, ISO-8601) in Unix seconds; None when it is not a time."""
    try:
        return datetime.fromisoformat(summary.started_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def envelope_problem(data: Any) -> str | None:
    """What makes ``data`` no summary.json this inferload reads, before its figures are read: not an
    object, a ``schema_version`` newer than `SCHEMA_VERSION`, no ``targets`` object; None: none."""
    if not isinstance(data, dict):
        return f"expected a JSON object with a 'targets' key; got {_got(data)}"
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (
            f"schema_version {version}: written by a newer inferload; this one reads versions 1 to {SCHEMA_VERSION}"
            " (upgrade inferload to read it)"
        )
    if "targets" not in data:
        return "targets: missing; expected an object of target name -> figures"
    if not isinstance(data["targets"], dict):
        return f"targets: expected an object of target name -> figures; got {_got(data['targets'])}"
    return None


def model_problem(model: type[BaseModel], data: Any, prefix: tuple[int | str, ...] = ()) -> str | None:
    """The first problem of `data` as a `model` (`first_problem`, its key path after `prefix`); None: none."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return first_problem(exc.errors(), model, prefix)
    return None


def first_problem(errors: list[ErrorDetails], root: type[BaseModel] = RunSummary, prefix: tuple[int | str, ...] = ()) -> str:
    """The problem to name: a wrong value before a missing key, each in the file's order, as
    ``key.path: expected ...; got ...`` (`root`: the model validated; `prefix`: where it lies in the file)."""
    error = next((e for e in errors if e["type"] != "missing"), errors[0])
    path = key_path((*prefix, *error["loc"]))
    annotation = annotation_at(error["loc"], root)
    expected = "a whole number" if error["type"] == "count" and isinstance(error["input"], float) else describe(annotation)
    where = f"{path}: " if path else ""
    if error["type"] == "missing":
        return f"{where}missing; expected {expected}"
    return f"{where}expected {expected}; got {_got(error['input'])}"


def key_path(loc: tuple[int | str, ...]) -> str:
    """('slo', 'checks', 0, 'value') -> 'slo.checks[0].value'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _got(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def annotation_at(loc: tuple[int | str, ...], root: type[BaseModel] = RunSummary) -> Any:
    """The declared type of the value at `loc` in a `root` (None when it cannot be told)."""
    current: Any = root
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
    "MAX_JSON_BYTES",
    "MAX_NUMBER_DIGITS",
    "SUMMARY_NAME",
    "WINDOWS_NAME",
    "GpuSeries",
    "ResultsError",
    "TargetSeries",
    "Windows",
    "model_problem",
    "parse_json",
    "present",
    "read_gpu",
    "read_json_file",
    "read_summary",
    "read_windows",
    "started_epoch",
    "summary_file",
    "utf8_text",
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
    # generative targets only, and the server's gauges (empty otherwise; absent from older files)
    "tpot_p50_ms",
    "tpot_p99_ms",
    "output_tokens_per_s",
    "goodput_per_s",
    "server_waiting",
    "server_running",
    "server_kv_cache_used_pct",
)
#: the columns that count requests (a rate is divided by them)
WINDOW_COUNT_COLUMNS = ("requests", "failures")
GPU_NUMBER_COLUMNS = ("util_pct", "mem_used_bytes", "power_w")
MAX_ROW_NOTES = 5  # bad rows of a CSV reported one by one, then counted


# -- windows.csv and gpu.csv -----------------------------------------------------------------
def _number(text: str | None) -> float | None:
    """A CSV cell as a float; '' and missing cells are None, and so are NaN, infinities and numbers out
    of range (`in_range`: the figures of the window are not known). ValueError on anything else."""
    if text is None or text.strip() == "":
        return None
    value = float(text)
    return value if in_range(value) else None


def _count(value: float | None) -> bool:
    """Whether a count cell (`_number`) is empty or a whole number >= 0."""
    return value is None or (value >= 0 and value.is_integer())


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
    # generative targets only: time per output token (p50, p99), output tokens and good generations per second
    tpot_p50_ms: list[float | None] = field(default_factory=list)
    tpot_p99_ms: list[float | None] = field(default_factory=list)
    output_tokens_per_s: list[float | None] = field(default_factory=list)
    goodput_per_s: list[float | None] = field(default_factory=list)
    # the server's gauges as each window closed: requests waiting, running, the KV cache's share in use (%)
    server_waiting: list[float | None] = field(default_factory=list)
    server_running: list[float | None] = field(default_factory=list)
    server_kv_cache_used_pct: list[float | None] = field(default_factory=list)

    @property
    def generated(self) -> bool:
        """Whether any window has a generation figure (a generative target)."""
        return any(v is not None for v in self.output_tokens_per_s)

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
    """Parse windows.csv; bad rows are skipped and named in ``notes``, never raised. ResultsError only
    when something is there that is no regular file (`present`: a FIFO, a folder, a device)."""
    if not present(path, "the windows.csv a run writes"):
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
                    problem: str | None = "a non-numeric value"
                else:
                    problem = next((f"{c}: not a whole number >= 0" for c in WINDOW_COUNT_COLUMNS if not _count(values[c])), None)
                if problem is not None:
                    bad_rows += 1
                    if bad_rows <= MAX_ROW_NOTES:
                        notes.append(f"{path.name} line {reader.line_num}: {problem}; row skipped.")
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
    """Epoch seconds or an ISO-8601 time -> epoch seconds (ValueError otherwise, NaN and numbers out of
    range included)."""
    try:
        value = float(text)
    except ValueError:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    if not in_range(value):
        raise ValueError(f"{text!r}: not a time")
    return value


def read_gpu(path: Path, started_at: float | None) -> tuple[dict[str, GpuSeries], list[str]]:
    """gpu.csv (optional) by GPU; times made relative to ``started_at`` (else the first sample). Bad
    rows are skipped and named; ResultsError only when something is there that is no regular file."""
    if not present(path, "a gpu.csv (time, gpu, util_pct, mem_used_bytes, power_w)"):
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
