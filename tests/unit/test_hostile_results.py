"""Results folders that are not what a run writes: `inferload report`, `report --from/--to` and
`compare` each say one line, ``inferload <command>: <file>: <what was wrong; what was expected>``, and
exit 2; never a traceback, never a wait on a FIFO, never a read of /dev/zero."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferload.measure.hdr import LatencyStats
from inferload.results.compare import main_compare
from inferload.results.files import MAX_JSON_BYTES, read_windows
from inferload.results.histograms import MAX_LINE_BYTES, main_range
from inferload.results.repeats import summarise_repeats
from inferload.results.report import main_report

STARTED = "2026-11-30T06:00:00+00:00"
START_S = 1796018400.0  # STARTED in Unix seconds

SUMMARY: dict[str, Any] = {
    "run_id": "hostile",
    "scenario": "hostile",
    "started_at": STARTED,
    "duration_s": 25.0,
    "warmup_s": 5.0,
    "workers": 1,
    "targets": {
        "t": {
            "server": "triton",
            "protocol": "grpc",
            "model": "cnn",
            "requests": 10,
            "failures": 0,
            "error_rate": 0.0,
            "throughput_rps": 0.5,
            "latency_ms": {"mean": 2.0, "p50": 2.0, "p90": 3.0, "p95": 3.0, "p99": 3.0, "p999": 3.0, "max": 3.0},
            "server_side": None,
            "cold_start_s": None,
        }
    },
    "slo": {"passed": True, "checks": []},
}


def window_line(**changes: Any) -> dict[str, Any]:
    stats = LatencyStats()
    for latency_ms in (1.0, 2.0, 3.0):
        stats.record_success(latency_ms)
    return {"start": START_S + 5, "window_s": 5.0, "target": "t", "worker": "all", **stats.to_wire(), **changes}


def results_folder(folder: Path, summary: str | bytes | None = None, histograms: str | bytes | None = None) -> Path:
    """A results folder whose summary.json and histograms.jsonl hold `summary` and `histograms` (a
    run's own when None)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (
        ("summary.json", json.dumps(SUMMARY) if summary is None else summary),
        ("histograms.jsonl", json.dumps(window_line()) + "\n" if histograms is None else histograms),
    ):
        (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return folder


def with_value(path: str, raw: str) -> str:
    """SUMMARY as JSON text with the value at the dotted `path` written as `raw` (any JSON text)."""
    data = json.loads(json.dumps(SUMMARY))
    *parents, key = path.split(".")
    holder = data
    for part in parents:
        holder = holder[part]
    holder[key] = "@@VALUE@@"
    return json.dumps(data).replace('"@@VALUE@@"', raw)


def one_line(capsys: pytest.CaptureFixture[str], code: int, command: str) -> str:
    """The one line the command said on stderr, having exited 2 and printed nothing else."""
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"inferload {command}: "), err
    return lines[0]


#: each command on a results folder, and the name it says its errors with
COMMANDS: dict[str, tuple[str, Callable[[Path, Path], int]]] = {
    "report": ("report", lambda good, folder: main_report(folder)),
    "report --from --to": ("report", lambda good, folder: main_range(folder, "0", "20", None, False)),
    "compare": ("compare", lambda good, folder: main_compare(good, folder, False)),
}

#: a file that is not a regular file: how to make it, and what the line says
NOT_REGULAR: dict[str, tuple[Callable[[Path], None], str]] = {
    "a FIFO": (os.mkfifo, "is not a regular file: it is a named pipe (FIFO)"),
    "a folder": (Path.mkdir, "is not a regular file: it is a folder"),
    "a link to /dev/zero": (lambda path: path.symlink_to("/dev/zero"), "is not a regular file: it is a kernel file (/dev/zero)"),
}


