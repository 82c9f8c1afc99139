"""Production arrivals recorded from what servers already write, as a replay file (`inferload trace-to-replay`).

Two sources:

- **Triton's trace files** (``--trace-config triton,file=PATH``, the files the tail anatomy reads:
  ``PATH`` and ``PATH.<k>``): one arrival per traced request, at its frontend's receive time
  (``HTTP_RECV_START``, or ``GRPC_WAITREAD_END`` over gRPC), for its model. Traces without one (an
  ensemble's steps, requests of the in-process API) are left out and counted. Only the traced
  requests are there: trace every request (``trace_rate`` 1) to record the whole traffic.
- **JSON-lines access logs** (one JSON object per request, as Envoy's ``json_format`` access log
  or nginx's ``log_format ... escape=json`` write): the time at ``--time-field`` (default
  ``timestamp``; dots reach nested keys), epoch seconds (``--time-unit`` for ms, us, ns) or
  ISO-8601 text (Envoy's ``%START_TIME%``, nginx's ``$time_iso8601``, ``$msec``), and optionally the
  target at ``--target-field`` (a model name, a route).

The arrivals are sorted, made relative to the first (time 0) and written as CSV ``t_s[,target]``
(`inferload.scenario.replay_file`), with a summary: the rate over time (per window) and the
burstiness (the CV of the gaps between arrivals). ``--target SOURCE=TARGET`` maps a model (or the
target field's value) to a scenario target; with a mapping, arrivals of unmapped ones are left out
and counted. Without one the names are written as they are, and a recording of a single one has
no target column (the replay's rows then go to the scenario's targets by weight). Sorting needs the times in memory: 8 bytes and a 2-byte target code per arrival.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from inferload.errors import InferloadError
from inferload.measure.run_record import GapStats
from inferload.observe.sources.triton_trace_file import trace_file_names
from inferload.scenario.messages import parse_duration
from inferload.servermetrics.triton_trace import json_entries, parse_traces

# `inferload trace-to-replay`'s command line: Triton trace files or JSON-lines access logs → a replay file.
EXIT_USAGE = 2


def add_trace_to_replay_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    parser = sub.add_parser("trace-to-replay", help=help_text)
    parser.add_argument(
        "sources",
        type=Path,
        nargs="+",
        metavar="SOURCE",
        help="Triton's trace file PATH (its PATH.<k> files are read too), or JSON-lines access log files",
    )
    parser.add_argument("--out", type=Path, required=True, help="the replay file to write (.csv); its summary goes next to it")
    parser.add_argument(
        "--format",
        choices=["auto", "triton-trace", "jsonl"],
        default="auto",
        help="what the sources are (default auto: a JSON array is a Triton trace file, anything else JSON lines)",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="SOURCE=TARGET",
        help="map a model (or the --target-field value) to a scenario target; with any mapping, unmapped ones are"
        " left out (counted). Default: the model names as they are (no target column for a single model)",
    )
    parser.add_argument("--time-field", default="timestamp", help="JSON lines: the time's key, dots for nested keys (timestamp)")
    parser.add_argument("--time-unit", choices=["s", "ms", "us", "ns"], default="s", help="JSON lines: unit of numeric times (s)")
    parser.add_argument("--target-field", help="JSON lines: the key whose value names the request's target (none)")
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="JSON lines: leave out (and count) lines that cannot be read"
    )
    parser.add_argument("--window", default="1s", help="the summary's rate-over-time window (default 1s)")


def cmd_trace_to_replay(args: argparse.Namespace) -> int:
    from inferload.observe.recording import LogFields, describe, guess_format, iter_target_map, record_arrivals

    try:
        if args.out.suffix.lower() != ".csv":
            raise InferloadError(f"--out: expected a .csv file name; got {str(args.out)!r}")
        try:
            window_s = parse_duration(args.window)
        except ValueError as error:
            raise InferloadError(f"--window: {error}") from None
        if window_s <= 0:
            raise InferloadError(f"--window: expected a duration above 0; got {args.window!r}")
        targets = dict(iter_target_map(args.target))
        source_format = guess_format(args.sources[0]) if args.format == "auto" else args.format
        fields = LogFields(args.time_field, args.time_unit, args.target_field, args.skip_bad_lines)
        if source_format == "triton-trace" and (args.target_field or args.time_field != "timestamp"):
            raise InferloadError("--time-field and --target-field apply to JSON-lines logs, not Triton trace files")
        summary = record_arrivals(args.sources, args.out, source_format, targets, fields, window_s)
    except InferloadError as error:
        print(f"inferload trace-to-replay: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"inferload trace-to-replay: {error}", file=sys.stderr)
        return EXIT_USAGE
    for line in describe(summary, args.out):
        print(line)
    return 0


SourceFormat = Literal["triton-trace", "jsonl"]
#: a traced request's arrival at Triton: its HTTP frontend's receive, or its gRPC read of the request
ARRIVAL_STAMPS = ("HTTP_RECV_START", "GRPC_WAITREAD_END")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
#: characters of the rate-over-time line, from no arrival to the busiest window
LEVELS = " .:-=+*#%@"
MAX_SPARK = 120
#: the summary's name for arrivals without a target
NO_TARGET = "(none)"
#: distinct targets of one recording (the codes kept per arrival are 2 bytes)
MAX_TARGETS = 65_535


@dataclass
class Recording:
    """Arrivals as read: absolute times (seconds on the source's clock) and target codes."""

    times: array[float] = field(default_factory=lambda: array("d"))
    codes: array[int] = field(default_factory=lambda: array("H"))
    names: list[str | None] = field(default_factory=lambda: [None])  # code 0: no target
    code_of: dict[str, int] = field(default_factory=dict)
    #: what was left out, by reason
    left_out: dict[str, int] = field(default_factory=dict)
    files: int = 0

    def add(self, t: float, target: str | None) -> None:
        code = 0
        if target is not None:
            code = self.code_of.get(target, -1)
            if code < 0:
                if len(self.names) > MAX_TARGETS:
                    raise InferloadError(f"more than {MAX_TARGETS:,} different targets in one recording")
                code = len(self.names)
                self.names.append(target)
                self.code_of[target] = code
        self.times.append(t)
        self.codes.append(code)

    def leave_out(self, reason: str) -> None:
        self.left_out[reason] = self.left_out.get(reason, 0) + 1


def mapped(value: str | None, targets: Mapping[str, str], recording: Recording, what: str) -> tuple[bool, str | None]:
    """(kept, target) for a source's model or target value under the ``--target`` mapping."""
    if not targets:
        return True, value
    if value is not None and value in targets:
        return True, targets[value]
    recording.leave_out(f"{what} {value!r} not mapped by --target")
    return False, None


def read_triton_traces(paths: Sequence[Path], targets: Mapping[str, str], recording: Recording) -> None:
    """Every traced request's arrival in Triton's trace files at ``paths`` (each with its ``.<k>`` files)."""
    files: list[Path] = []
    for path in paths:
        found = trace_file_names(path)
        if not found:
            raise InferloadError(f"{path}: no Triton trace file there (nor {path.name}.<k> files)")
        files.extend(name for name in found if name not in files)
    for file in files:
        try:
            text = file.read_text(errors="replace")
        except OSError as error:
            raise InferloadError(f"{file}: cannot read it: {error.strerror}") from None
        if not text.lstrip().startswith("["):
            raise InferloadError(f"{file}: not a Triton trace file (a JSON array of trace entries); is it a JSON-lines log?")
        recording.files += 1
        for trace in parse_traces(json_entries(text)):
            ns = trace.first(ARRIVAL_STAMPS)
            if ns is None:
                recording.leave_out("traces without a frontend receive time (ensemble steps, in-process requests)")
                continue
            kept, target = mapped(trace.model, targets, recording, "model")
            if kept:
                recording.add(ns / 1e9, target)


def field_at(entry: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted key path (``request.time``), None when absent."""
    value: Any = entry
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def epoch_seconds(value: Any, unit: float) -> float | None:
    """Epoch seconds of a log's time: a number (times ``unit``), numeric text, or ISO-8601 text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) * unit if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return number * unit if math.isfinite(number) else None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


@dataclass(frozen=True)
class LogFields:
    time_field: str = "timestamp"
    time_unit: str = "s"
    target_field: str | None = None
    skip_bad_lines: bool = False


def read_access_logs(paths: Sequence[Path], fields: LogFields, targets: Mapping[str, str], recording: Recording) -> None:
    """Every request line's arrival in JSON-lines access logs (InferloadError at a bad line, unless skipped)."""
    unit = TIME_UNITS[fields.time_unit]
    for path in paths:
        try:
            handle = path.open(encoding="utf-8", errors="replace")
        except OSError as error:
            raise InferloadError(f"{path}: cannot read it: {error.strerror}") from None
        recording.files += 1
        with handle:
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                problem, t, value = _log_line(text, fields, unit)
                if problem is not None:
                    if not fields.skip_bad_lines:
                        raise InferloadError(f"{path} line {line}: {problem} (--skip-bad-lines leaves such lines out)")
                    recording.leave_out(f"lines {problem.split(':')[0]}")
                    continue
                assert t is not None
                kept, target = mapped(value, targets, recording, fields.target_field or "target")
                if kept:
                    recording.add(t, target)


def _log_line(text: str, fields: LogFields, unit: float) -> tuple[str | None, float | None, str | None]:
    try:
        entry = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg} at column {error.colno}", None, None
    if not isinstance(entry, dict):
        return "not a JSON object", None, None
    raw = field_at(entry, fields.time_field)
    if raw is None:
        return f"without the time field: {fields.time_field!r}", None, None
    t = epoch_seconds(raw, unit)
    if t is None:
        return f"with a time that is not epoch seconds or ISO-8601: {str(raw)[:40]!r}", None, None
    value = None
    if fields.target_field is not None:
        found = field_at(entry, fields.target_field)
        value = None if found is None else str(found)
    return None, t, value


@dataclass(frozen=True)
class RecordingSummary:
    arrivals: int
    span_s: float
    mean_rps: float
    #: the CV of the gaps between arrivals (None: fewer than three)
    burstiness_cv: float | None
    window_s: float
    #: arrivals per window, from the first arrival's window on
    window_counts: tuple[int, ...]
    targets: dict[str, int]
    left_out: dict[str, int]
    files: int

    def as_dict(self) -> dict[str, Any]:
        rates = [count / self.window_s for count in self.window_counts]
        return {
            "arrivals": self.arrivals,
            "span_s": round(self.span_s, 6),
            "mean_rps": round(self.mean_rps, 3),
            "burstiness_cv": None if self.burstiness_cv is None else round(self.burstiness_cv, 4),
            "window_s": self.window_s,
            "window_rps": {
                "min": round(min(rates, default=0.0), 3),
                "median": round(float(np.median(rates)), 3) if rates else 0.0,
                "p99": round(float(np.percentile(rates, 99)), 3) if rates else 0.0,
                "max": round(max(rates, default=0.0), 3),
            },
            "window_counts": list(self.window_counts),
            "targets": self.targets,
            "left_out": self.left_out,
            "files": self.files,
        }


def ordered(recording: Recording) -> tuple[np.ndarray, np.ndarray]:
    """(times from the first arrival, target codes), in time order (stable for equal times)."""
    times = np.frombuffer(recording.times, dtype=np.float64) if recording.times else np.zeros(0)
    codes = np.frombuffer(recording.codes, dtype=np.uint16) if recording.codes else np.zeros(0, dtype=np.uint16)
    order = np.argsort(times, kind="stable")
    times, codes = times[order], codes[order]
    return (times - times[0] if len(times) else times), codes


def summarise(times: np.ndarray, codes: np.ndarray, recording: Recording, window_s: float) -> RecordingSummary:
    gaps = GapStats()
    for t in times.tolist():
        gaps.add(t)
    span = float(times[-1]) if len(times) else 0.0
    count = len(times)
    mean = (count - 1) / span if count > 1 and span > 0 else 0.0
    windows = np.bincount((times // window_s).astype(np.int64)) if count else np.zeros(0, dtype=np.int64)
    per_target: dict[str, int] = {}
    if count:
        for code, n in enumerate(np.bincount(codes.astype(np.int64), minlength=len(recording.names)).tolist()):
            if n:
                per_target[recording.names[code] or NO_TARGET] = int(n)
    return RecordingSummary(
        arrivals=count,
        span_s=span,
        mean_rps=mean,
        burstiness_cv=gaps.cv,
        window_s=window_s,
        window_counts=tuple(int(n) for n in windows.tolist()),
        targets=per_target,
        left_out=dict(recording.left_out),
        files=recording.files,
    )


def write_replay(path: Path, times: np.ndarray, codes: np.ndarray, names: Sequence[str | None]) -> None:
    """CSV ``t_s[,target]`` (microsecond resolution); a target column only when some arrival has one."""
    with_target = bool(len(codes)) and bool(codes.any())
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write("t_s,target\n" if with_target else "t_s\n")
        chunk = 100_000
        for start in range(0, len(times), chunk):
            part_t = times[start : start + chunk].tolist()
            if with_target:
                part_c = codes[start : start + chunk].tolist()
                out.write("".join(f"{t:.6f},{names[c] or ''}\n" for t, c in zip(part_t, part_c, strict=True)))
            else:
                out.write("".join(f"{t:.6f}\n" for t in part_t))


def spark(counts: Sequence[int]) -> str:
    """Arrivals per window as one character each (the busiest window '@'), at most MAX_SPARK (merged)."""
    if not counts:
        return ""
    step = math.ceil(len(counts) / MAX_SPARK)
    merged = [sum(counts[i : i + step]) for i in range(0, len(counts), step)]
    top = max(merged) or 1
    return "".join(LEVELS[min(len(LEVELS) - 1, math.ceil(n / top * (len(LEVELS) - 1)))] for n in merged)


def describe(summary: RecordingSummary, out: Path) -> list[str]:
    """The lines `inferload trace-to-replay` prints."""
    figures = summary.as_dict()
    rates = figures["window_rps"]
    left = sum(summary.left_out.values())
    lines = [
        f"{summary.arrivals:,} arrivals from {summary.files} file(s)"
        + (f"; {left:,} left out: " + "; ".join(f"{n:,} {why}" for why, n in summary.left_out.items()) if left else ""),
        f"span {summary.span_s:.3f} s, mean {summary.mean_rps:.2f} req/s, burstiness (CV of the gaps between arrivals) "
        + ("n/a" if summary.burstiness_cv is None else f"{summary.burstiness_cv:.2f}")
        + " (Poisson 1, evenly spaced 0)",
        f"rate over {summary.window_s:g} s windows: min {rates['min']:.1f}, median {rates['median']:.1f},"
        f" p99 {rates['p99']:.1f}, max {rates['max']:.1f} req/s"
        + (f" (peak {rates['max'] / summary.mean_rps:.1f}x the mean)" if summary.mean_rps > 0 else ""),
    ]
    step = math.ceil(len(summary.window_counts) / MAX_SPARK) if summary.window_counts else 1
    lines.append(f"|{spark(summary.window_counts)}| (one character per {summary.window_s * step:g} s)")
    if set(summary.targets) == {NO_TARGET}:
        lines.append("no target column: the rows go to the scenario's targets by weight")
    elif summary.targets:
        lines.append("targets: " + ", ".join(f"{name} {n:,}" for name, n in summary.targets.items()))
    lines.append(f"wrote {out} and {summary_path(out)}")
    return lines


def summary_path(out: Path) -> Path:
    return out.with_name(out.stem + ".summary.json")


def record_arrivals(
    sources: Sequence[Path],
    out: Path,
    source_format: SourceFormat,
    targets: Mapping[str, str],
    fields: LogFields,
    window_s: float,
) -> RecordingSummary:
    """Read ``sources``, write the replay file ``out`` and its summary next to it; the summary."""
    recording = Recording()
    if source_format == "triton-trace":
        read_triton_traces(sources, targets, recording)
    else:
        read_access_logs(sources, fields, targets, recording)
    if not recording.times:
        left = "; ".join(f"{n:,} {why}" for why, n in recording.left_out.items())
        raise InferloadError("no arrivals found" + (f" ({left} left out)" if left else ""))
    if not targets and len(recording.names) == 2:  # one model (or value), not mapped: no target column
        recording.codes = array("H", bytes(2 * len(recording.codes)))
        recording.names = [None]
    times, codes = ordered(recording)
    summary = summarise(times, codes, recording, window_s)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_replay(out, times, codes, recording.names)
    summary_path(out).write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    return summary


def guess_format(path: Path) -> SourceFormat:
    """triton-trace for a JSON array (Triton's trace file), jsonl otherwise (judged by the first bytes)."""
    names = trace_file_names(path)
    first = names[0] if names else path
    try:
        with open(first, "rb") as handle:
            head = handle.read(256).lstrip()
    except OSError as error:
        raise InferloadError(f"{path}: cannot read it: {error.strerror}") from None
    return "triton-trace" if head.startswith(b"[") else "jsonl"


def iter_target_map(items: Sequence[str]) -> Iterator[tuple[str, str]]:
    """``SOURCE=TARGET`` items (comma lists allowed) as pairs; InferloadError for a malformed one."""
    for item in items:
        for part in item.split(","):
            source, sep, target = part.partition("=")
            if not sep or not source.strip() or not target.strip():
                raise InferloadError(f"--target: expected SOURCE=TARGET (a model or log value = a scenario target); got {part!r}")
            yield source.strip(), target.strip()
