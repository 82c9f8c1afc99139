"""`inferload trace-to-replay` on a saved capture of a real Triton's trace file and on access logs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from inferload.cli import main
from inferload.observe import recording
from inferload.scenario.replay_file import replay_rows
from inferload.servermetrics.triton_trace import json_entries, parse_traces

CAPTURE = Path(__file__).resolve().parents[1] / "captures" / "triton_trace_tail_queue.json"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["trace-to-replay", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_triton_trace_becomes_one_arrival_per_request_at_its_grpc_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.json"
    shutil.copy(CAPTURE, tmp_path / "trace.json.0")  # what a run with log_frequency writes: PATH.<k>
    code, out, err = run(capsys, str(trace), "--out", str(tmp_path / "replay.csv"))
    assert code == 0, err
    reads = sorted(t.timestamps["GRPC_WAITREAD_END"] for t in parse_traces(json_entries(CAPTURE.read_text())))
    rows = [row for _, row in replay_rows(tmp_path / "replay.csv")]
    assert [row.t_s for row in rows] == pytest.approx([(ns - reads[0]) / 1e9 for ns in reads], abs=1e-6)
    assert all(row.target is None for row in rows)  # one model, no mapping: no target column
    assert (tmp_path / "replay.csv").read_text().startswith("t_s\n0.000000\n")
    summary = json.loads((tmp_path / "replay.summary.json").read_text())
    assert summary["arrivals"] == len(reads) == 40 and summary["files"] == 1
    assert sum(summary["window_counts"]) == 40 and summary["burstiness_cv"] > 0
    assert "40 arrivals from 1 file(s)" in out and "burstiness (CV of the gaps between arrivals)" in out


def test_models_map_to_targets_and_unmapped_ones_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = json.loads(CAPTURE.read_text())
    for entry in entries:  # the even requests as another model's
        if "model_name" in entry and entry["id"] % 2 == 0:
            entry["model_name"] = "other"
    (tmp_path / "t.json").write_text(json.dumps(entries))
    code, out, err = run(capsys, str(tmp_path / "t.json"), "--out", str(tmp_path / "r.csv"), "--target", "tail_queue=cnn")
    assert code == 0, err
    rows = [row for _, row in replay_rows(tmp_path / "r.csv")]
    assert len(rows) == 20 and {row.target for row in rows} == {"cnn"}
    assert "20 left out: 20 model 'other' not mapped by --target" in out
    code, _, _ = run(capsys, str(tmp_path / "t.json"), "--out", str(tmp_path / "both.csv"))
    assert code == 0 and {row.target for _, row in replay_rows(tmp_path / "both.csv")} == {"tail_queue", "other"}


def test_a_json_lines_access_log_with_iso_times_and_a_model_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "access.log"
    lines = [
        {"start_time": "2025-01-31T12:00:00.500Z", "upstream": {"model": "a"}},
        {"start_time": "2025-01-31T12:00:00.000Z", "upstream": {"model": "b"}},  # out of order: sorted
        {"start_time": "2025-01-31T12:00:02.000Z", "upstream": {"model": "a"}},
    ]
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    args = ["--time-field", "start_time", "--target-field", "upstream.model", "--out", str(tmp_path / "r.csv")]
    code, out, err = run(capsys, str(log), *args)
    assert code == 0, err
    assert [(row.t_s, row.target) for _, row in replay_rows(tmp_path / "r.csv")] == [(0.0, "b"), (0.5, "a"), (2.0, "a")]
    assert "span 2.000 s" in out


def test_epoch_milliseconds_and_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "ms.jsonl"
    log.write_text('{"ts": 1000}\n{"ts": "1250"}\nnot json\n{"other": 1}\n')
    out_csv = str(tmp_path / "r.csv")
    code, _, err = run(capsys, str(log), "--time-field", "ts", "--time-unit", "ms", "--out", out_csv)
    assert code == 2 and f"{log} line 3: not JSON" in err and "--skip-bad-lines" in err
    code, out, err = run(capsys, str(log), "--time-field", "ts", "--time-unit", "ms", "--out", out_csv, "--skip-bad-lines")
    assert code == 0, err
    assert [row.t_s for _, row in replay_rows(tmp_path / "r.csv")] == [0.0, 0.25]
    assert "2 left out" in out


LENGTHS = ["--input-tokens-field", "input_length", "--output-tokens-field", "output_length"]


def test_a_traces_lengths_become_distinct_requests_each_row_naming_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mooncake's layout: ms timestamps, each request's input and output lengths. The rows are
    sorted by time; each names its (input, output) pair in the lengths file, one line per pair."""
    trace = tmp_path / "mooncake.jsonl"
    rows = [(2000, 10, 5), (1000, 700, 3), (1500, 10, 5), (3000, 1, 1)]
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n" for t, i, o in rows))
    code, out, err = run(capsys, str(trace), "--time-unit", "ms", *LENGTHS, "--out", str(tmp_path / "r.csv"))
    assert code == 0, err
    pairs = [json.loads(line) for line in (tmp_path / "r.lengths.jsonl").read_text().splitlines()]
    assert pairs == [
        {"input_tokens": 1, "output_tokens": 1},
        {"input_tokens": 10, "output_tokens": 5},
        {"input_tokens": 700, "output_tokens": 3},
    ]
    replayed = [(row.t_s, row.sample) for _, row in replay_rows(tmp_path / "r.csv")]
    assert replayed == [(0.0, 2), (0.5, 1), (1.0, 1), (2.0, 0)]
    lengths = json.loads((tmp_path / "r.summary.json").read_text())["lengths"]
    assert lengths == {
        "file": "r.lengths.jsonl",
        "distinct": 3,
        "step": 1,
        "input_tokens": {"mean": 180.25, "min": 1, "max": 700},
        "output_tokens": {"mean": 3.5, "min": 1, "max": 5},
    }
    assert "3 distinct requests" in out and "r.lengths.jsonl (generation.lengths.file)" in out
    # rounded up to 16 tokens: fewer distinct requests
    code, out, err = run(
        capsys, str(trace), "--time-unit", "ms", *LENGTHS, "--length-step", "16", "--out", str(tmp_path / "s.csv")
    )
    assert code == 0, err
    assert [json.loads(line) for line in (tmp_path / "s.lengths.jsonl").read_text().splitlines()] == [
        {"input_tokens": 16, "output_tokens": 16},
        {"input_tokens": 704, "output_tokens": 16},
    ]