@pytest.mark.parametrize("kind", NOT_REGULAR)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_summary_that_is_no_regular_file_is_refused_unread_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None, kind: str, command: str
) -> None:
    good = results_folder(tmp_path / "good")
    folder = results_folder(tmp_path / "hostile")
    (folder / "summary.json").unlink()
    make, expected = NOT_REGULAR[kind]
    make(folder / "summary.json")
    name, main = COMMANDS[command]
    line = one_line(capsys, main(good, folder), name)
    assert line.startswith(f"inferload {name}: {folder / 'summary.json'} {expected}; expected a run's summary.json")


def test_a_folder_where_report_html_goes_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = results_folder(tmp_path / "run")
    (folder / "report.html").mkdir()
    line = one_line(capsys, main_report(folder), "report")
    assert line == f"inferload report: cannot write {folder / 'report.html'}: Is a directory"
    assert sorted(path.name for path in folder.iterdir() if path.name.startswith(".")) == []  # no temporary file left


def test_a_summary_over_the_size_bound_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = results_folder(tmp_path / "run")
    with open(folder / "summary.json", "r+b") as handle:
        handle.truncate(MAX_JSON_BYTES + 1)  # sparse: nothing is written, and nothing may be read
    line = one_line(capsys, main_report(folder), "report")
    assert f"summary.json is {MAX_JSON_BYTES + 1:,} bytes; at most {MAX_JSON_BYTES:,} are read" in line


DIGITS_5000 = "9" * 5000

#: summary.json text -> what the line says after the file's path
BAD_SUMMARIES: dict[str, tuple[str | bytes, str]] = {
    "not UTF-8": (
        json.dumps(SUMMARY).replace("hostile", "h\xe9").encode("latin-1"),
        "not UTF-8 text (invalid continuation byte at byte 13)",
    ),
    "nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read; expected a run's summary.json"),
    "NaN": (with_value("duration_s", "NaN"), "duration_s: expected a finite number of at most 40 digits; got NaN"),
    "Infinity": (
        with_value("targets.t.latency_ms.p99", "-Infinity"),
        "targets.t.latency_ms.p99: expected a finite number of at most 40 digits; got -Infinity",
    ),
    "a number of 5,000 digits (over Python's limit)": (
        with_value("targets.t.requests", DIGITS_5000),
        "targets.t.requests: expected a finite number of at most 40 digits; got a number of 5,000 characters (999999999999...)",
    ),
    "a number of 4,000 digits (no float holds it)": (
        with_value("targets.t.latency_ms.max", "9" * 4000),
        "targets.t.latency_ms.max: expected a finite number of at most 40 digits; got a number of 4,000 characters",
    ),
    "a float that overflows": (
        with_value("targets.t.latency_ms.mean", "1e999"),
        "targets.t.latency_ms.mean: expected a finite number of at most 40 digits; got 1e999",
    ),
    "a tail group that is a string": (
        with_value("targets.t.tail", '{"available": true, "above_p99": "x"}'),
        "targets.t.tail.above_p99: expected an object or null; got str 'x'",
    ),
    "a tail's medians that are a list": (
        with_value("targets.t.tail", '{"available": true, "around_p50": {"median_ms": []}}'),
        "targets.t.tail.around_p50.median_ms: expected an object; got list",
    ),
    "a residual histogram count that is text": (
        with_value("targets.t.tail", '{"available": true, "residual_ms": {"n": 1, "histogram": {"counts": ["1"]}}}'),
        "targets.t.tail.residual_ms.histogram.counts[0]: expected a number; got str '1'",
    ),
}


@pytest.mark.parametrize("case", BAD_SUMMARIES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_summary_that_is_not_a_run_s_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, command: str
) -> None:
    text, expected = BAD_SUMMARIES[case]
    good = results_folder(tmp_path / "good")
    folder = results_folder(tmp_path / "hostile", summary=text)
    name, main = COMMANDS[command]
    line = one_line(capsys, main(good, folder), name)
    assert line.startswith(f"inferload {name}: {folder / 'summary.json'}: {expected}")


