"""Replay files: recorded arrivals, one request a row, read as a stream (bounded memory).

A replay file is CSV with a header row, or JSON lines (one object a line), told apart by its
name (``.csv``; ``.jsonl`` or ``.ndjson``). Columns (CSV) or keys (JSON lines):

- the time, exactly one of ``t_s`` (seconds from the trace's start, >= 0) or ``timestamp``
  (absolute: epoch seconds as a number, or ISO-8601 text; a time without a zone is UTC); the
  trace's time 0 is then its first row's time. Times never go back (equal times are allowed).
- ``target`` (optional): the scenario target the request goes to (empty: split by weight);
- ``sample`` (optional): the data-set sample the request starts from (0-based);
- ``batch`` (optional): the request's batch size (>= 1).

Any other column is an error (a typo would otherwise be ignored). ``replay_rows`` yields the rows
one at a time (the file is read in buffered chunks, never whole; a ``pause`` callback lets a
gevent scheduler run other greenlets every ``PAUSE_EVERY`` rows); ``scan_replay`` reads a whole
file once for validation and keeps only what the checks need (counts, bounds, the first line of
each target name: at most ``MAX_TARGET_NAMES``). Every problem is a ``ReplayFileError`` whose
message names the file's line: a row of a wrong type, a line over ``MAX_LINE_CHARS``, bytes that
are not UTF-8, JSON nested too deeply for Python's reader, a whole number of more than
``MAX_NUMBER_DIGITS`` digits. A file that is no regular file (a FIFO, a device, a kernel file) is
refused before it is opened.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple

from inferload.scenario.input_files import not_regular_problem
from inferload.scenario.limits import MAX_NUMBER_DIGITS
from inferload.scenario.messages import describe_value

REPLAY_FORMATS: dict[str, Literal["csv", "jsonl"]] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
TIME_KEYS = ("t_s", "timestamp")
OTHER_KEYS = ("target", "sample", "batch")
ALL_KEYS = (*TIME_KEYS, *OTHER_KEYS)
#: rows read between two calls of a reader's ``pause`` (about 20 ms of reading here)
PAUSE_EVERY = 10_000
#: what a reader calls now and then while it reads (a gevent scheduler: ``gevent.sleep(0)``)
Pause = Callable[[], None]
#: distinct target names a scan keeps (a file naming more is refused: each must be a scenario target)
MAX_TARGET_NAMES = 1_000
#: characters of a line read (a row is a time, a target name and two numbers); a longer line is refused
MAX_LINE_CHARS = 64 * 1024
#: characters that stand for bytes that are not UTF-8 (the reader's ``surrogateescape``)
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class ReplayFileError(ValueError):
    """A replay file that cannot be read as one; the message names the line and what was expected."""


class ReplayRow(NamedTuple):
    """One recorded request: when (seconds from the trace's time 0), and optionally where and what."""

    t_s: float
    target: str | None = None
    sample: int | None = None
    batch: int | None = None


def replay_format(path: Path) -> Literal["csv", "jsonl"]:
    """The file's format from its name; ReplayFileError for any other suffix."""
    kind = REPLAY_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ReplayFileError(f"{path.name}: cannot tell the format from the name; expected a .csv, .jsonl or .ndjson file")
    return kind


def replay_rows(path: Path, pause: Pause | None = None) -> Iterator[tuple[int, ReplayRow]]:
    """(line number, row) of every row of ``path`` in file order, checked as they are read;
    ``pause`` is called every ``PAUSE_EVERY`` rows (a scheduler lets other work run there)."""
    problem = not_regular_problem(path)  # a FIFO would block the open, /dev/zero never end
    if problem is not None:
        raise ReplayFileError(f"cannot open the replay file: {problem}; expected a regular file (CSV or JSON lines)")
    kind = replay_format(path)
    try:
        # utf-8-sig: a spreadsheet's byte order mark is no part of the header; surrogateescape: a byte
        # that is not UTF-8 is named with its line (`_lines`), not by its offset in a buffered chunk
        handle = path.open(newline="" if kind == "csv" else None, encoding="utf-8-sig", errors="surrogateescape")
    except OSError as error:
        raise ReplayFileError(f"{path}: cannot open the replay file: {error.strerror}") from None
    with handle:
        clock = _Clock(path.name)
        lines = _lines(path.name, handle)
        rows = _csv_rows(path.name, lines, clock) if kind == "csv" else _jsonl_rows(path.name, lines, clock)
        if pause is None:
            yield from rows
        else:
            for count, row in enumerate(rows, start=1):
                if count % PAUSE_EVERY == 0:
                    pause()
                yield row
        if clock.previous is None:
            raise ReplayFileError(f"{path.name}: holds no arrivals (expected one row per request)")


def _lines(name: str, handle: Any) -> Iterator[str]:
    """The lines of the text file `handle` (opened with ``surrogateescape``); ReplayFileError naming
    the line for one over `MAX_LINE_CHARS` (never read whole) or holding bytes that are not UTF-8."""
    number = 0
    while text := handle.readline(MAX_LINE_CHARS + 1):
        number += 1
        if len(text) > MAX_LINE_CHARS:
            raise ReplayFileError(f"{name} line {number}: longer than {MAX_LINE_CHARS:,} characters; expected one request a row")
        if not text.isascii() and (bad := _NOT_UTF8.search(text)) is not None:
            raise ReplayFileError(
                f"{name} line {number}: not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02x} at column {bad.start() + 1});"
                " expected a UTF-8 text file"
            )
        yield text


def _csv_rows(name: str, lines: Iterator[str], clock: _Clock) -> Iterator[tuple[int, ReplayRow]]:
    """The CSV rows; the common case (relative times in order, plain fields) checked inline, anything
    else through the same checks as JSON lines (which raise the problem's message)."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise ReplayFileError(f"{name}: is empty; expected a header row naming t_s or timestamp") from None
    except csv.Error as error:
        raise ReplayFileError(f"{name} line 1: {error}") from None
    names = [column.strip() for column in header]
    columns = _columns(name, 1, names)
    relative = "t_s" in columns
    time_at = columns["t_s" if relative else "timestamp"]
    target_at, sample_at, batch_at = (columns.get(key) for key in OTHER_KEYS)
    width = len(names)
    previous, previous_line = -math.inf, 0
    try:
        for row in reader:
            line = reader.line_num
            if len(row) != width:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # a blank line
                raise ReplayFileError(f"{name} line {line}: has {len(row)} fields; the header names {width}")
            text = row[time_at]
            if relative:
                try:
                    t = float(text)
                except ValueError:
                    t = math.nan
                if not 0.0 <= t < math.inf or t < previous:  # nan fails the first test too
                    clock.previous, clock.previous_line = (None if previous_line == 0 else previous), previous_line
                    t = clock.seconds(line, "t_s", text)  # raises the problem
            else:
                t = clock.seconds(line, "timestamp", text)
            previous, previous_line = t, line
            target = None
            if target_at is not None:
                target = row[target_at].strip() or None
            sample = batch = None
            if sample_at is not None and row[sample_at]:
                field_text = row[sample_at]
                sample = int(field_text) if _digits(field_text) else _whole(name, line, "sample", field_text, 0)
            if batch_at is not None and row[batch_at]:
                field_text = row[batch_at]
                batch = (
                    int(field_text) if _digits(field_text) and field_text != "0" else _whole(name, line, "batch", field_text, 1)
                )
            yield line, ReplayRow(t, target, sample, batch)
    except csv.Error as error:
        raise ReplayFileError(f"{name} line {reader.line_num}: {error}") from None
    if relative and previous_line:
        clock.previous, clock.previous_line = previous, previous_line


def _columns(name: str, line: int, keys: list[str]) -> dict[str, int]:
    """Each known key's position; ReplayFileError for unknown or repeated keys, or not one time key."""
    positions: dict[str, int] = {}
    for index, key in enumerate(keys):
        if key not in ALL_KEYS:
            raise ReplayFileError(f"{name} line {line}: unknown column {key!r}; expected {', '.join(ALL_KEYS)}")
        if key in positions:
            raise ReplayFileError(f"{name} line {line}: column {key!r} appears twice")
        positions[key] = index
    times = [key for key in TIME_KEYS if key in positions]
    if len(times) != 1:
        found = "both" if times else "neither"
        raise ReplayFileError(
            f"{name} line {line}: expected one time column, t_s (seconds from the start) or timestamp (absolute); found {found}"
        )
    return positions


class _LongInteger(ValueError):
    """A JSON integer of more than `MAX_NUMBER_DIGITS` digits (raised while a line is decoded)."""


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _LongInteger(text)
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_json_int)