def test_a_mooncake_trace_s_hash_ids_go_with_each_request_and_the_summary_counts_their_reuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mooncake's blocks: two requests with the same lengths but other blocks are two requests; the
    lengths file carries each one's hash_ids, and the summary says how many block mentions repeat."""
    trace = tmp_path / "mooncake.jsonl"
    rows = [(0, 1000, 5, [1, 2]), (10, 1000, 5, [1, 3]), (20, 1000, 5, [1, 2]), (30, 600, 2, [4, 5])]
    trace.write_text(
        "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n" for t, i, o, h in rows)
    )
    code, out, err = run(
        capsys, str(trace), "--time-unit", "ms", *LENGTHS, "--hash-ids-field", "hash_ids", "--out", str(tmp_path / "r.csv")
    )
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "r.lengths.jsonl").read_text().splitlines()]
    assert lines == [
        {"input_tokens": 1000, "output_tokens": 5, "hash_ids": [1, 2]},
        {"input_tokens": 1000, "output_tokens": 5, "hash_ids": [1, 3]},
        {"input_tokens": 600, "output_tokens": 2, "hash_ids": [4, 5]},
    ]
    assert [row.sample for _, row in replay_rows(tmp_path / "r.csv")] == [0, 1, 0, 2]
    blocks = json.loads((tmp_path / "r.summary.json").read_text())["lengths"]["blocks"]
    assert blocks == {"distinct": 5, "named": 8, "reused_pct": 37.5}  # 1 twice again, 2 once again
    assert "blocks (hash_ids): 8 named, 5 distinct: 37.5 % of the prompts' blocks repeat one named before" in out
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "7"}) + "\n")
    code, _, err = run(capsys, str(trace), *LENGTHS, "--hash-ids-field", "hash_ids", "--out", str(tmp_path / "bad.csv"))
    assert code == 2 and "line 1: with hash_ids that are not a list of block ids: hash_ids '7'" in err, err


