"""Production arrivals recorded from what servers already write, as a replay file (`inferload trace-to-replay`).

Two sources:

- **Triton's trace files** (``--trace-config triton,file=PATH``, the files the tail anatomy reads:
  ``PATH`` and ``PATH.<k>``): one arrival per traced request, at its frontend's receive time
  (``HTTP_RECV_START``, or ``GRPC_WAITREAD_END`` over gRPC), for its model. Traces without one (an
  ensemble's steps, requests of the in-process API) are left out and counted. Only the traced
  requests are there: trace every request (``trace_rate`` 1) to record the whole traffic.
- **CSV files with a header row** (``--format csv``, or a ``.csv`` name: the Azure LLM inference
  traces' ``TIMESTAMP,ContextTokens,GeneratedTokens``), read as the JSON-lines logs below with each
  column's name as its key (whole numbers as integers).
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
no target column (the replay's rows then go to the scenario's targets by weight).

Bad input is refused, or left out and counted, never read without end: a source must be a regular
file (a FIFO, a device or a kernel file is refused before it is opened); files are read as a
stream, an access log line by line and a trace file one array entry at a time, and a line or
trace entry over `MAX_ENTRY_BYTES` is refused with its line number; a value of the wrong type, an
integer of more than `MAX_NUMBER_DIGITS` digits, a NaN or infinite time, or JSON nested deeper than
Python's reader goes is left out with its reason (or, in an access log without
``--skip-bad-lines`` and for what cannot be skipped, is one error line naming the file and line).
Memory: sorting needs the times: 8 bytes and a 2-byte target code per arrival; a trace file's
requests are joined by id at its end (about 30 bytes per request); the summary counts at most
`MAX_WINDOWS` windows, so a span longer than that many windows (as one millisecond time among
seconds makes) is refused, naming it. The replay file and its summary are written to temporary
files next to them and renamed onto their names once complete: a run cut off leaves no partial one.
"""

from __future__ import annotations

import argparse
import codecs
import csv
import json
import math
import os
import re
import stat
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

import numpy as np

from inferload.errors import InferloadError
from inferload.measure.run_record import GapStats
from inferload.observe.sources.triton_trace_file import trace_file_names
from inferload.paths import replacing
from inferload.scenario.input_files import not_regular_problem
from inferload.scenario.lengths import MAX_BLOCK_ID, MAX_LENGTH, MAX_REQUESTS
from inferload.scenario.limits import MAX_NUMBER_DIGITS
from inferload.scenario.messages import parse_duration

# `inferload trace-to-replay`'s command line: Triton trace files or JSON-lines access logs → a replay file.
EXIT_USAGE = 2