def test_a_range_over_a_run_whose_start_is_no_time_names_started_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = results_folder(tmp_path / "run", summary=with_value("started_at", '"yesterday"'))
    line = one_line(capsys, main_range(folder, "0", "20", None, False), "report")
    assert line == (
        f"inferload report: {folder / 'summary.json'}: started_at: expected an ISO-8601 time (--from and --to count"
        " from it); got 'yesterday'"
    )


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_histograms_that_are_no_regular_file_are_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None, kind: str
) -> None:
    folder = results_folder(tmp_path / "run")
    (folder / "histograms.jsonl").unlink()
    make, expected = NOT_REGULAR[kind]
    make(folder / "histograms.jsonl")
    line = one_line(capsys, main_range(folder, "0", "20", None, False), "report")
    assert line.startswith(f"inferload report: {folder / 'histograms.jsonl'} {expected}; expected one window's histogram a line")


#: histograms.jsonl text -> what the line says after 'histograms.jsonl line N: '
BAD_HISTOGRAMS: dict[str, tuple[str | bytes, str]] = {
    "a line over the bound": (
        json.dumps(window_line()) + "\n" + " " * (MAX_LINE_BYTES + 1),
        f"line 2: longer than {MAX_LINE_BYTES:,} bytes",
    ),
    "not UTF-8": (b'{"target": "\xff"}\n', "line 1: not UTF-8 text (invalid start byte at byte 12)"),
    "not JSON": ('{"start": }\n', "line 1: not valid JSON: Expecting value at column 11"),
    "nested 30,000 deep": ("[" * 30_000 + "]" * 30_000 + "\n", "line 1: JSON nested too deeply to read"),
    "a list": ("[]\n", "line 1: expected an object; got list"),
    "a worker that is an object": (json.dumps(window_line(worker={})) + "\n", "line 1: worker: expected a string; got dict"),
    "a start that is NaN": (
        json.dumps(window_line(start=float("nan"))) + "\n",
        "line 1: start: expected a finite number of at most 40 digits; got NaN",
    ),
    "a count of 5,000 digits": (
        json.dumps(window_line()).replace('"s": 3', f'"s": {DIGITS_5000}') + "\n",
        "line 1: s: expected a finite number of at most 40 digits; got a number of 5,000 characters",
    ),
    "a missing count": (
        json.dumps({k: v for k, v in window_line().items() if k != "f"}) + "\n",
        "line 1: f: missing; expected a number",
    ),
}


@pytest.mark.parametrize("case", BAD_HISTOGRAMS)
def test_a_histogram_line_that_is_not_a_run_s_is_one_line_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, expected = BAD_HISTOGRAMS[case]
    folder = results_folder(tmp_path / "run", histograms=text)
    line = one_line(capsys, main_range(folder, "0", "20", None, False), "report")
    assert line.startswith(f"inferload report: {folder / 'histograms.jsonl'} {expected}")


def test_a_histogram_that_does_not_decode_names_its_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = results_folder(tmp_path / "run", histograms=json.dumps(window_line(h="!!not base64")) + "\n")
    line = one_line(capsys, main_range(folder, "0", "20", None, False), "report")
    assert line.startswith(
        f"inferload report: histograms.jsonl: target 't', worker 'all', window at {START_S + 5:g}: h: not a histogram inferload writes"
    )
    assert line.endswith("expected HdrHistogram's base64 encoding of latencies from 1 µs to 1 h")


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_windows_csv_that_is_no_regular_file_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None, kind: str
) -> None:
    good = results_folder(tmp_path / "good")
    folder = results_folder(tmp_path / "run")
    make, expected = NOT_REGULAR[kind]
    make(folder / "windows.csv")
    line = one_line(capsys, main_report(folder), "report")
    assert line == f"inferload report: {folder / 'windows.csv'} {expected}; expected the windows.csv a run writes"
    line = one_line(capsys, main_compare(good, folder, False, ["p99:+10%"]), "compare")  # the gate reads its windows
    assert line == f"inferload compare: {folder / 'windows.csv'} {expected}; expected the windows.csv a run writes"