def test_an_azure_llm_trace_is_read_as_csv_with_its_iso_times_and_token_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Azure LLM inference traces' layout: CSV, `TIMESTAMP` as ISO text with 7 decimals."""
    trace = tmp_path / "AzureLLMInferenceTrace_code.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.4428260,396,109\n2023-11-16 18:15:51.0000000,374,44\n"
    )
    fields = ["--time-field", "TIMESTAMP", "--input-tokens-field", "ContextTokens", "--output-tokens-field", "GeneratedTokens"]
    code, _, err = run(capsys, str(trace), *fields, "--out", str(tmp_path / "az.csv"))
    assert code == 0, err
    assert [(row.t_s, row.sample) for _, row in replay_rows(tmp_path / "az.csv")] == [(0.0, 0), (3.762236, 1), (4.31941, 0)]
    assert (tmp_path / "az.lengths.jsonl").read_text().splitlines() == [
        '{"input_tokens": 374, "output_tokens": 44}',
        '{"input_tokens": 396, "output_tokens": 109}',
    ]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,many,44\n")
    code, _, err = run(capsys, str(trace), *fields, "--out", str(tmp_path / "az.csv"))
    assert code == 2 and f"{trace} line 2: with a length that is not a whole number of tokens" in one_line(err)


def test_only_an_output_length_read_and_a_bad_length_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 1, "output_length": 4}\n{"timestamp": 2, "output_length": 0}\n')
    out_csv = str(tmp_path / "r.csv")
    code, _, err = run(capsys, str(trace), "--output-tokens-field", "output_length", "--out", out_csv)
    assert (
        code == 2
        and f"{trace} line 2: with a length that is not a whole number of tokens from 1 to 1,000,000: output_length 0" in err
    )
    code, _, err = run(capsys, str(trace), "--output-tokens-field", "output_length", "--out", out_csv, "--skip-bad-lines")
    assert code == 0, err
    assert (tmp_path / "r.lengths.jsonl").read_text() == '{"output_tokens": 4}\n'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--length-step", "4"], "--length-step rounds the lengths read: give --input-tokens-field or --output-tokens-field"),
        ([*LENGTHS, "--length-step", "0"], "--length-step: expected a whole number of tokens from 1 to 1,000,000; got 0"),
        (["--hash-ids-field", "hash_ids"], "--hash-ids-field names the blocks of each prompt: give --input-tokens-field too"),
        (
            [*LENGTHS, "--hash-ids-field", "h", "--length-step", "16"],
            "--length-step rounds the prompt lengths that --hash-ids-field",
        ),
    ],
)
def test_bad_length_options_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 1, "input_length": 4, "output_length": 4}\n')
    code, _, err = run(capsys, str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "r.csv"), *args)
    assert code == 2 and message in one_line(err), err
    shutil.copy(CAPTURE, tmp_path / "trace.json")
    code, _, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(tmp_path / "r.csv"), *LENGTHS)
    assert code == 2 and "the lengths' options apply to JSON-lines logs, not Triton trace files" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "r.txt"], "--out: expected a .csv file name"),
        (["--window", "0s"], "--window: expected a duration above 0"),
        (["--target", "nope"], "--target: expected SOURCE=TARGET"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    shutil.copy(CAPTURE, tmp_path / "trace.json")
    full = [str(tmp_path / "trace.json"), *(["--out", str(tmp_path / "r.csv")] if "--out" not in args else []), *args]
    code, _, err = run(capsys, *full)
    assert code == 2 and message in err, err


def test_a_missing_trace_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "gone.json"), "--format", "triton-trace", "--out", str(tmp_path / "r.csv"))
    assert code == 2 and "no Triton trace file there" in err


# --- bad input: one line or left out and counted, never a traceback, a hang or memory without bound ------


