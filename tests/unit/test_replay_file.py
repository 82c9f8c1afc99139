"""Replay files read as a stream: both formats, both kinds of time, and every problem at its line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from inferload.scenario.replay_file import (
    MAX_LINE_CHARS,
    ReplayFileError,
    ReplayRow,
    replay_rows,
    scan_replay,
    window_period,
)
from tests.support.scenario_factory import bare_target, key_problems


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def rows(path: Path) -> list[tuple[int, ReplayRow]]:
    return list(replay_rows(path))


def error_of(path: Path) -> str:
    with pytest.raises(ReplayFileError) as caught:
        rows(path)
    return str(caught.value)


def test_csv_rows_with_every_column_and_empty_optional_fields(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "t_s,target,sample,batch\n0,a,3,2\n0.5,,,\n\n0.5,b,0,1\n")
    assert rows(path) == [
        (2, ReplayRow(0.0, "a", 3, 2)),
        (3, ReplayRow(0.5, None, None, None)),
        (5, ReplayRow(0.5, "b", 0, 1)),  # equal times are in order; a blank line is skipped
    ]


def test_json_lines_with_absolute_timestamps_start_at_the_first_row(tmp_path: Path) -> None:
    lines = [
        {"timestamp": "2025-01-31T12:00:00.250Z", "target": "a"},
        {"timestamp": "2025-01-31T12:00:01"},  # no zone: UTC
        {"timestamp": 1738324803.25, "sample": 7},  # epoch seconds
    ]
    path = write(tmp_path, "r.jsonl", "\n".join(json.dumps(line) for line in lines) + "\n")
    assert [(line, row.t_s, row.target, row.sample) for line, row in rows(path)] == [
        (1, 0.0, "a", None),
        (2, 0.75, None, None),
        (3, 3.0, None, 7),
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("r.csv", "t_s\n0.1\n0.3\n0.2\n", "r.csv line 4: t_s goes back in time (0.2s after the start; line 3 was at 0.3s)"),
        ("r.csv", "t_s\n-1\n", "r.csv line 2: t_s: expected seconds >= 0; got -1"),
        ("r.csv", "t_s\nsoon\n", "r.csv line 2: t_s: expected a number of seconds; got 'soon'"),
        ("r.csv", "t_s\nnan\n", "r.csv line 2: t_s: expected a finite number; got 'nan'"),
        ("r.csv", "t_s,smaple\n0,1\n", "r.csv line 1: unknown column 'smaple'; expected t_s, timestamp, target, sample, batch"),
        (
            "r.csv",
            "target\na\n",
            "r.csv line 1: expected one time column, t_s (seconds from the start) or timestamp (absolute); found neither",
        ),
        ("r.csv", "t_s,timestamp\n0,0\n", "found both"),
        ("r.csv", "t_s,t_s\n0,0\n", "r.csv line 1: column 't_s' appears twice"),
        ("r.csv", "t_s,target\n0\n", "r.csv line 2: has 1 fields; the header names 2"),
        ("r.csv", "t_s,sample\n0,-1\n", "r.csv line 2: sample: expected a whole number >= 0; got -1"),
        ("r.csv", "t_s,batch\n0,0\n", "r.csv line 2: batch: expected a whole number >= 1; got 0"),
        ("r.csv", "t_s,batch\n0,1.5\n", "r.csv line 2: batch: expected a whole number >= 1; got '1.5'"),
        ("r.csv", "", "r.csv: is empty; expected a header row naming t_s or timestamp"),
        ("r.csv", "t_s\n", "r.csv: holds no arrivals"),
        ("r.jsonl", '{"t_s": 0}\n[1]\n', "r.jsonl line 2: expected a JSON object; got [1]"),
        ("r.jsonl", '{"t_s": 0}\n{"t_s": 1\n', "r.jsonl line 2: not JSON"),
        ("r.jsonl", '{"t_s": 0}\n{"timestamp": 1}\n', "r.jsonl line 2: has timestamp, the lines before have t_s"),
        ("r.jsonl", '{"t_s": true}\n', "r.jsonl line 1: t_s: expected a number of seconds; got true"),
        ("r.jsonl", '{"t_s": 0, "target": 3}\n', "r.jsonl line 1: target: expected a target name; got 3"),
        ("r.jsonl", '{"timestamp": "yesterday"}\n', "r.jsonl line 1: timestamp: expected epoch seconds or ISO-8601 text"),
        ("r.txt", "t_s\n0\n", "r.txt: cannot tell the format from the name; expected a .csv, .jsonl or .ndjson file"),
        # what Python's own readers raise on: digits past int()'s limit, nesting past json's, a float
        # out of int's or float's range, text that int() refuses after isdigit() said yes
        (
            "r.jsonl",
            '{"t_s": 0}\n{"t_s": ' + "9" * 5000 + "}\n",
            "r.jsonl line 2: a whole number of 5,000 digits; expected at most 40",
        ),
        (
            "r.jsonl",
            '{"t_s": 0, "sample": ' + "9" * 4000 + "}\n",
            "r.jsonl line 1: a whole number of 4,000 digits; expected at most 40",
        ),
        ("r.jsonl", '{"t_s": ' + "[" * 30_000 + "]" * 30_000 + "}\n", "r.jsonl line 1: JSON nested too deeply to read"),
        (
            "r.jsonl",
            '{"timestamp": -1e308}\n{"timestamp": 1e308}\n',
            "r.jsonl line 2: timestamp: expected a time a finite number of seconds from the first row's; got 1e+308",
        ),
        ("r.csv", "t_s,sample\n0," + "9" * 5000 + "\n", "r.csv line 2: sample: expected a whole number >= 0; got '9999"),
        ("r.csv", "t_s,batch\n0,\u00b2\n", "r.csv line 2: batch: expected a whole number >= 1; got '\u00b2'"),
        ("r.csv", "t_s,sample\n0,+-5\n", "r.csv line 2: sample: expected a whole number >= 0; got '+-5'"),
        # a line is read up to a bound, never whole
        ("r.csv", "t_s\n0\n" + "1" * (MAX_LINE_CHARS + 1) + "\n", f"r.csv line 3: longer than {MAX_LINE_CHARS:,} characters"),
        ("r.jsonl", '{"t_s": 0, "target": "' + "a" * MAX_LINE_CHARS + '"}\n', "r.jsonl line 1: longer than"),
    ],
)
def test_every_problem_names_the_line_and_what_was_expected(tmp_path: Path, name: str, text: str, message: str) -> None:
    assert message in error_of(write(tmp_path, name, text))


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    assert "cannot open the replay file" in error_of(tmp_path / "gone.csv")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "r.csv",
            b"t_s,target\n0,a\n1,\xe9\n",
            "r.csv line 3: not UTF-8 text (byte 0xe9 at column 3); expected a UTF-8 text file",
        ),
        ("r.jsonl", b'{"t_s": 0}\n{"t_s": 1, "target": "\xff"}\n', "r.jsonl line 2: not UTF-8 text (byte 0xff at column 23)"),
    ],
)
def test_bytes_that_are_not_utf8_are_named_by_their_line(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert message in error_of(path)


def test_a_byte_order_mark_is_no_part_of_the_header(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_bytes(b"\xef\xbb\xbft_s,target\n0,a\n")  # what a spreadsheet saves as "CSV UTF-8"
    assert rows(path) == [(2, ReplayRow(0.0, "a", None, None))]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (os.mkfifo, "is not a regular file: it is a named pipe (FIFO)"),
        (Path.mkdir, "is not a regular file: it is a folder"),
        (lambda path: path.symlink_to("/dev/zero"), "is not a regular file: it is a kernel file (/dev/zero)"),
    ],
)
def test_a_replay_file_that_is_no_regular_file_is_refused_unread(
    tmp_path: Path, alarm: None, make: Callable[[Path], None], message: str
) -> None:
    make(tmp_path / "r.csv")
    assert error_of(tmp_path / "r.csv") == (
        f"cannot open the replay file: {tmp_path / 'r.csv'} {message}; expected a regular file (CSV or JSON lines)"
    )


def replay_scenario(file: str) -> dict[str, object]:
    target = bare_target("a", "triton-grpc", "127.0.0.1:8001")
    return {"name": "k", "duration": "10s", "targets": [target], "shape": {"kind": "replay", "file": file}}


def test_validate_names_shape_file_and_the_line(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text('{"t_s": 0}\n{"t_s": ' + "9" * 5000 + "}\n")
    assert key_problems(tmp_path, replay_scenario("trace.jsonl")) == [
        ("shape.file", "trace.jsonl line 2: a whole number of 5,000 digits; expected at most 40")
    ]


def test_validate_refuses_a_kernel_file_named_as_the_replay_unread(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").symlink_to("/proc/self/status")  # a "regular" file to is_file()
    [(key, message)] = key_problems(tmp_path, replay_scenario("trace.csv"))
    assert key == "shape.file"  # the shape holds the file's resolved path
    assert message.startswith("cannot open the replay file: /proc/") and "is not a regular file: it is a kernel file" in message


def test_a_scan_keeps_the_window_bounds_and_the_first_line_of_each_target(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "t_s,target,sample,batch\n0,a,1,\n1,b,9,4\n2,,5,\n3,a,2,8\n4,b,,\n")
    facts = scan_replay(path, 1.0, 3.5)
    assert (facts.rows, facts.first_s, facts.last_s) == (5, 0.0, 4.0)
    assert facts.targets == {"a": 2, "b": 3} and facts.untargeted_line == 4
    assert facts.max_sample == {"a": (2, 5), "b": (9, 3), None: (5, 4)}
    assert facts.max_batch == {"b": (4, 3), "a": (8, 5)}
    assert (facts.window_rows, facts.window_first_s, facts.window_last_s) == (3, 1.0, 3.0)


def test_the_window_period_gives_its_arrivals_their_mean_rate(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "t_s\n" + "".join(f"{k * 0.1:.1f}\n" for k in range(11)))  # 0.0 .. 1.0
    facts = scan_replay(path)
    period = window_period(0.0, None, facts)
    assert period is not None and period == pytest.approx(1.1)  # the span plus one mean gap: a loop keeps the spacing
    assert facts.window_rows / period == pytest.approx(10.0)
    assert window_period(0.0, 5.0, facts) == 5.0
    one = scan_replay(write(tmp_path, "one.csv", "t_s\n0.3\n"))
    assert window_period(0.0, None, one) is None
