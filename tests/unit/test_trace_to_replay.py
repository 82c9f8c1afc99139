"""`inferload trace-to-replay` on a saved capture of a real Triton's trace file and on access logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inferload.cli import main
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