def one_line(err: str) -> str:
    """The command's error: exactly one line, in its style (no traceback)."""
    assert err.startswith("inferload trace-to-replay: ") and err.count("\n") == 1, err
    return err


def triton(*entries: str) -> str:
    return "[" + ",".join(entries) + "]"


#: one good traced request, at 1 s on Triton's clock
GOOD_REQUEST = '{"id":1,"model_name":"m"},{"id":1,"timestamps":[{"name":"HTTP_RECV_START","ns":1000000000}]}'


@pytest.mark.parametrize(
    ("name", "text", "args"),
    [
        ("ms-among-s.jsonl", '{"timestamp": 1700000000}\n{"timestamp": 1700000000500}\n', []),
        (
            "span.json",
            triton(
                GOOD_REQUEST,
                '{"id":2,"model_name":"m"},{"id":2,"timestamps":[{"name":"HTTP_RECV_START","ns":10000000000000000000}]}',
            ),
            [],
        ),
        ("two-million-s.jsonl", '{"timestamp": 0}\n{"timestamp": 2000000}\n', ["--window", "100ms"]),
    ],
)
def test_a_span_of_more_windows_than_the_summary_counts_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, args: list[str]
) -> None:
    (tmp_path / name).write_text(text)
    code, _, err = run(capsys, str(tmp_path / name), "--out", str(tmp_path / "r.csv"), *args)
    assert code == 2 and "windows of" in one_line(err) and "at most 1,000,000" in err and "--window" in err
    assert "the arrivals span" in err and "first time" in err
    assert not (tmp_path / "r.csv").exists()


def test_a_long_recording_fits_the_summary_with_a_longer_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "long.jsonl").write_text('{"timestamp": 0}\n{"timestamp": 2000000}\n')
    code, _, err = run(capsys, str(tmp_path / "long.jsonl"), "--out", str(tmp_path / "r.csv"), "--window", "10s")
    assert code == 0, err
    assert len(json.loads((tmp_path / "r.summary.json").read_text())["window_counts"]) == 200_001


@pytest.mark.parametrize(
    ("time", "reason"),
    [
        ('"soon"', "with a time that is not epoch seconds or ISO-8601"),
        ("[1]", "with a time that is not epoch seconds or ISO-8601"),
        ('{"s": 1}', "with a time that is not epoch seconds or ISO-8601"),
        ("true", "with a time that is not epoch seconds or ISO-8601"),
        ("null", "without the time field"),
        ("1" * 5000, "with a time that is not epoch seconds or ISO-8601"),  # over Python's 4,300 digits
        ("1" * 4000, "with a time that is not epoch seconds or ISO-8601"),  # an int beyond a float
        ("1" * 400 + ".0", "with a time that is not epoch seconds or ISO-8601"),  # a float that overflows
        ("NaN", "with a time that is not epoch seconds or ISO-8601"),
        ("-Infinity", "with a time that is not epoch seconds or ISO-8601"),
    ],
)
def test_a_log_time_of_the_wrong_type_or_out_of_range_is_one_line_or_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], time: str, reason: str
) -> None:
    log = tmp_path / "access.log"
    log.write_text(f'{{"timestamp": 1}}\n{{"timestamp": {time}}}\n{{"timestamp": 2}}\n')
    code, _, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and f"{log} line 2: {reason}" in one_line(err)
    code, out, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"), "--skip-bad-lines")
    assert code == 0, err
    assert f"2 arrivals from 1 file(s); 1 left out: 1 lines {reason}" in out