def repeated_run(folder: Path) -> Path:
    """A repeated run's folder: two repetitions of SUMMARY and their repeat.json."""
    repetitions = [results_folder(folder / f"repeat-0{index}") for index in (1, 2)]
    (folder / "repeat.json").write_text(json.dumps(summarise_repeats(repetitions)))
    return folder


#: repeat.json text (None: a FIFO) -> what the line says after the file's path
BAD_REPEATS: dict[str, tuple[str | None, str]] = {
    "a FIFO": (None, " is not a regular file: it is a named pipe (FIFO); expected the repeat.json of `inferload run --repeat N`"),
    "nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, ": JSON nested too deeply to read"),
    "a figure that is a number": ('{"targets": {"t": {"p99": 5}}}', ": targets.t.p99: expected an object; got int 5"),
    "values that are text": (
        '{"targets": {"t": {"p99": {"values": "1, 2", "mean": 1.5}}}}',
        ": targets.t.p99.values: expected a list of numbers; got str '1, 2'",
    ),
    "a value that is NaN": (
        '{"targets": {"t": {"p99": {"values": [NaN, 1.0], "mean": 1.0}}}}',
        ": targets.t.p99.values[0]: expected a finite number of at most 40 digits; got NaN",
    ),
    "no targets": ('{"repeats": []}', ": targets: missing; expected an object"),
}


@pytest.mark.parametrize("case", BAD_REPEATS)
def test_a_repeat_json_that_is_not_a_run_s_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None, case: str
) -> None:
    text, expected = BAD_REPEATS[case]
    good = repeated_run(tmp_path / "good")
    folder = repeated_run(tmp_path / "hostile")
    (folder / "repeat.json").unlink()
    if text is None:
        os.mkfifo(folder / "repeat.json")
    else:
        (folder / "repeat.json").write_text(text)
    line = one_line(capsys, main_compare(good, folder, False, ["p99:+10%"]), "compare")
    assert line.startswith(f"inferload compare: {folder / 'repeat.json'}{expected}")


def test_a_run_s_own_files_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = results_folder(tmp_path / "good")
    assert main_range(good, "0", "20", None, False) == 0
    assert "3 requests, 0 failed" in capsys.readouterr().out
    assert main_compare(repeated_run(tmp_path / "a"), repeated_run(tmp_path / "b"), False, ["p99:+10%"]) == 0


def windows_csv(folder: Path, rows: list[tuple[str, str, str]]) -> None:
    """windows.csv of target t: one steady window a second with these (p99_ms, requests, failures)."""
    lines = [f"t,{second},steady,{p99},{requests},{failures}" for second, (p99, requests, failures) in enumerate(rows)]
    (folder / "windows.csv").write_text("target,elapsed_s,phase,p99_ms,requests,failures\n" + "\n".join(lines) + "\n")


def test_window_figures_out_of_range_are_left_out_so_the_gate_does_not_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = results_folder(tmp_path / "good")
    windows_csv(good, [("3", "10", "0"), ("3.1", "10", "1"), ("2.9", "10", "0"), ("3", "10", "0")])
    folder = results_folder(tmp_path / "hostile")
    # p99s a float holds but whose variance it does not; a request count that makes the error rate 1e300
    windows_csv(folder, [("1e300", "10", "0"), ("-1e300", "10", "0"), ("3", "1e-300", "1"), ("3", "10", "0"), ("3", "10", "0")])
    code = main_compare(good, folder, False, ["p99:+10%", "error_rate:+1%"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and "regression gate" in out
    assert read_windows(folder / "windows.csv").notes == ["windows.csv line 4: requests: not a whole number >= 0; row skipped."]


def test_report_html_writes_no_control_character_of_a_name() -> None:
    """A target named with terminal escapes (ESC, BEL) is shown with U+FFFD in report.html, as compare escapes it."""
    from inferload.results.report import _esc

    assert _esc("fast\x1b[31m<b>\x07") == "fast\ufffd[31m&lt;b&gt;\ufffd"
    assert _esc("tab\tand\nnewline") == "tab\tand\nnewline"