def _jsonl_rows(name: str, lines: Iterator[str], clock: _Clock) -> Iterator[tuple[int, ReplayRow]]:
    time_key: str | None = None
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            entry = _DECODER.decode(text)
        except json.JSONDecodeError as error:
            raise ReplayFileError(f"{name} line {line}: not JSON ({error.msg} at column {error.colno})") from None
        except _LongInteger as error:
            raise ReplayFileError(
                f"{name} line {line}: a whole number of {len(str(error).lstrip('-')):,} digits; expected at most {MAX_NUMBER_DIGITS}"
            ) from None
        except RecursionError:  # json's own depth limit: not a ValueError
            raise ReplayFileError(
                f"{name} line {line}: JSON nested too deeply to read; expected one flat JSON object a line"
            ) from None
        if not isinstance(entry, dict):
            raise ReplayFileError(f"{name} line {line}: expected a JSON object; got {describe_value(entry)}")
        columns = _columns(name, line, list(entry))
        key = "t_s" if "t_s" in columns else "timestamp"
        if time_key is None:
            time_key = key
        elif key != time_key:
            raise ReplayFileError(f"{name} line {line}: has {key}, the lines before have {time_key}; use one of them")
        target, sample, batch = (entry.get(column) for column in OTHER_KEYS)
        yield (
            line,
            ReplayRow(
                clock.seconds(line, key, entry[key]),
                None if target is None else _target(name, line, target),
                None if sample is None else _whole(name, line, "sample", sample, 0),
                None if batch is None else _whole(name, line, "batch", batch, 1),
            ),
        )