def add_trace_to_replay_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    parser = sub.add_parser("trace-to-replay", help=help_text)
    parser.add_argument(
        "sources",
        type=Path,
        nargs="+",
        metavar="SOURCE",
        help="Triton's trace file PATH (its PATH.<k> files are read too), JSON-lines access log files, or CSV files",
    )
    parser.add_argument("--out", type=Path, required=True, help="the replay file to write (.csv); its summary goes next to it")
    parser.add_argument(
        "--format",
        choices=["auto", "triton-trace", "jsonl", "csv"],
        default="auto",
        help="what the sources are (default auto: a JSON array is a Triton trace file, a .csv name CSV with a header"
        " row, anything else JSON lines)",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="SOURCE=TARGET",
        help="map a model (or the --target-field value) to a scenario target; with any mapping, unmapped ones are"
        " left out (counted). Default: the model names as they are (no target column for a single model)",
    )
    parser.add_argument(
        "--time-field", default="timestamp", help="JSON lines, CSV: the time's key, dots for nested keys (timestamp)"
    )
    parser.add_argument(
        "--time-unit", choices=["s", "ms", "us", "ns"], default="s", help="JSON lines, CSV: unit of numeric times (s)"
    )
    parser.add_argument("--target-field", help="JSON lines, CSV: the key whose value names the request's target (none)")
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="JSON lines, CSV: leave out (and count) lines that cannot be read"
    )
    parser.add_argument("--window", default="1s", help="the summary's rate-over-time window (default 1s)")
    parser.add_argument(
        "--input-tokens-field",
        help="JSON lines, CSV: the key of each request's prompt length in tokens (Mooncake: input_length); with it, or"
        " --output-tokens-field, the lengths go to OUT's .lengths.jsonl and each row names its pair (sample)",
    )
    parser.add_argument(
        "--output-tokens-field",
        help="JSON lines, CSV: the key of each request's output length in tokens (Mooncake: output_length)",
    )
    parser.add_argument(
        "--hash-ids-field",
        help="JSON lines: the key of each request's prompt block ids (Mooncake: hash_ids, blocks of 512 tokens); with"
        " --input-tokens-field, each request's blocks go to the lengths file, and prompts that name a block share its words",
    )
    parser.add_argument(
        "--length-step",
        type=int,
        default=1,
        metavar="TOKENS",
        help="round each length up to a multiple of TOKENS (fewer distinct requests to prepare; default 1: exact)",
    )


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
        fields = LogFields(
            args.time_field,
            args.time_unit,
            args.target_field,
            args.skip_bad_lines,
            args.input_tokens_field,
            args.output_tokens_field,
            args.hash_ids_field,
        )
        if source_format == "triton-trace" and (
            args.target_field or args.time_field != "timestamp" or fields.lengths_asked or args.length_step != 1
        ):
            raise InferloadError(
                "--time-field, --target-field and the lengths' options apply to JSON-lines logs, not Triton trace files"
            )
        if not 1 <= args.length_step <= MAX_LENGTH:
            raise InferloadError(
                f"--length-step: expected a whole number of tokens from 1 to {MAX_LENGTH:,}; got {args.length_step}"
            )
        if args.hash_ids_field is not None and args.input_tokens_field is None:
            raise InferloadError("--hash-ids-field names the blocks of each prompt: give --input-tokens-field too")
        if args.hash_ids_field is not None and args.length_step != 1:
            raise InferloadError(
                "--length-step rounds the prompt lengths that --hash-ids-field's blocks must cover: leave it at 1"
            )
        if args.length_step != 1 and not fields.lengths_asked:
            raise InferloadError("--length-step rounds the lengths read: give --input-tokens-field or --output-tokens-field")
        in_the_way = out_problem(args.out, fields.lengths_asked)
        if in_the_way is not None:
            raise InferloadError(f"--out: {in_the_way}")
        summary = record_arrivals(args.sources, args.out, source_format, targets, fields, window_s, args.length_step)
    except InferloadError as error:
        print(f"inferload trace-to-replay: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"inferload trace-to-replay: {error}", file=sys.stderr)
        return EXIT_USAGE
    for line in describe(summary, args.out):
        print(line)
    return 0


SourceFormat = Literal["triton-trace", "jsonl", "csv"]
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
#: the longest access log line (bytes) or Triton trace entry (characters) read; a longer one is refused
MAX_ENTRY_BYTES = 1 << 20
#: windows of the summary's rate over time; a span of more (at --window) is refused
MAX_WINDOWS = 1_000_000
#: characters of a target (a model name, a --target-field value); a longer one is left out
MAX_TARGET_CHARS = 1024
#: bytes read from a trace file at a time (more while one entry is longer)
READ_CHUNK = 1 << 16
#: Triton's trace ids and ns are unsigned 64-bit integers
UINT64_END = 1 << 64


def _json_int(text: str) -> int | float:
    """A JSON integer: as int up to `MAX_NUMBER_DIGITS` digits, else infinite (Python refuses 4,300+ digits)."""
    return int(text) if len(text) <= MAX_NUMBER_DIGITS else (-math.inf if text.startswith("-") else math.inf)


#: JSON as the sources are read: NaN and Infinity are accepted (then refused as times), long integers are infinite
_DECODER = json.JSONDecoder(parse_int=_json_int)


@dataclass
class Recording:
    """Arrivals as read: absolute times (seconds on the source's clock) and target codes."""

    times: array[float] = field(default_factory=lambda: array("d"))
    codes: array[int] = field(default_factory=lambda: array("H"))
    #: each arrival's input and output tokens (0: not given), when the lengths are read
    inputs: array[int] = field(default_factory=lambda: array("i"))
    outputs: array[int] = field(default_factory=lambda: array("i"))
    #: each arrival's prompt block ids (Mooncake's hash_ids), when they are read
    blocks: list[tuple[int, ...]] = field(default_factory=list)
    names: list[str | None] = field(default_factory=lambda: [None])  # code 0: no target
    code_of: dict[str, int] = field(default_factory=dict)
    #: what was left out, by reason
    left_out: dict[str, int] = field(default_factory=dict)
    files: int = 0

    def code(self, target: str | None) -> int:
        """The code of ``target`` (0: none), made on first use; InferloadError past MAX_TARGETS."""
        if target is None:
            return 0
        code = self.code_of.get(target, -1)
        if code < 0:
            if len(self.names) > MAX_TARGETS:
                raise InferloadError(f"more than {MAX_TARGETS:,} different targets in one recording")
            code = len(self.names)
            self.names.append(target)
            self.code_of[target] = code
        return code

    def add(self, t: float, target: str | None, lengths: Lengths | None = None) -> None:
        self.codes.append(self.code(target))
        self.times.append(t)
        if lengths is not None:
            self.inputs.append(lengths[0])
            self.outputs.append(lengths[1])
            if lengths[2] is not None:
                self.blocks.append(lengths[2])

    def extend(self, times: np.ndarray, codes: np.ndarray) -> None:
        """Arrivals at ``times`` (seconds) with target ``codes`` (from `code`), in their order."""
        self.times.frombytes(times.astype(np.float64).tobytes())
        self.codes.frombytes(codes.astype(np.uint16).tobytes())

    def leave_out(self, reason: str, count: int = 1) -> None:
        """Count ``count`` things left out for ``reason``."""
        if count:
            self.left_out[reason] = self.left_out.get(reason, 0) + count


def mapped(value: str | None, targets: Mapping[str, str], recording: Recording, what: str) -> tuple[bool, str | None]:
    """(kept, target) for a source's model or target value under the ``--target`` mapping."""
    if not targets:
        return True, value
    if value is not None and value in targets:
        return True, targets[value]
    recording.leave_out(f"{what} {value!r} not mapped by --target")
    return False, None


def open_source(path: Path) -> BinaryIO:
    """``path`` opened to read bytes, when it is a regular file; InferloadError naming it and why not.

    A FIFO, a device, a folder or a kernel file (/proc, /sys, /dev) is refused before it is opened
    (it would wait for a writer or never end); the open does not wait (O_NONBLOCK) and the opened
    file is checked again, so one swapped in meanwhile is refused too."""
    problem = not_regular_problem(path)
    if problem:
        raise InferloadError(f"{problem}; expected a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise InferloadError(f"{path}: cannot read it: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InferloadError(f"{path} is not a regular file; expected a regular file")
    return os.fdopen(fd, "rb")


_SPACE = re.compile(r"\s*")
_BETWEEN_ENTRIES = re.compile(r"[\s,]*")
#: how far from the end of what was read a JSON error may be and still be a cut entry (``-Infinity``, a ``\\uXXXX``)
_CUT_MARGIN = 16


class _ArrayReader:
    """The entries of the JSON array a trace file holds, read in chunks: one entry (at most
    `MAX_ENTRY_BYTES` characters) in memory at a time; errors name the line it starts on."""

    def __init__(self, handle: BinaryIO, file: Path) -> None:
        self.handle = handle
        self.file = file
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self.text = ""
        self.pos = 0
        self.eof = False
        self.entries = 0
        #: whether the file ended inside an entry (set once the entries are read)
        self.cut = False
        self._line = 1  # the line at `_counted`
        self._counted = 0

    def line(self) -> int:
        """The line `pos` is on."""
        self._line += self.text.count("\n", self._counted, self.pos)
        self._counted = self.pos
        return self._line

    def _fill(self) -> None:
        """Drop what was read before `pos` and read more (as much again as is kept, at least `READ_CHUNK`)."""
        kept = len(self.text) - self.pos
        if kept > MAX_ENTRY_BYTES:
            raise self._too_long()
        self.line()
        chunk = self.handle.read(max(READ_CHUNK, kept))
        self.eof = not chunk
        self.text = self.text[self.pos :] + self._decode(chunk, final=self.eof)
        self.pos = self._counted = 0

    def _too_long(self) -> InferloadError:
        return InferloadError(
            f"{self.file} line {self.line()}: trace entry {self.entries + 1:,} is longer than {MAX_ENTRY_BYTES:,}"
            " characters; expected Triton's trace entries (small JSON objects)"
        )

    def _skip(self, pattern: re.Pattern[str]) -> bool:
        """Move `pos` past what `pattern` matches, reading on as needed; False at the end of the file."""
        while True:
            match = pattern.match(self.text, self.pos)
            assert match is not None  # the patterns match the empty text
            self.pos = match.end()
            if self.pos < len(self.text):
                return True
            if self.eof:
                return False
            self._fill()

    def opens_array(self) -> bool:
        """Whether the file's first character (after white space) opens a JSON array; reads past it."""
        if not self._skip(_SPACE) or self.text[self.pos] != "[":
            return False
        self.pos += 1
        return True

    def __iter__(self) -> Iterator[Any]:
        """Each entry up to ``]`` or the end of the file (also of one still being
        written: no ``]``, a cut last entry, which `cut` then says). InferloadError for an entry
        that is not JSON, nested too deeply or too long."""
        while self._skip(_BETWEEN_ENTRIES) and self.text[self.pos] != "]":
            try:
                entry, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as error:
                if error.pos < len(self.text) - _CUT_MARGIN and not error.msg.startswith("Unterminated string"):
                    raise InferloadError(
                        f"{self.file} line {self.line()}: trace entry {self.entries + 1:,} is not JSON ({error.msg});"
                        " expected Triton's trace entries (JSON objects)"
                    ) from None
                if self.eof:  # the cut end of a file Triton is still writing
                    self.cut = True
                    return
                self._fill()
                continue
            except RecursionError:
                raise InferloadError(
                    f"{self.file} line {self.line()}: trace entry {self.entries + 1:,} is nested too deeply to read;"
                    " expected Triton's trace entries (flat JSON objects)"
                ) from None
            if end == len(self.text) and not self.eof:  # perhaps cut (a number): read on and decode it again
                self._fill()
                continue
            if end - self.pos > MAX_ENTRY_BYTES:
                raise self._too_long()
            self.entries += 1
            yield entry
            self.pos = end


def _uint64(value: Any) -> int | None:
    """``value`` when it is an unsigned 64-bit integer (not a bool), else None."""
    return value if type(value) is int and 0 <= value < UINT64_END else None


def _numpy(values: array[Any], dtype: type[np.generic]) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype) if values else np.zeros(0, dtype=dtype)


@dataclass
class _TraceRequests:
    """What one trace file says of its requests, compactly, in file order: each ``model_name``
    entry (id, model code) and each arrival timestamp (id, its index in ARRIVAL_STAMPS, seconds)."""

    model_ids: array[int] = field(default_factory=lambda: array("Q"))
    model_codes: array[int] = field(default_factory=lambda: array("H"))
    models: list[str] = field(default_factory=list)
    code_of: dict[str, int] = field(default_factory=dict)
    stamp_ids: array[int] = field(default_factory=lambda: array("Q"))
    stamp_kinds: array[int] = field(default_factory=lambda: array("B"))
    stamp_times: array[float] = field(default_factory=lambda: array("d"))

    def add_entry(self, entry: Any, recording: Recording) -> None:
        """Keep what ``entry`` says of a request's model and arrival; count in ``recording`` what is left out."""
        if not isinstance(entry, dict):
            recording.leave_out("trace file entries that are not JSON objects")
            return
        key = _uint64(entry.get("id"))
        if key is None:
            recording.leave_out("trace entries without an unsigned 64-bit integer id")
            return
        if "model_name" in entry:
            model = entry["model_name"]
            if isinstance(model, str) and len(model) <= MAX_TARGET_CHARS:
                self.model_ids.append(key)
                self.model_codes.append(self._code(model))
            else:
                recording.leave_out(f"trace entries whose model_name is not text of at most {MAX_TARGET_CHARS:,} characters")
        stamps = entry.get("timestamps")
        if stamps is None:
            return
        if not isinstance(stamps, list):
            recording.leave_out("trace entries whose timestamps are not a list")
            return
        for stamp in stamps:
            if not isinstance(stamp, dict):
                recording.leave_out("trace timestamps that are not JSON objects")
                continue
            name = stamp.get("name")
            if not isinstance(name, str) or name not in ARRIVAL_STAMPS:
                continue
            ns = _uint64(stamp.get("ns"))
            if ns is None:
                recording.leave_out("arrival timestamps whose ns is not an unsigned 64-bit integer")
                continue
            self.stamp_ids.append(key)
            self.stamp_kinds.append(ARRIVAL_STAMPS.index(name))
            self.stamp_times.append(ns / 1e9)

    def _code(self, model: str) -> int:
        code = self.code_of.get(model, -1)
        if code < 0:
            if len(self.models) >= MAX_TARGETS:
                raise InferloadError(f"more than {MAX_TARGETS:,} different models in one trace file")
            code = self.code_of[model] = len(self.models)
            self.models.append(model)
        return code

    def arrivals(self) -> tuple[np.ndarray, np.ndarray]:
        """(model codes into `models`, arrival seconds or NaN) per traced request (an id with a
        ``model_name``), in the order their first ``model_name`` entries come; its last model_name,
        as Triton's trace parser keeps, and the first time of the first of ARRIVAL_STAMPS it has."""
        all_ids = _numpy(self.model_ids, np.uint64)
        if not len(all_ids):
            return np.zeros(0, dtype=np.uint16), np.zeros(0)
        ids, first = np.unique(all_ids, return_index=True)
        _, from_end = np.unique(all_ids[::-1], return_index=True)
        codes = _numpy(self.model_codes, np.uint16)[len(all_ids) - 1 - from_end]
        times = np.full(len(ids), np.nan)
        stamp_ids = _numpy(self.stamp_ids, np.uint64)
        kinds = _numpy(self.stamp_kinds, np.uint8)
        stamp_times = _numpy(self.stamp_times, np.float64)
        for kind in reversed(range(len(ARRIVAL_STAMPS))):  # the preferred stamp last: it overwrites
            chosen = kinds == kind
            kind_ids, kind_first = np.unique(stamp_ids[chosen], return_index=True)
            if not len(kind_ids):
                continue
            at = np.minimum(np.searchsorted(kind_ids, ids), len(kind_ids) - 1)
            found = kind_ids[at] == ids
            times[found] = stamp_times[chosen][kind_first][at[found]]
        order = np.argsort(first, kind="stable")
        return codes[order], times[order]

    def record(self, targets: Mapping[str, str], recording: Recording) -> None:
        """Add the requests' arrivals to ``recording`` (in order), their models mapped by ``targets``;
        count those without an arrival time and those of unmapped models."""
        codes, times = self.arrivals()
        timed = ~np.isnan(times)
        recording.leave_out("traces without a frontend receive time (ensemble steps, in-process requests)", int((~timed).sum()))
        per_model = np.bincount(codes[timed], minlength=len(self.models))
        target_code = np.full(len(self.models), -1, dtype=np.int64)
        for model, (name, count) in enumerate(zip(self.models, per_model.tolist(), strict=True)):
            if not count:
                continue
            if targets and name not in targets:
                recording.leave_out(f"model {name!r} not mapped by --target", count)
            else:
                target_code[model] = recording.code(targets.get(name, name))
        kept = timed & (target_code[codes] >= 0)
        recording.extend(times[kept], target_code[codes[kept]])


def read_triton_traces(paths: Sequence[Path], targets: Mapping[str, str], recording: Recording) -> None:
    """Every traced request's arrival in Triton's trace files at ``paths`` (each with its ``.<k>`` files).

    Each file is read as a stream (`_ArrayReader`) and its entries joined by request id at its end;
    malformed entries are left out and counted, a cut last entry (a file Triton is still writing)
    too; InferloadError naming the file and line for one that is not JSON, too long or too deep,
    and for a path that is no regular file."""
    files: list[Path] = []
    for path in paths:
        found = trace_file_names(path)
        if not found:
            if path.exists():  # a FIFO, a device, a folder: say what it is
                raise InferloadError(f"{not_regular_problem(path) or path}; expected Triton's trace file")
            raise InferloadError(f"{path}: no Triton trace file there (nor {path.name}.<k> files)")
        files.extend(name for name in found if name not in files)
    for file in files:
        with open_source(file) as handle:
            reader = _ArrayReader(handle, file)
            if not reader.opens_array():
                raise InferloadError(f"{file}: not a Triton trace file (a JSON array of trace entries); is it a JSON-lines log?")
            recording.files += 1
            requests = _TraceRequests()
            for entry in reader:
                requests.add_entry(entry, recording)
            if reader.cut:
                recording.leave_out("cut entries at the end of a trace file (one Triton is still writing)")
        requests.record(targets, recording)


def field_at(entry: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted key path (``request.time``), None when absent."""
    value: Any = entry
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def epoch_seconds(value: Any, unit: float) -> float | None:
    """Epoch seconds of a log's time: a number (times ``unit``), numeric text, or ISO-8601 text;
    None for anything else (another type, NaN, infinite, beyond a float)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            seconds = float(value) * unit
        except OverflowError:  # an int beyond a float
            return None
        return seconds if math.isfinite(seconds) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return number * unit if math.isfinite(number * unit) else None
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
    #: the keys of each request's prompt and output lengths in tokens (None: not read)
    input_field: str | None = None
    output_field: str | None = None
    #: the key of each request's prompt block ids (Mooncake's hash_ids; None: not read)
    hash_ids_field: str | None = None

    @property
    def lengths_asked(self) -> bool:
        return self.input_field is not None or self.output_field is not None


def read_access_logs(
    paths: Sequence[Path], fields: LogFields, targets: Mapping[str, str], recording: Recording, csv_header: bool = False
) -> None:
    """Every request line's arrival in JSON-lines access logs (``csv_header``: CSV files with a
    header row, its names the fields), read line by line: InferloadError naming the file and line at
    a bad line (not JSON, not an object, nested too deeply, longer than `MAX_ENTRY_BYTES`, a missing
    or unreadable time, a target that is not text or a number, a length that is not a whole number
    of tokens), unless ``skip_bad_lines``, which leaves such lines out and counts them;
    InferloadError for a path that is no regular file."""
    unit = TIME_UNITS[fields.time_unit]
    for path in paths:
        with open_source(path) as handle:
            recording.files += 1
            header: list[str] | None = None
            for line, raw in _lines(handle):
                if raw is None:
                    problem: str | None = f"longer than {MAX_ENTRY_BYTES:,} bytes"
                else:
                    text = raw.decode("utf-8", errors="replace")
                    if not text.strip():
                        continue
                    if csv_header and header is None:
                        header = [name.strip() for name in next(csv.reader([text]))]
                        continue
                    if header is not None:
                        problem, t, value, lengths = _entry_fields(_csv_entry(header, text), fields, unit)
                    else:
                        problem, t, value, lengths = _log_line(text, fields, unit)
                if problem is not None:
                    if not fields.skip_bad_lines:
                        raise InferloadError(f"{path} line {line}: {problem} (--skip-bad-lines leaves such lines out)")
                    recording.leave_out(f"lines {problem.split(':')[0]}")
                    continue
                assert t is not None
                kept, target = mapped(value, targets, recording, fields.target_field or "target")
                if kept:
                    recording.add(t, target, lengths)


def _lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, its bytes) per line of ``handle``; None for a line over `MAX_ENTRY_BYTES`
    (read on to its end in chunks, not kept)."""
    number = 0
    while raw := handle.readline(MAX_ENTRY_BYTES + 1):
        number += 1
        if len(raw) <= MAX_ENTRY_BYTES or raw.endswith(b"\n"):
            yield number, raw
            continue
        while (rest := handle.readline(READ_CHUNK)) and not rest.endswith(b"\n"):
            pass
        yield number, None


def _shown(value: Any) -> str:
    """A short description of a JSON value for an error line."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (NaN, infinite, or a number of over {MAX_NUMBER_DIGITS} digits)"
    if isinstance(value, (bool, int, float)) or value is None:
        return json.dumps(value)
    return "a JSON object" if isinstance(value, dict) else "a JSON array"


#: a request's input and output tokens (0: not read) and its prompt's block ids (None: not read)
Lengths = tuple[int, int, tuple[int, ...] | None]
LogLine = tuple[str | None, float | None, str | None, Lengths | None]


def _log_line(text: str, fields: LogFields, unit: float) -> LogLine:
    """(problem, time, target, lengths) of one access log line: a problem (``what: detail``) or its
    time, target and (when they are read) its input and output tokens (0: that one not read)."""
    try:
        entry = _DECODER.decode(text)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg} at column {error.colno}", None, None, None
    except RecursionError:
        return "nested too deeply to read: expected one JSON object per line", None, None, None
    if not isinstance(entry, dict):
        return "not a JSON object", None, None, None
    return _entry_fields(entry, fields, unit)


