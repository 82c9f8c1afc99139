"""`inferload trace-to-replay`'s command line: Triton trace files or JSON-lines access logs → a replay file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferload.errors import InferloadError
from inferload.scenario.durations import parse_duration

EXIT_USAGE = 2


def add_trace_to_replay_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "trace-to-replay",
        help="turn Triton's trace files or a JSON-lines access log into a replay file (shape kind: replay),"
        " with the recording's rate over time and burstiness",
    )
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