def _target(name: str, line: int, value: object) -> str | None:
    if not isinstance(value, str):
        raise ReplayFileError(f"{name} line {line}: target: expected a target name; got {describe_value(value)}")
    text = value.strip()
    return text or None


def _digits(text: str) -> bool:
    """Whether `text` is the ASCII digits of a whole number (at most `MAX_NUMBER_DIGITS` of them)."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_NUMBER_DIGITS


def _whole(name: str, line: int, key: str, value: object, minimum: int) -> int | None:
    """A whole number >= minimum (CSV text or a JSON integer); None for an empty CSV field."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        number: object = int(text) if _digits(text[1:] if text[0] in "+-" else text) else value
    else:
        number = value
    if isinstance(number, bool) or not isinstance(number, int):
        raise ReplayFileError(f"{name} line {line}: {key}: expected a whole number >= {minimum}; got {describe_value(value)}")
    if number < minimum:
        raise ReplayFileError(f"{name} line {line}: {key}: expected a whole number >= {minimum}; got {number}")
    return number


@dataclass
class _Clock:
    """Turns each row's time into seconds from the trace's time 0, checking the order."""

    name: str
    origin: float | None = None  # absolute times: the first row's epoch seconds
    previous: float | None = None
    previous_line: int = 0

    def seconds(self, line: int, key: str, value: object) -> float:
        if key == "t_s":
            t = _number(self.name, line, "t_s", value)
            if t < 0:
                raise ReplayFileError(f"{self.name} line {line}: t_s: expected seconds >= 0; got {t:g}")
        else:
            epoch = _epoch(self.name, line, value)
            if self.origin is None:
                self.origin = epoch
            t = epoch - self.origin
            if not math.isfinite(t):  # two finite times 1e308 apart
                raise ReplayFileError(
                    f"{self.name} line {line}: timestamp: expected a time a finite number of seconds from the first"
                    f" row's; got {describe_value(value)}"
                )
        if self.previous is not None and t < self.previous:
            raise ReplayFileError(
                f"{self.name} line {line}: {key} goes back in time ({_fmt(t)} after the start; line {self.previous_line}"
                f" was at {_fmt(self.previous)}); expected the rows in time order"
            )
        self.previous, self.previous_line = t, line
        return t


def _fmt(seconds: float) -> str:
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"


def _number(name: str, line: int, key: str, value: object) -> float:
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ReplayFileError(
                f"{name} line {line}: {key}: expected a number of seconds; got {describe_value(value)}"
            ) from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ReplayFileError(f"{name} line {line}: {key}: expected a number of seconds; got {describe_value(value)}")
    if not math.isfinite(number):
        raise ReplayFileError(f"{name} line {line}: {key}: expected a finite number; got {describe_value(value)}")
    return number