def _csv_entry(header: Sequence[str], text: str) -> dict[str, Any]:
    """A CSV line as an entry: each cell under its column's name, whole numbers as integers."""
    cells = next(csv.reader([text]), [])
    return {name: int(cell) if cell.strip().isdigit() else cell for name, cell in zip(header, cells, strict=False)}


def _entry_fields(entry: Mapping[str, Any], fields: LogFields, unit: float) -> LogLine:
    """(problem, time, target, lengths) of one request's entry (see `_log_line`)."""
    raw = field_at(entry, fields.time_field)
    if raw is None:
        return f"without the time field: {fields.time_field!r}", None, None, None
    t = epoch_seconds(raw, unit)
    if t is None:
        return f"with a time that is not epoch seconds or ISO-8601: {_shown(raw)}", None, None, None
    value = None
    if fields.target_field is not None:
        found = field_at(entry, fields.target_field)
        if isinstance(found, (dict, list)):
            return f"with a target that is not text or a number: {_shown(found)}", None, None, None
        value = None if found is None else str(found)
        if value is not None and len(value) > MAX_TARGET_CHARS:
            return f"with a target longer than {MAX_TARGET_CHARS:,} characters: {_shown(value)}", None, None, None
    lengths = None
    if fields.lengths_asked:
        read = []
        for key in (fields.input_field, fields.output_field):
            tokens = None if key is None else field_at(entry, key)
            if key is not None and (type(tokens) is not int or not 1 <= tokens <= MAX_LENGTH):
                return (
                    f"with a length that is not a whole number of tokens from 1 to {MAX_LENGTH:,}: {key} {_shown(tokens)}",
                    None,
                    None,
                    None,
                )
            read.append(0 if tokens is None else int(tokens))
        blocks = None
        if fields.hash_ids_field is not None:
            found = field_at(entry, fields.hash_ids_field)
            if not isinstance(found, list) or not found or any(type(b) is not int or not 0 <= b <= MAX_BLOCK_ID for b in found):
                return (
                    f"with hash_ids that are not a list of block ids: {fields.hash_ids_field} {_shown(found)}",
                    None,
                    None,
                    None,
                )
            blocks = tuple(found)
        lengths = (read[0], read[1], blocks)
    return None, t, value, lengths


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
    #: the lengths read (`TraceLengths.summary`); None: not read
    lengths: dict[str, Any] | None = None

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
            **({} if self.lengths is None else {"lengths": self.lengths}),
        }


