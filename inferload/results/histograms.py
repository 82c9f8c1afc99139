"""Every window's HDR histogram, kept in the results folder (histograms.jsonl), and exact percentiles
over any time range and any subset of workers recomputed from them (`inferload report --from --to`).

Per-window p99s cannot be averaged into the p99 of a longer span or of several workers; histograms
can be merged exactly. One JSON line per window per target per series: `worker` is "all" (every
worker merged, as in windows.csv) or a worker's id (distributed runs, as in requests.csv's `worker`
column), `start` the window's start (Unix seconds), `window_s` its length, then the histogram as
`inferload.measure.hdr` sends it between processes (`h`: HdrHistogram's compressed V2 encoding in
base64; `s`, `f`: successes, failures; `sum`, `min`, `max` in ms; a generative target whose
`generation.goodput` judged requests in the window, on the merged line: `good` and `judged`, its
requests that met every threshold and those judged). A range takes the windows that lie
wholly inside it, so its bounds are rounded inwards to whole windows and the covered span is reported.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hdrh.codec import HdrCookieException, HdrHistogramSettingsException, HdrLengthException
from pydantic import BaseModel, ConfigDict

from inferload.measure.hdr import LatencyStats, WindowStats
from inferload.paths import replacing
from inferload.results.files import ResultsError, model_problem, parse_json, present, started_epoch, summary_file, utf8_text
from inferload.results.schema import Count, Number

if TYPE_CHECKING:  # a type only: `inferload report` does not need Locust and gevent
    from inferload.measure.run_record import RunRecord

HISTOGRAMS_NAME = "histograms.jsonl"
ALL = "all"
#: the longest line of histograms.jsonl read: a window's whole histogram (1 µs .. 1 h, every counter
#: used) encodes to some 30 KB; a longer line is refused, never read whole
MAX_LINE_BYTES = 256 * 1024
#: what a line is, in messages
LINE_EXPECTED = "one window's histogram a line, as a run writes histograms.jsonl"
#: what decoding an `h` that is no HdrHistogram encoding raises (hdrh's own, base64's, zlib's, ctypes')
HDR_DECODE_ERRORS = (
    ValueError,
    TypeError,
    IndexError,
    OverflowError,
    zlib.error,
    HdrCookieException,
    HdrLengthException,
    HdrHistogramSettingsException,
)


class HistogramLine(BaseModel):
    """One line of histograms.jsonl, checked on reading (the line itself is what readers get)."""

    model_config = ConfigDict(strict=True, extra="allow")

    start: Number
    window_s: Number
    target: str
    worker: str
    h: str
    s: Count
    f: Count
    sum: Number
    max: Number
    min: Number = 0


def histogram_lines(record: RunRecord) -> Iterator[dict[str, Any]]:
    """Every window of every target (merged, then each worker's), oldest first."""
    series: list[tuple[int, str, str, WindowStats]] = [
        (index, target, ALL, stats) for (index, target), stats in record.windows.items()
    ]
    series += [(index, target, worker, stats) for (index, target, worker), stats in record.worker_windows.items()]
    for index, target, worker, stats in sorted(series, key=lambda item: (item[0], item[1], item[2] != ALL, item[2])):
        line = {
            "start": index * record.window_s,
            "window_s": record.window_s,
            "target": target,
            "worker": worker,
            **stats.to_wire(),
        }
        counts = record.generations.count_windows.get((index, target)) if worker == ALL else None
        if counts is not None and counts[3]:  # [generations, tokens, good, judged]
            line["good"], line["judged"] = counts[2], counts[3]
        yield line


def write_histograms(results_dir: Path, record: RunRecord) -> Path:
    path = results_dir / HISTOGRAMS_NAME
    with replacing(path) as handle:  # whole or not at all
        for line in histogram_lines(record):
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path


@dataclass
class RangeFigures:
    """Exact figures of one target over a range, from the merged window histograms."""

    target: str
    workers: list[str]
    first_start: float | None  # the covered span: the first window's start ...
    last_end: float | None  # ... and the last one's end (Unix seconds)
    windows: int
    stats: LatencyStats

    def as_dict(self) -> dict[str, Any]:
        figures = self.stats.latency_ms()
        return {
            "target": self.target,
            "workers": self.workers,
            "from": self.first_start,
            "to": self.last_end,
            "windows": self.windows,
            "requests": self.stats.requests,
            "failures": self.stats.failures,
            "latency_ms": figures,
        }


def read_lines(results_dir: Path) -> Iterator[dict[str, Any]]:
    """Every line of the folder's histograms.jsonl in file order, each checked (`HistogramLine`) as it
    is read; ResultsError naming the file (and line) at the first problem: absent, no regular file, a
    line over `MAX_LINE_BYTES`, not UTF-8, not JSON (`parse_json`), or a key missing or of a wrong type."""
    path = results_dir / HISTOGRAMS_NAME
    if not present(path, LINE_EXPECTED):
        raise ResultsError(f"{path}: not found (runs before this version kept no histograms)")
    with open(path, "rb") as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            where = f"{path} line {number}"
            if len(raw) > MAX_LINE_BYTES:
                raise ResultsError(f"{where}: longer than {MAX_LINE_BYTES:,} bytes; expected {LINE_EXPECTED}")
            if not raw.strip():
                continue
            line = parse_json(utf8_text(raw, where, LINE_EXPECTED), where, LINE_EXPECTED, one_line=True)
            problem = model_problem(HistogramLine, line)
            if problem is not None:
                raise ResultsError(f"{where}: {problem}")
            yield line


def merge_window(into: LatencyStats, line: dict[str, Any], source: str) -> None:
    """Add a checked line's histogram and totals to `into`; ResultsError naming `source` and the window
    when its `h` is no HdrHistogram encoding (base64 of the compressed V2 encoding) of latencies up to 1 h."""
    try:
        into.merge(LatencyStats.from_wire(line))
    except HDR_DECODE_ERRORS as error:
        raise ResultsError(
            f"{source}: target {line['target']!r}, worker {line['worker']!r}, window at {line['start']:g}: h:"
            f" not a histogram inferload writes ({type(error).__name__}: {error}); expected HdrHistogram's"
            " base64 encoding of latencies from 1 µs to 1 h"
        ) from None


def range_figures(
    results_dir: Path, t_from: float | None, t_to: float | None, workers: list[str] | None, run_start: float = 0.0
) -> list[RangeFigures]:
    """Per target, the windows wholly inside [t_from, t_to) of the chosen series, merged."""
    return merge_range(read_lines(results_dir), t_from, t_to, workers, HISTOGRAMS_NAME, run_start)


def merge_range(
    lines: Iterable[dict[str, Any]],
    t_from: float | None,
    t_to: float | None,
    workers: list[str] | None,
    source: str,
    run_start: float = 0.0,
) -> list[RangeFigures]:
    """`range_figures` over histogram lines from any place (`source` names it in errors; the
    InfluxDB `latency_histograms` points read back as lines: inferload/observe/influx_range.py).
    ResultsError when no whole window of the chosen workers lies in the range: it says where the
    windows `source` gave lie, in seconds after ``run_start`` (Unix seconds)."""
    if t_from is not None and t_to is not None and t_to <= t_from:
        raise ResultsError(f"--to must be after --from; the range given ends {t_from - t_to:g} s before it starts")
    wanted = set(workers) if workers else {ALL}
    found: dict[str, RangeFigures] = {}
    seen_workers: set[str] = set()
    given: list[tuple[float, float]] = []  # (start, end) of every window of the chosen workers
    for line in lines:
        seen_workers.add(line["worker"])
        start, length = float(line["start"]), float(line["window_s"])
        if line["worker"] not in wanted:
            continue
        given.append((start, start + length))
        if (t_from is not None and start < t_from - 1e-6) or (t_to is not None and start + length > t_to + 1e-6):
            continue
        figures = found.setdefault(line["target"], RangeFigures(line["target"], sorted(wanted), None, None, 0, LatencyStats()))
        merge_window(figures.stats, line, source)
        figures.windows += 1
        figures.first_start = start if figures.first_start is None else min(figures.first_start, start)
        figures.last_end = start + length if figures.last_end is None else max(figures.last_end, start + length)
    unknown = wanted - seen_workers
    if unknown:
        raise ResultsError(
            f"--workers: {', '.join(sorted(unknown))} not in {source}; it has {', '.join(sorted(seen_workers)) or 'none'}"
        )
    if not found:  # nothing to report is no answer: say where the windows are
        first, last = min(start for start, _ in given) - run_start, max(end for _, end in given) - run_start
        lengths = sorted({round(end - start, 6) for start, end in given})
        raise ResultsError(
            f"--from/--to: no whole window lies in that range; {source} gave windows from {seconds(first)} to {seconds(last)}"
            f" after the run's start, {' or '.join(f'{length:g}' for length in lengths)} s each"
        )
    return list(found.values())


def parse_time(option: str, text: str | None, run_start: float) -> float | None:
    """Seconds since the run's start (`30`, `30s`) or an ISO-8601 time, as Unix seconds."""
    if text is None:
        return None
    from datetime import datetime

    try:
        seconds = float(text.removesuffix("s"))
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ResultsError(f"{option}: expected a finite number of seconds; got {text!r}")
        return run_start + seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ResultsError(
            f"{option}: expected seconds since the run's start (e.g. 30) or an ISO-8601 time; got {text!r}"
        ) from None


def main_range(results_dir: Path, t_from: str | None, t_to: str | None, workers: str | None, as_json: bool) -> int:
    """`inferload report DIR --from T --to T [--workers W,...]`: exact percentiles over the range."""
    import sys

    from inferload.results.files import read_summary

    try:
        summary = read_summary(results_dir)
        start = started_epoch(summary)
        if start is None:
            raise ResultsError(
                f"{summary_file(Path(results_dir))}: started_at: expected an ISO-8601 time (--from and --to count"
                f" from it); got {summary.started_at[:60]!r}"
            )
        chosen = [w.strip() for w in workers.split(",") if w.strip()] if workers else None
        t_begin, t_end = parse_time("--from", t_from, start), parse_time("--to", t_to, start)
        results = range_figures(results_dir, t_begin, t_end, chosen, start)
    except ResultsError as error:
        print(f"inferload report: {error}", file=sys.stderr)
        return 2
    return print_range(results, start, as_json)


def seconds(value: float) -> str:
    """A time after the run's start as the range's lines print it: to the millisecond, "-0" as "0"."""
    return f"{round(value, 3) + 0.0:g} s"


def print_range(results: list[RangeFigures], start: float, as_json: bool) -> int:
    """The range's figures per target, as text (times after `start`, the run's start) or JSON."""
    if as_json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
        return 0
    for result in results:
        figures = result.stats.latency_ms()
        span = (
            "-"
            if result.first_start is None
            else f"{seconds(result.first_start - start)} .. {seconds((result.last_end or 0) - start)}"
        )
        cells = ", ".join(f"{k} {v:.3f}" for k, v in figures.items() if v is not None)
        print(f"{result.target} [{'+'.join(result.workers)}], {span} after the start ({result.windows} windows):")
        print(f"  {result.stats.requests} requests, {result.stats.failures} failed; ms: {cells or 'n/a'}")
    return 0