def _epoch(name: str, line: int, value: object) -> float:
    """Epoch seconds of an absolute timestamp: a number (or numeric text), or ISO-8601 text."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return _number(name, line, "timestamp", text)
        except ReplayFileError:
            pass
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ReplayFileError(
                f"{name} line {line}: timestamp: expected epoch seconds or ISO-8601 text like"
                f" 2025-01-31T12:00:00.250Z; got {describe_value(value)}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    return _number(name, line, "timestamp", value)


@dataclass
class ReplayFacts:
    """What validation needs of a whole replay file, gathered in one pass (bounded: no rows kept)."""

    rows: int = 0
    first_s: float = 0.0
    last_s: float = 0.0
    #: target name -> the first line naming it (at most MAX_TARGET_NAMES names)
    targets: dict[str, int] = field(default_factory=dict)
    #: the first line of a row without a target (None: every row names one)
    untargeted_line: int | None = None
    #: target (None: rows without one) -> (largest sample, its line)
    max_sample: dict[str | None, tuple[int, int]] = field(default_factory=dict)
    #: target (None: rows without one) -> (largest batch, its line)
    max_batch: dict[str | None, tuple[int, int]] = field(default_factory=dict)
    #: target (None: rows without one) -> its smallest batch
    min_batch: dict[str | None, int] = field(default_factory=dict)
    #: rows with t_s in [window_start, window_end) and the first and last such time
    window_rows: int = 0
    window_first_s: float | None = None
    window_last_s: float | None = None


def scan_replay(path: Path, window_start: float = 0.0, window_end: float = math.inf, pause: Pause | None = None) -> ReplayFacts:
    """Read the whole file once (ReplayFileError at its first problem) and keep what the checks need;
    a file unchanged since it was last read (same size and modification time) is not read again."""
    try:
        stat = path.stat()
    except OSError:
        return _scan(path, window_start, window_end, pause)
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, window_start, window_end)
    facts = _SCANNED.get(key)
    if facts is None:
        facts = _scan(path, window_start, window_end, pause)
        _SCANNED[key] = facts
        while len(_SCANNED) > MAX_SCANS_KEPT:
            _SCANNED.pop(next(iter(_SCANNED)))
    return facts


#: the facts of the files last scanned (validation, the start's checks and the law read one file)
MAX_SCANS_KEPT = 8
_SCANNED: dict[tuple[str, int, int, float, float], ReplayFacts] = {}


def _scan(path: Path, window_start: float, window_end: float, pause: Pause | None) -> ReplayFacts:
    """Read the whole file once (ReplayFileError at its first problem) and keep what the checks need."""
    facts = ReplayFacts()
    for line, row in replay_rows(path, pause):
        if facts.rows == 0:
            facts.first_s = row.t_s
        facts.rows += 1
        facts.last_s = row.t_s
        if row.target is None:
            if facts.untargeted_line is None:
                facts.untargeted_line = line
        elif row.target not in facts.targets:
            if len(facts.targets) >= MAX_TARGET_NAMES:
                raise ReplayFileError(
                    f"{path.name} line {line}: names more than {MAX_TARGET_NAMES:,} different targets;"
                    " each must be a target of the scenario"
                )
            facts.targets[row.target] = line
        if row.sample is not None:
            best = facts.max_sample.get(row.target)
            if best is None or row.sample > best[0]:
                facts.max_sample[row.target] = (row.sample, line)
        if row.batch is not None:
            best = facts.max_batch.get(row.target)
            if best is None or row.batch > best[0]:
                facts.max_batch[row.target] = (row.batch, line)
            facts.min_batch[row.target] = min(row.batch, facts.min_batch.get(row.target, row.batch))
        if window_start <= row.t_s < window_end:
            facts.window_rows += 1
            if facts.window_first_s is None:
                facts.window_first_s = row.t_s
            facts.window_last_s = row.t_s
    return facts


def window_period(start_s: float, duration_s: float | None, facts: ReplayFacts) -> float | None:
    """Trace seconds one pass over the played window lasts (what ``loop`` repeats and ``rate`` divides by).

    ``duration`` when given; else from ``start`` to the window's last arrival plus one mean gap
    between its arrivals, so that N arrivals over it have a mean rate of N / period; None for a
    window of fewer than two arrivals without a duration.
    """
    if duration_s is not None:
        return duration_s
    first, last, count = facts.window_first_s, facts.window_last_s, facts.window_rows
    if first is None or last is None or count < 2 or last <= first:
        return None
    return (last - start_s) + (last - first) / (count - 1)
