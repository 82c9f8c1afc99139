"""report.html: a self-contained page from a results folder (summary.json, windows.csv, gpu.csv).

Results folders are built by hand in tmp_path, following the contract in docs/results.md.
"""

from __future__ import annotations

import base64
import csv
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from inferload.results.files import ResultsError, TargetSeries, read_summary
from inferload.results.plots import stage_changes, warmup_span
from inferload.results.report import main_report, write_report
from tests.support.system_tools import HEADLESS_CHROMIUM

WINDOW_COLUMNS = [
    "window_start",
    "elapsed_s",
    "phase",
    "target",
    "requests",
    "failures",
    "rps",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "users",
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def target(server: str, protocol: str, p99: float, **overrides: Any) -> dict[str, Any]:
    figures = {
        "server": server,
        "protocol": protocol,
        "kind": f"{server}-{protocol}",
        "model": "cnn",
        "requests": 8000,
        "failures": 8,
        "error_rate": 0.001,
        "throughput_rps": 399.6,
        "latency_ms": {"mean": 18.0, "p50": 15.2, "p90": 29.4, "p95": 38.6, "p99": p99, "p999": 100.2, "max": 333.5},
        "server_side": {
            "queue_ms_avg": 1.276,
            "compute_ms_avg": 13.749,
            "request_ms_avg": 15.043,
            "avg_batch_size": 3.62,
            "batch_size_histogram": {"1": 574, "2": 524, "4": 260, "8": 323},
        },
        "cold_start_s": 8.93,
    }
    figures.update(overrides)
    return figures


def summary(
    targets: dict[str, dict[str, Any]], checks: list[dict[str, Any]] | None = None, warmup_s: float = 5.0
) -> dict[str, Any]:
    checks = checks or []
    return {
        "run_id": "nightly-42",
        "scenario": "compare",
        "started_at": "2026-11-30T06:07:54+00:00",
        "duration_s": 25.0,
        "warmup_s": warmup_s,
        "steady_s": 20.0,
        "workers": 3,
        "targets": targets,
        "slo": {"passed": all(c["passed"] for c in checks), "checks": checks},
    }


def window_rows(
    name: str, seconds: int = 25, warmup_s: int = 5, users: list[int] | None = None, failures_at: int | None = None
) -> list[dict[str, Any]]:
    """One row per second: a ramp of users 2 -> 4 -> 8, latency growing with load."""
    rows = []
    for s in range(seconds):
        count = (users or [2] * 8 + [4] * 8 + [8] * 9)[s]
        requests = 40 * count
        failures = 10 if s == failures_at else 0
        rows.append(
            {
                "window_start": f"2026-11-30T06:08:{s:02d}+00:00",
                "elapsed_s": s,
                "phase": "warmup" if s < warmup_s else "steady",
                "target": name,
                "requests": requests,
                "failures": failures,
                "rps": requests,
                "mean_ms": 5.0 * count,
                "p50_ms": 4.0 * count,
                "p90_ms": 7.0 * count,
                "p95_ms": 8.0 * count,
                "p99_ms": 10.0 * count,
                "p999_ms": 12.0 * count,
                "max_ms": 13.0 * count,
                "users": count,
            }
        )
    return rows


def results_folder(folder: Path, data: dict[str, Any], rows: list[dict[str, Any]] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(data, indent=2))
    if rows is not None:
        with open(folder / "windows.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=WINDOW_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return folder


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def row_with(page: str, *cells: str) -> str:
    """The one table row holding every cell text given."""
    rows = [r for r in re.findall(r"<tr[^>]*>.*?</tr>", page) if all(c in r for c in cells)]
    assert len(rows) == 1, f"expected one row with {cells}; found {len(rows)}"
    return rows[0]


@pytest.fixture(scope="module")
def two_target_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checks = [
        {"target": "triton-grpc", "metric": "p99_ms", "limit": 50.0, "value": 70.719, "passed": False},
        {"target": "torchserve-rest", "metric": "error_rate", "limit": 0.01, "value": 0.001, "passed": True},
    ]
    data = summary(
        {"triton-grpc": target("triton", "grpc", 70.719), "torchserve-rest": target("torchserve", "http", 45.0)}, checks
    )
    rows = window_rows("triton-grpc", failures_at=12) + window_rows("torchserve-rest")
    return results_folder(tmp_path_factory.mktemp("run"), data, rows)


@pytest.fixture(scope="module")
def page(two_target_run: Path) -> str:
    """The two-target run's report (drawn once: plots take a fraction of a second each)."""
    path = write_report(two_target_run)
    assert path == two_target_run / "report.html"
    return path.read_text()


def test_the_report_is_written_next_to_the_results_with_the_runs_header(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert "nightly-42" in row_with(page, "run id")
    assert "compare" in row_with(page, "scenario")
    assert "2026-11-30T06:07:54+00:00" in row_with(page, "started")
    assert "25.0 s" in row_with(page, "duration")
    assert "5.0 s" in row_with(page, "warm-up")
    assert ">3<" in row_with(page, "workers")
    assert "FAILED" in row_with(page, ">SLO<")


def test_every_target_has_a_column_of_figures_and_its_own_section(page: str) -> None:
    for name in ("triton-grpc", "torchserve-rest"):
        assert f"<h2>{name}</h2>" in page
    assert re.search(r"<th>p99 \(ms\)</th><td[^>]*>70\.72</td><td[^>]*>45\.00</td>", page)
    assert re.search(r"<th>error rate</th><td[^>]*>0\.10 %</td>", page)
    assert re.search(r"<th>avg batch \(server\)</th><td[^>]*>3\.62</td>", page)
    assert re.search(r"<th>queue \(ms, server\)</th><td[^>]*>1\.276</td>", page)
    assert re.search(r"<th>compute \(ms, server\)</th><td[^>]*>13\.749</td>", page)
    assert re.search(r"<th>cold start</th><td[^>]*>8\.93 s</td>", page)


def test_the_failed_slo_check_is_a_fail_row_with_its_limit_and_value(page: str) -> None:
    failed = row_with(page, "triton-grpc", "p99_ms")
    assert 'class="fail"' in failed and "FAIL" in failed
    assert "&lt;= 50" in failed and "70.72" in failed
    passed = row_with(page, "torchserve-rest", "error_rate")
    assert 'class="pass"' in passed and "FAIL" not in passed and "&lt;= 0.01" in passed


def test_plots_are_embedded_pngs_and_nothing_is_fetched(page: str) -> None:
    images = embedded_pngs(page)
    # per target: the timeline (latency, rps + users, errors) and the server side (batches, queue vs compute)
    assert len(images) == 4
    assert all(image.startswith(PNG_SIGNATURE) and len(image) > 5000 for image in images)
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_the_warm_up_is_explained(page: str) -> None:
    assert "Warm-up: the first 5 s are excluded from every figure" in page


def test_warm_up_span_comes_from_the_phase_column_else_from_warmup_s() -> None:
    rows = window_rows("t", warmup_s=3)
    series = TargetSeries(
        elapsed_s=[r["elapsed_s"] for r in rows],
        phase=[r["phase"] for r in rows],
        users=[r["users"] for r in rows],
    )
    assert warmup_span(series, warmup_s=99) == (0, 3)
    no_phase = TargetSeries(elapsed_s=[0.0, 1.0, 2.0], phase=["", "", ""])
    assert warmup_span(no_phase, warmup_s=1.5) == (0.0, 1.5)
    assert warmup_span(no_phase, warmup_s=0) is None


def test_stages_are_where_the_user_count_changes() -> None:
    series = TargetSeries(elapsed_s=[0, 1, 2, 3, 4, 5], users=[2, 2, None, 8, 8, 2])
    assert stage_changes(series) == [(3, 8), (5, 2)]


def test_a_run_with_no_successes_and_no_server_side_gets_notes_not_a_traceback(tmp_path: Path) -> None:
    dead = target(
        "torchserve",
        "http",
        0.0,
        requests=120,
        failures=120,
        error_rate=1.0,
        throughput_rps=0.0,
        latency_ms={k: None for k in ("mean", "p50", "p90", "p95", "p99", "p999", "max")},
        server_side=None,
        cold_start_s=None,
    )
    checks = [{"target": "dead", "metric": "p99_ms", "limit": 50.0, "value": None, "passed": False}]
    rows = [
        {**row, "failures": row["requests"], **{k: "" for k in WINDOW_COLUMNS if k.endswith("_ms")}}
        for row in window_rows("dead")
    ]
    page = write_report(results_folder(tmp_path / "dead", summary({"dead": dead}, checks), rows)).read_text()
    assert "dead: no successful requests in the steady state (120 failed)" in page
    assert "dead: no server-side figures" in page
    assert re.search(r"<th>p99 \(ms\)</th><td[^>]*>n/a</td>", page)
    assert re.search(r"<th>cold start</th><td[^>]*>n/a</td>", page)
    assert "n/a" in row_with(page, "dead", "p99_ms")
    assert len(embedded_pngs(page)) == 1  # the timeline still shows users and the 100 % error rate


def test_a_run_without_windows_csv_says_so(tmp_path: Path) -> None:
    folder = results_folder(tmp_path / "r", summary({"t": target("triton", "grpc", 20.0)}), rows=None)
    page = write_report(folder).read_text()
    assert "windows.csv not found: no plots over time." in page
    assert "No rows for this target in windows.csv" in page
    assert len(embedded_pngs(page)) == 1  # the server-side plot needs no windows


def test_bad_rows_in_windows_csv_are_skipped_and_named(tmp_path: Path) -> None:
    rows = window_rows("t")
    rows[3]["p99_ms"] = "fast"
    page = write_report(results_folder(tmp_path / "r", summary({"t": target("triton", "grpc", 20.0)}), rows)).read_text()
    assert "windows.csv line 5: a non-numeric value; row skipped." in page
    assert len(embedded_pngs(page)) == 2


def test_a_gpu_csv_adds_a_gpu_section(tmp_path: Path) -> None:
    folder = results_folder(tmp_path / "r", summary({"t": target("triton", "grpc", 20.0)}), window_rows("t"))
    assert "<h2>GPU</h2>" not in write_report(folder).read_text()
    with open(folder / "gpu.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time", "gpu", "util_pct", "mem_used_bytes", "power_w"])
        for s in range(25):
            for gpu in ("0", "1"):
                writer.writerow([f"2026-11-30T06:08:{s:02d}+00:00", gpu, 50 + s, 2**30 * (4 + s / 10), 150.0 + s])
    page = write_report(folder).read_text()
    assert "<h2>GPU</h2>" in page
    assert len(embedded_pngs(page)) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{ not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1, column 3"),
        ("[1, 2]", "expected a JSON object with a 'targets' key; got list"),
        ('{"run_id": "x"}', "targets: missing; expected an object of target name -> figures"),
        ('{"targets": []}', "targets: expected an object of target name -> figures; got list"),
        (
            '{"schema_version": 3, "targets": {}}',
            "schema_version 3: written by a newer inferload; this one reads versions 1 to 2 (upgrade inferload to read it)",
        ),
        (
            '{"targets": {"t": {"latency_ms": {"p99": "slow"}}}}',
            "targets.t.latency_ms.p99: expected a number or null; got str 'slow'",
        ),
        (
            '{"targets": {}, "slo": {"checks": "none"}}',
            "slo.checks: expected a list of objects (target, metric, limit, value, passed); got str 'none'",
        ),
    ],
)
def test_a_malformed_summary_is_an_error_naming_the_file_and_the_key(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(ResultsError) as caught:
        write_report(tmp_path)
    assert str(caught.value) == f"{tmp_path / 'summary.json'}: {expected}"
    assert not (tmp_path / "report.html").exists()


def test_a_folder_without_summary_is_an_error_naming_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=re.escape(f"{tmp_path}: no summary.json in this folder")):
        read_summary(tmp_path)


# -- what a browser shows ---------------------------------------------------------------------
def colour_pixels(png: Path, rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    from matplotlib.image import imread

    image = imread(str(png))[:, :, :3] * 255.0
    return int((abs(image - rgb).max(axis=2) <= tolerance).sum())


def test_chromium_renders_the_report_with_its_plots_and_the_failed_check(two_target_run: Path, page: str, tmp_path: Path) -> None:
    report = two_target_run / "report.html"
    shot = tmp_path / "report.png"
    command = [
        *HEADLESS_CHROMIUM,
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        report.as_uri(),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    from matplotlib.image import imread

    assert imread(str(shot)).shape[:2] == (2000, 1280)
    assert colour_pixels(shot, (0xFD, 0xEC, 0xEA), tolerance=2) > 1000  # the failed SLO row's background
    assert colour_pixels(shot, (0xD6, 0x27, 0x28)) > 200  # the p99 line of the first plot: images decoded and drawn


def test_open_loop_windows_are_plotted_too(tmp_path: Path) -> None:
    rows = [{**row, "target_rps": 100.0} for row in window_rows("t")]
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary({"t": target("triton", "grpc", 20.0)})))
    with open(folder / "windows.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*WINDOW_COLUMNS, "target_rps", "unsent", "send_lag_p99_ms"], restval="")
        writer.writeheader()
        writer.writerows(rows)
    assert len(embedded_pngs(write_report(folder).read_text())) == 2


def test_the_report_command_prints_the_path_or_exits_2(
    two_target_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_report(tmp_path) == 2
    assert capsys.readouterr().err == f"inferload report: {tmp_path}: no summary.json in this folder (is it a results folder?)\n"
    assert main_report(two_target_run) == 0
    assert capsys.readouterr().out == f"{two_target_run / 'report.html'}\n"


def test_open_loop_figures_appear_only_for_open_loop_runs(tmp_path: Path) -> None:
    from inferload.results.report import targets_html

    closed = {"t": {"requests": 10, "failures": 0, "error_rate": 0.0, "throughput_rps": 5.0, "latency_ms": {}}}
    assert "achieved rate" not in targets_html(closed)
    opened = {
        "t": {
            **closed["t"],
            "open_loop": {"configured_rps": 100.0, "achieved_rps": 99.5, "unsent": 3, "send_lag_ms": {"p99": 0.8}},
        }
    }
    page = targets_html(opened)
    assert "achieved rate" in page and "99.5" in page and "unsent arrivals" in page
