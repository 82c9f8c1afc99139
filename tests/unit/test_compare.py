"""`inferload compare A B`: each figure of each target in both runs, with B − A and the change in %."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferload.results.compare import (
    EXIT_USAGE,
    FIGURES,
    compare_runs,
    comparison_to_dict,
    format_comparison,
    main_compare,
)


def target(
    p99: float, requests: int = 1000, failures: int = 0, server_side: dict[str, Any] | None = None, **overrides: Any
) -> dict[str, Any]:
    figures = {
        "server": "triton",
        "protocol": "grpc",
        "kind": "triton-grpc",
        "model": "cnn",
        "requests": requests,
        "failures": failures,
        "error_rate": failures / requests,
        "throughput_rps": requests / 20.0,
        "latency_ms": {"mean": 20.0, "p50": 15.0, "p90": 30.0, "p95": 40.0, "p99": p99, "p999": 90.0, "max": 120.0},
        "server_side": server_side,
        "cold_start_s": 8.0,
    }
    figures.update(overrides)
    return figures


def side(avg_batch_size: float, queue_ms_avg: float, compute_ms_avg: float) -> dict[str, Any]:
    return {
        "queue_ms_avg": queue_ms_avg,
        "compute_ms_avg": compute_ms_avg,
        "request_ms_avg": queue_ms_avg + compute_ms_avg + 1,
        "avg_batch_size": avg_batch_size,
        "batch_size_histogram": {"1": 10},
    }


def run(folder: Path, run_id: str, targets: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    data = {
        "run_id": run_id,
        "scenario": "compare",
        "started_at": "2026-11-30T06:00:00+00:00",
        "duration_s": 25.0,
        "warmup_s": 5.0,
        "steady_s": 20.0,
        "workers": 1,
        "targets": targets,
        "slo": {"passed": True, "checks": []},
    }
    (folder / "summary.json").write_text(json.dumps(data))
    return folder


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    a = run(
        tmp_path / "before",
        "before",
        {
            "triton-grpc": target(p99=50.0, requests=1000, failures=0, server_side=side(4.0, 2.0, 10.0)),
            "old-only": target(p99=10.0),
        },
    )
    b = run(
        tmp_path / "after",
        "after",
        {
            "triton-grpc": target(p99=40.0, requests=1500, failures=3, server_side=side(6.0, 1.0, 10.0)),
            "new-only": target(p99=10.0),
        },
    )
    return a, b


def test_each_figure_has_a_b_the_change_and_the_relative_change(runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(*runs)
    changes = {c.figure: c for c in comparison.targets["triton-grpc"]}
    assert list(changes) == [name for name, _, _ in FIGURES]
    p99 = changes["latency_ms.p99"]
    assert (p99.a, p99.b, p99.change, p99.change_pct) == (50.0, 40.0, -10.0, -20.0)
    requests = changes["requests"]
    assert (requests.a, requests.b, requests.change, requests.change_pct) == (1000, 1500, 500, 50.0)
    assert changes["throughput_rps"].change == pytest.approx(25.0) and changes["throughput_rps"].change_pct == pytest.approx(50.0)
    assert changes["server_side.avg_batch_size"].change_pct == pytest.approx(50.0)
    assert changes["server_side.queue_ms_avg"].change_pct == pytest.approx(-50.0)
    assert changes["server_side.compute_ms_avg"].change == 0.0 and changes["server_side.compute_ms_avg"].change_pct == 0.0


def test_a_change_from_zero_has_no_percentage_and_zero_to_zero_is_no_change(runs: tuple[Path, Path]) -> None:
    changes = {c.figure: c for c in compare_runs(*runs).targets["triton-grpc"]}
    failures = changes["failures"]
    assert (failures.a, failures.b, failures.change, failures.change_pct) == (0, 3, 3, None)
    error_rate = changes["error_rate"]
    assert error_rate.change == pytest.approx(0.002) and error_rate.change_pct is None


def test_targets_in_only_one_run_are_listed(runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(*runs)
    assert list(comparison.targets) == ["triton-grpc"]
    assert comparison.only_in_a == ["old-only"] and comparison.only_in_b == ["new-only"]
    text = format_comparison(comparison)
    assert "only in A: old-only" in text and "only in B: new-only" in text


def test_the_text_table_shows_each_figure_with_its_change(runs: tuple[Path, Path]) -> None:
    text = format_comparison(compare_runs(*runs))
    lines = text.splitlines()
    assert lines[0] == f"A: {runs[0] / 'summary.json'} (run before, scenario compare)"
    assert lines[1] == f"B: {runs[1] / 'summary.json'} (run after, scenario compare)"
    assert "target: triton-grpc" in lines
    assert next(line for line in lines if line.startswith("latency_ms.p99")).split() == [
        "latency_ms.p99",
        "50.000",
        "40.000",
        "-10.000",
        "-20.0",
        "%",
    ]
    assert next(line for line in lines if line.startswith("requests")).split() == [
        "requests",
        "1000",
        "1500",
        "+500",
        "+50.0",
        "%",
    ]
    assert next(line for line in lines if line.startswith("failures")).split() == ["failures", "0", "3", "+3", "n/a"]


def test_missing_figures_are_n_a_not_errors(tmp_path: Path) -> None:
    dead_latency = {k: None for k in ("mean", "p50", "p90", "p95", "p99", "p999", "max")}
    a = run(tmp_path / "a", "a", {"t": target(p99=50.0, server_side=None, cold_start_s=None)})
    b = run(
        tmp_path / "b",
        "b",
        {"t": target(p99=0.0, requests=10, failures=10, latency_ms=dead_latency, server_side=side(1.0, 1.0, 1.0))},
    )
    changes = {c.figure: c for c in compare_runs(a, b).targets["t"]}
    assert (changes["latency_ms.p99"].a, changes["latency_ms.p99"].b, changes["latency_ms.p99"].change) == (50.0, None, None)
    assert changes["server_side.avg_batch_size"].a is None and changes["server_side.avg_batch_size"].change_pct is None
    line = next(x for x in format_comparison(compare_runs(a, b)).splitlines() if x.startswith("cold_start_s"))
    assert line.split() == ["cold_start_s", "n/a", "8.00", "n/a", "n/a"]


def test_runs_may_be_given_as_folders_or_summary_files(runs: tuple[Path, Path]) -> None:
    by_folder = comparison_to_dict(compare_runs(*runs))
    by_file = comparison_to_dict(compare_runs(runs[0] / "summary.json", runs[1] / "summary.json"))
    assert by_folder == by_file


def test_json_output_carries_every_number(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main_compare(runs[0], runs[1], as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["run_id"] == "before" and data["b"]["run_id"] == "after"
    assert data["targets"]["triton-grpc"]["latency_ms.p99"] == {"a": 50.0, "b": 40.0, "change": -10.0, "change_pct": -20.0}
    assert data["targets"]["triton-grpc"]["failures"]["change_pct"] is None
    assert data["only_in_a"] == ["old-only"] and data["only_in_b"] == ["new-only"]


def test_text_output_is_the_table(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main_compare(runs[0], runs[1], as_json=False) == 0
    assert capsys.readouterr().out == format_comparison(compare_runs(*runs)) + "\n"


def test_a_folder_without_summary_exits_2_naming_it(
    runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main_compare(runs[0], empty, as_json=False) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"inferload compare: {empty}: no summary.json in this folder (is it a results folder?)\n"
    assert main_compare(tmp_path / "nowhere", runs[1], as_json=True) == EXIT_USAGE
    assert f"{tmp_path / 'nowhere'}: no such file or folder" in capsys.readouterr().err


def test_a_malformed_summary_exits_2_naming_the_file(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    broken = runs[1] / "summary.json"
    broken.write_text('{"targets": {"triton-grpc": {"requests": "many"}}}')
    assert main_compare(runs[0], runs[1], as_json=False) == EXIT_USAGE
    assert (
        capsys.readouterr().err
        == f"inferload compare: {broken}: targets.triton-grpc.requests: expected a number or null; got str 'many'\n"
    )
    broken.write_text("")
    assert main_compare(runs[0], runs[1], as_json=False) == EXIT_USAGE
    assert f"{broken}: not valid JSON" in capsys.readouterr().err


def test_rename_pairs_a_renamed_target_and_names_it(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    comparison = compare_runs(*runs, renames={"old-only": "new-only"})
    assert list(comparison.targets) == ["triton-grpc", "old-only"]
    assert comparison.only_in_a == [] and comparison.only_in_b == [] and comparison.renamed == {"old-only": "new-only"}
    assert "target: old-only (in B: new-only)" in format_comparison(comparison)
    assert comparison_to_dict(comparison)["renamed"] == {"old-only": "new-only"}
    assert main_compare(runs[0], runs[1], as_json=False, rename=["nope=new-only"]) == EXIT_USAGE
    assert "--rename nope=new-only: A has no target 'nope' (it has: triton-grpc, old-only)" in capsys.readouterr().err
    assert main_compare(runs[0], runs[1], as_json=False, rename=["old-only"]) == EXIT_USAGE
    assert "--rename: expected A_NAME=B_NAME" in capsys.readouterr().err


def test_a_gate_over_runs_with_no_target_in_common_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run(tmp_path / "a", "a", {"grpc": target(p99=50.0)})
    b = run(tmp_path / "b", "b", {"grpc-v2": target(p99=50.0)})
    assert main_compare(a, b, as_json=False, fail_on=["p99:+10%"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--fail-on: A and B have no target in common (A: grpc; B: grpc-v2), so the gate would judge nothing" in err
    assert "--rename A_NAME=B_NAME" in err
    assert main_compare(a, b, as_json=False, fail_on=["p99:+10%"], rename=["grpc=grpc-v2"]) == 0
    out = capsys.readouterr().out
    assert "grpc (B: grpc-v2) p99:+10%: too few samples for an interval: not judged" in out  # no windows.csv here


def test_a_streamed_target_is_compared_on_its_stream_figures_too(tmp_path: Path) -> None:
    def stream(first_p99: float) -> dict[str, Any]:
        latency = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p95": 2.0, "p99": first_p99, "p999": 4.0, "max": 5.0}
        return {
            "requests": 100,
            "responses": 300,
            "responses_per_s": 15.0,
            "responses_per_request": 3.0,
            "max_responses_per_request": 3,
            "first_response_ms": latency,
            "inter_response_ms": latency,
        }

    # A is a file of schema 1 (the block was called streaming), B of schema 2: compare reads both
    a = run(tmp_path / "a", "a", {"s": target(p99=50.0, streaming=stream(3.0)), "plain": target(p99=50.0)})
    b = run(tmp_path / "b", "b", {"s": target(p99=50.0, decoupled=stream(6.0)), "plain": target(p99=50.0)})
    comparison = compare_runs(a, b)
    changes = {c.figure: c for c in comparison.targets["s"]}
    assert changes["decoupled.first_response_ms.p99"].change_pct == pytest.approx(100.0)
    assert changes["decoupled.responses_per_request"].a == 3.0
    assert not any(c.figure.startswith("decoupled.") for c in comparison.targets["plain"])
    text = format_comparison(comparison)
    assert next(x for x in text.splitlines() if x.startswith("decoupled.first_response_ms.p99")).split()[1:3] == [
        "3.000",
        "6.000",
    ]


def test_a_target_name_that_holds_terminal_escapes_is_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "evil\x1b]0;owned\x07\x1b[2J\rname"
    a = run(tmp_path / "a", "a", {name: target(p99=50.0)})
    b = run(tmp_path / "b", "b", {name: target(p99=40.0)})
    assert main_compare(a, b, as_json=False) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed and "\r" not in printed
    assert "target: evil\\x1b]0;owned\\x07\\x1b[2J\\rname" in printed  # the name, still readable