def test_json_nested_100000_deep_is_one_line_or_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    log = tmp_path / "access.log"
    log.write_text(f'{{"timestamp": 1}}\n{{"timestamp": 2, "x": {deep}}}\n')
    code, _, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and f"{log} line 2: nested too deeply to read" in one_line(err)
    code, out, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"), "--skip-bad-lines")
    assert code == 0 and "1 left out: 1 lines nested too deeply to read" in out, err
    trace = tmp_path / "trace.json"
    trace.write_text(triton(GOOD_REQUEST, "\n" + deep))
    code, _, err = run(capsys, str(trace), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and f"{trace} line 2: trace entry 3 is nested too deeply to read" in one_line(err)


@pytest.mark.parametrize(
    ("bad_request", "reason"),
    [
        ('{"id":2,"model_name":"m"},{"id":2,"timestamps":"HTTP_RECV_START"}', "1 trace entries whose timestamps are not a list"),
        (
            '{"id":2,"model_name":"m"},{"id":2,"timestamps":{"HTTP_RECV_START":5}}',
            "1 trace entries whose timestamps are not a list",
        ),
        ('{"id":2,"model_name":"m"},{"id":2,"timestamps":5}', "1 trace entries whose timestamps are not a list"),
        ('{"id":2,"model_name":"m"},{"id":2,"timestamps":[5]}', "1 trace timestamps that are not JSON objects"),
        ('{"id":[2],"model_name":"m"}', "1 trace entries without an unsigned 64-bit integer id"),
        ('{"id":{"k":2},"model_name":"m"}', "1 trace entries without an unsigned 64-bit integer id"),
        ('{"id":2,"model_name":{"m":1}}', "1 trace entries whose model_name is not text"),
        *(
            (
                '{"id":2,"model_name":"m"},{"id":2,"timestamps":[{"name":"HTTP_RECV_START","ns":' + ns + "}]}",
                "1 arrival timestamps whose ns is not an unsigned 64-bit integer",
            )
            for ns in ('"5"', "[5]", '{"n":5}', "null", "true", "1" * 5000, "1" * 4000, "NaN", "Infinity", "-1", "1.5")
        ),
        ("7", "1 trace file entries that are not JSON objects"),
    ],
)
def test_a_trace_entry_of_the_wrong_shape_is_left_out_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_request: str, reason: str
) -> None:
    (tmp_path / "trace.json").write_text(triton(GOOD_REQUEST, bad_request))
    code, out, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(tmp_path / "r.csv"))
    assert code == 0, err
    assert out.startswith("1 arrivals from 1 file(s);") and reason in out.splitlines()[0], out


@pytest.mark.parametrize("args", [[], ["--format", "jsonl"], ["--format", "triton-trace"]])
def test_a_fifo_source_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None, args: list[str]
) -> None:
    os.mkfifo(tmp_path / "trace.json")
    code, _, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(tmp_path / "r.csv"), *args)
    assert code == 2 and "trace.json is not a regular file: it is a named pipe (FIFO)" in one_line(err)