def ordered(recording: Recording) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times from the first arrival, target codes, the order: each row's arrival as read), in time
    order (stable for equal times)."""
    times = np.frombuffer(recording.times, dtype=np.float64) if recording.times else np.zeros(0)
    codes = np.frombuffer(recording.codes, dtype=np.uint16) if recording.codes else np.zeros(0, dtype=np.uint16)
    order = np.argsort(times, kind="stable")
    times, codes = times[order], codes[order]
    return (times - times[0] if len(times) else times), codes, order


def check_windows(first_s: float, last_s: float, window_s: float) -> None:
    """InferloadError when the arrivals from ``first_s`` to ``last_s`` (seconds on the source's
    clock) span more than `MAX_WINDOWS` windows of ``window_s``: the summary keeps a count per
    window, so its memory is bounded by that, not by the span."""
    span = last_s - first_s
    windows = span / window_s
    if math.isfinite(windows) and windows < MAX_WINDOWS:
        return
    raise InferloadError(
        f"the arrivals span {span:.6g} s (first time {first_s} s, last {last_s} s on the source's clock):"
        f" {windows:.3g} windows of {window_s:g} s, and the summary counts at most {MAX_WINDOWS:,};"
        " are some times in another unit (milliseconds among seconds: --time-unit)? a longer --window"
        " summarises a longer recording"
    )


def summarise(
    times: np.ndarray, codes: np.ndarray, recording: Recording, window_s: float, origin_s: float = 0.0
) -> RecordingSummary:
    """The summary of arrivals ``times`` (seconds from the first, sorted; ``origin_s``: the first's
    time on the source's clock, for the error) and their target ``codes``; InferloadError from
    `check_windows` when they span too many windows."""
    span = float(times[-1]) if len(times) else 0.0
    check_windows(origin_s, origin_s + span, window_s)
    gaps = GapStats()
    for start in range(0, len(times), 100_000):  # a chunk of Python floats at a time
        for t in times[start : start + 100_000].tolist():
            gaps.add(t)
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


def write_replay(
    out: IO[str], times: np.ndarray, codes: np.ndarray, names: Sequence[str | None], samples: np.ndarray | None = None
) -> None:
    """CSV ``t_s[,target][,sample]`` (microsecond resolution) to ``out``; a target column only when
    some arrival has one, a sample column with ``samples`` (each row's request in the lengths file)."""
    with_target = bool(len(codes)) and bool(codes.any())
    out.write("t_s" + (",target" if with_target else "") + (",sample" if samples is not None else "") + "\n")
    chunk = 100_000
    for start in range(0, len(times), chunk):
        columns = [[f"{t:.6f}" for t in times[start : start + chunk].tolist()]]
        if with_target:
            columns.append([names[c] or "" for c in codes[start : start + chunk].tolist()])
        if samples is not None:
            columns.append([str(n) for n in samples[start : start + chunk].tolist()])
        out.write("".join(",".join(row) + "\n" for row in zip(*columns, strict=True)))


@dataclass(frozen=True)
class TraceLengths:
    """The distinct requests of a recording (their (input, output) tokens and, when read, their
    prompt block ids), and each row's request."""

    pairs: np.ndarray  # distinct requests x 2 (0: that length not read)
    samples: np.ndarray  # each row's index into `pairs`, in the replay's order
    step: int
    #: each distinct request's block ids (empty: not read)
    blocks: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, inputs: np.ndarray, outputs: np.ndarray, step: int, blocks: Sequence[tuple[int, ...]] = ()) -> TraceLengths:
        """Each length rounded up to a multiple of ``step`` (at most MAX_LENGTH); with ``blocks`` (each
        row's, in the same order) a request is its lengths and its blocks. InferloadError when more
        than MAX_REQUESTS distinct requests remain (each is a request to prepare before the run)."""
        rounded = np.stack([inputs, outputs], axis=1).astype(np.int64)
        rounded = np.minimum(-(-rounded // step) * step, MAX_LENGTH)
        if blocks:
            index: dict[tuple[int, int, tuple[int, ...]], int] = {}
            rows = [index.setdefault((i, o, b), len(index)) for (i, o), b in zip(rounded.tolist(), blocks, strict=True)]
            keys = list(index)
            pairs = np.array([[i, o] for i, o, _ in keys], dtype=np.int64).reshape(-1, 2)
            samples = np.array(rows, dtype=np.int64)
            distinct_blocks = tuple(b for _, _, b in keys)
        else:
            pairs, samples = np.unique(rounded, axis=0, return_inverse=True)
            distinct_blocks = ()
        if len(pairs) > MAX_REQUESTS:
            raise InferloadError(
                f"{len(pairs):,} distinct requests (lengths{', blocks' if blocks else ''}), more than the {MAX_REQUESTS:,}"
                " requests a run prepares" + ("" if blocks else "; round them with --length-step (e.g. 16 tokens)")
            )
        return cls(pairs, samples.reshape(-1).astype(np.int64), step, distinct_blocks)

    def lines(self) -> Iterator[str]:
        """The lengths file's lines (`inferload.scenario.lengths`): one request a line, by sample."""
        for number, (input_tokens, output_tokens) in enumerate(self.pairs.tolist()):
            entry: dict[str, Any] = {key: n for key, n in (("input_tokens", input_tokens), ("output_tokens", output_tokens)) if n}
            if self.blocks:
                entry["hash_ids"] = list(self.blocks[number])
            yield json.dumps(entry) + "\n"

    def summary(self, path: Path) -> dict[str, Any]:
        """summary.json's ``lengths``: the file, the distinct requests, each length over the rows."""

        def figures(column: int) -> dict[str, float | int] | None:
            per_row = self.pairs[self.samples, column]
            if not per_row.any():
                return None
            return {"mean": round(float(per_row.mean()), 2), "min": int(per_row.min()), "max": int(per_row.max())}

        summary: dict[str, Any] = {
            "file": path.name,
            "distinct": len(self.pairs),
            "step": self.step,
            "input_tokens": figures(0),
            "output_tokens": figures(1),
        }
        if self.blocks:  # how much of the prompts the rows share: block mentions that name a block named before
            named = [block for sample in self.samples.tolist() for block in self.blocks[sample]]
            distinct = len(set(named))
            summary["blocks"] = {
                "distinct": distinct,
                "named": len(named),
                "reused_pct": round(100.0 * (1 - distinct / len(named)), 2),
            }
        return summary


def lengths_path(out: Path) -> Path:
    return out.with_name(out.stem + ".lengths.jsonl")


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
    if summary.lengths is not None:
        said = [
            f"{name} mean {figures['mean']:g} (min {figures['min']:,}, max {figures['max']:,})"
            for name, figures in (
                ("input tokens", summary.lengths["input_tokens"]),
                ("output tokens", summary.lengths["output_tokens"]),
            )
            if figures is not None
        ]
        lines.append(f"lengths: {', '.join(said)}; {summary.lengths['distinct']:,} distinct requests")
        if (blocks := summary.lengths.get("blocks")) is not None:
            lines.append(
                f"blocks (hash_ids): {blocks['named']:,} named, {blocks['distinct']:,} distinct: {blocks['reused_pct']:g} % of"
                " the prompts' blocks repeat one named before (a prefix cache's chance)"
            )
        lines.append(f"wrote {out}, {summary_path(out)} and {lengths_path(out)} (generation.lengths.file)")
    else:
        lines.append(f"wrote {out} and {summary_path(out)}")
    return lines


def summary_path(out: Path) -> Path:
    return out.with_name(out.stem + ".summary.json")


def out_problem(out: Path, with_lengths: bool) -> str | None:
    """What stands where ``out``'s files go, or None: a file where a folder above them should be, or
    one of the files it makes (the replay file, its summary, with ``with_lengths`` its lengths file)
    there as no regular file (a folder, a FIFO). Checked before the sources are read, since a file
    that cannot be replaced would leave the others written alone."""
    above = next((path for path in out.parents if path.exists()), None)
    if above is not None and not above.is_dir():
        return f"cannot write {out}: {above} is a file, not a folder"
    written = (out, summary_path(out), *((lengths_path(out),) if with_lengths else ()))
    in_the_way = next((path for path in written if path.exists() and not path.is_file()), None)
    return None if in_the_way is None else f"{in_the_way} is there and is no file to replace; name another --out"


def record_arrivals(
    sources: Sequence[Path],
    out: Path,
    source_format: SourceFormat,
    targets: Mapping[str, str],
    fields: LogFields,
    window_s: float,
    length_step: int = 1,
) -> RecordingSummary:
    """Read ``sources``, write the replay file ``out`` and its summary next to it (each complete or
    not at all); the summary. InferloadError for what cannot be read or summarised (see the module)."""
    recording = Recording()
    if source_format == "triton-trace":
        read_triton_traces(sources, targets, recording)
    else:
        read_access_logs(sources, fields, targets, recording, csv_header=source_format == "csv")
    if not recording.times:
        left = "; ".join(f"{n:,} {why}" for why, n in recording.left_out.items())
        read = ", ".join(str(source) for source in sources)
        raise InferloadError(f"no arrivals found in {read}" + (f" ({left} left out)" if left else ""))
    if not targets and len(recording.names) == 2:  # one model (or value), not mapped: no target column
        recording.codes = array("H", bytes(2 * len(recording.codes)))
        recording.names = [None]
    absolute = np.frombuffer(recording.times, dtype=np.float64)
    first_s, last_s = float(absolute.min()), float(absolute.max())
    del absolute  # the view holds the array's buffer
    check_windows(first_s, last_s, window_s)
    times, codes, order = ordered(recording)
    summary = summarise(times, codes, recording, window_s, first_s)
    lengths = None
    if recording.inputs:
        inputs = np.frombuffer(recording.inputs, dtype=np.int32)[order]
        outputs = np.frombuffer(recording.outputs, dtype=np.int32)[order]
        if recording.blocks:
            blocks = [recording.blocks[i] for i in order.tolist()]
        lengths = TraceLengths.of(inputs, outputs, length_step, blocks if recording.blocks else ())
        summary = replace(summary, lengths=lengths.summary(lengths_path(out)))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # the summary and the lengths are renamed into place first, the replay file last: once it is
        # there, all are complete
        with (
            replacing(out, newline="") as replay,
            replacing(summary_path(out)) as summary_file,
            replacing(lengths_path(out)) if lengths is not None else nullcontext() as lengths_file,
        ):
            write_replay(replay, times, codes, recording.names, None if lengths is None else lengths.samples)
            summary_file.write(json.dumps(summary.as_dict(), indent=2) + "\n")
            if lengths is not None and lengths_file is not None:
                lengths_file.writelines(lengths.lines())
    except OSError as error:
        raise InferloadError(f"--out: cannot write {out}: {error.strerror or type(error).__name__}") from None
    return summary


def guess_format(path: Path) -> SourceFormat:
    """triton-trace for a JSON array (Triton's trace file), csv for a ``.csv`` name, jsonl otherwise
    (judged by the first bytes); InferloadError for a path that is no regular file (it is not read:
    a FIFO would wait)."""
    if path.suffix.lower() == ".csv":
        problem = not_regular_problem(path)
        if problem:
            raise InferloadError(f"{problem}; expected a regular file")
        return "csv"
    names = trace_file_names(path)
    first = names[0] if names else path
    with open_source(first) as handle:
        try:
            head = handle.read(256).lstrip()
        except OSError as error:
            raise InferloadError(f"{first}: cannot read it: {error.strerror}") from None
    return "triton-trace" if head.startswith(b"[") else "jsonl"


def iter_target_map(items: Sequence[str]) -> Iterator[tuple[str, str]]:
    """``SOURCE=TARGET`` items (comma lists allowed) as pairs; InferloadError for a malformed one."""
    for item in items:
        for part in item.split(","):
            source, sep, target = part.partition("=")
            if not sep or not source.strip() or not target.strip():
                raise InferloadError(f"--target: expected SOURCE=TARGET (a model or log value = a scenario target); got {part!r}")
            yield source.strip(), target.strip()