def test_a_folder_or_a_kernel_file_source_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None) -> None:
    code, _, err = run(capsys, str(tmp_path), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and "is not a regular file: it is a folder" in one_line(err)
    # a device is refused unread (/dev/null here: a regression reading /dev/zero would fill the memory)
    code, _, err = run(capsys, "/dev/null", "--out", str(tmp_path / "r.csv"), "--format", "jsonl")
    assert code == 2 and "/dev/null is not a regular file: it is a kernel file" in one_line(err)


def test_a_line_or_trace_entry_over_1_mib_is_refused_with_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    padding = "x" * (1 << 20)
    log = tmp_path / "access.log"
    log.write_text(f'{{"timestamp": 1}}\n{{"timestamp": 2, "pad": "{padding}"}}\n{{"timestamp": 3}}\n')
    code, _, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and f"{log} line 2: longer than 1,048,576 bytes" in one_line(err)
    code, out, err = run(capsys, str(log), "--out", str(tmp_path / "r.csv"), "--skip-bad-lines")
    assert code == 0 and "2 arrivals from 1 file(s); 1 left out: 1 lines longer than 1,048,576 bytes" in out, err
    trace = tmp_path / "trace.json"
    trace.write_text(triton(GOOD_REQUEST, f'\n\n{{"id":2,"model_name":"{padding}"}}'))
    code, _, err = run(capsys, str(trace), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and f"{trace} line 3: trace entry 3 is longer than 1,048,576 characters" in one_line(err)


def big_trace(path: Path, requests: int) -> None:
    """A trace file as Triton writes it: per request a model entry and one entry per timestamp."""
    with open(path, "w") as out:
        out.write("[")
        for i in range(1, requests + 1):
            ns = 10**12 + i * 10**6
            stamps = (
                "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
                "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START",
                "HTTP_SEND_END",
            )  # fmt: skip
            out.write(f'{{"id":{i},"model_name":"m","model_version":1,"request_id":"{i}"}},')
            out.write(",".join(f'{{"id":{i},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}' for name in stamps) + ",\n")
        out.write("]")


def test_a_trace_file_is_read_as_a_stream_in_memory_well_below_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.json"
    big_trace(trace, 8000)
    tracemalloc.start()
    try:
        code, _, err = run(capsys, str(trace), "--out", str(tmp_path / "r.csv"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, err
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 8001
    assert peak < trace.stat().st_size / 4, (peak, trace.stat().st_size)


def test_a_trace_file_read_in_small_chunks_gives_the_same_replay_and_counts_a_cut_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(CAPTURE, tmp_path / "trace.json")
    code, _, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(tmp_path / "whole.csv"))
    assert code == 0, err
    monkeypatch.setattr(recording, "READ_CHUNK", 7)  # entries, names and numbers cut across reads
    code, out, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(tmp_path / "chunked.csv"))
    assert code == 0, err
    assert (tmp_path / "chunked.csv").read_text() == (tmp_path / "whole.csv").read_text()
    text = CAPTURE.read_text()
    (tmp_path / "writing.json").write_text(text[: text.rindex('{"id"') + 20])  # Triton still writing it
    code, out, err = run(capsys, str(tmp_path / "writing.json"), "--out", str(tmp_path / "r.csv"))
    assert code == 0 and "1 cut entries at the end of a trace file (one Triton is still writing)" in out, err


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_run_cut_off_while_writing_leaves_no_file_under_the_final_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    write_replay = recording.write_replay

    def cut_off(out: object, times: np.ndarray, codes: np.ndarray, names: list[str | None], samples: object = None) -> None:
        write_replay(out, times[:10], codes[:10], names)  # type: ignore[arg-type]
        raise failure

    monkeypatch.setattr(recording, "write_replay", cut_off)
    shutil.copy(CAPTURE, tmp_path / "trace.json")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(out_dir / "replay.csv"))
    if isinstance(failure, OSError):
        assert code == 2 and f"--out: cannot write {out_dir / 'replay.csv'}: No space left on device" in one_line(err)
    else:
        assert code == 130 and err == "inferload: interrupted\n"  # Ctrl-C while writing
    assert list(out_dir.iterdir()) == []  # neither the replay file, nor its summary, nor a temporary file


@pytest.mark.parametrize(
    ("in_the_way", "out", "message"),
    [
        ("replay.csv/", "replay.csv", "--out: {folder}/replay.csv is there and is no file to replace; name another --out"),
        (
            "replay.summary.json/",
            "replay.csv",
            "--out: {folder}/replay.summary.json is there and is no file to replace; name another --out",
        ),
        (
            "runs",
            "runs/week/replay.csv",
            "--out: cannot write {folder}/runs/week/replay.csv: {folder}/runs is a file, not a folder",
        ),
    ],
    ids=["a folder named as the replay file", "a folder named as its summary", "a file where a folder should be"],
)
def test_a_folder_or_file_in_the_way_of_out_is_named_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], in_the_way: str, out: str, message: str
) -> None:
    shutil.copy(CAPTURE, tmp_path / "trace.json")
    folder = tmp_path / "out"
    folder.mkdir()
    if in_the_way.endswith("/"):
        (folder / in_the_way).mkdir()
    else:
        (folder / in_the_way).write_text("")
    before = sorted(folder.iterdir())
    code, _, err = run(capsys, str(tmp_path / "trace.json"), "--out", str(folder / out))
    assert code == 2 and message.format(folder=folder) in one_line(err)
    assert sorted(folder.iterdir()) == before  # nothing written beside it: no summary of a replay file that is not there


def test_an_empty_trace_names_the_file_that_had_no_arrivals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    code, _, err = run(capsys, str(empty), "--format", "jsonl", "--out", str(tmp_path / "r.csv"))
    assert code != 0 and f"no arrivals found in {empty}" in one_line(err)
