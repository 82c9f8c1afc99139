"""Exact percentiles over any range and any subset of workers, recomputed from the window histograms a
run keeps (histograms.jsonl): they equal the percentiles of the per-request log over the same range
within 1 %, in a run with two workers."""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.cli import inferload
from tests.support.scenario_factory import tiny_target, write_scenario


def exact_percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (the value at or below which q % of the values lie), as HDR defines it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def test_range_percentiles_from_stored_histograms_match_the_request_log(local_servers, tmp_path):
    target = tiny_target("tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    data = {
        "name": "range",
        "duration": "8s",
        "warmup": "1s",
        "window": "1s",
        "targets": [target],
        "shape": {"kind": "steady", "users": 4},
    }
    scenario = write_scenario(tmp_path, data)
    out = tmp_path / "results"
    done = inferload("run", str(scenario), "--headless", "--workers", "2", "--requests-csv", "--out", str(out), timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr

    lines = [json.loads(line) for line in (out / "histograms.jsonl").read_text().splitlines()]
    workers = sorted({line["worker"] for line in lines} - {"all"})
    assert len(workers) == 2
    starts = sorted({line["start"] for line in lines if line["worker"] == "all" and line["s"] > 0})
    t_from, t_to = starts[1], starts[-2] + 1.0  # whole windows in the middle of the run
    summary = json.loads((out / "summary.json").read_text())
    run_start = datetime.fromisoformat(summary["started_at"]).timestamp()

    with open(out / "requests.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["outcome"] == "ok" and t_from <= float(row["time"]) < t_to]

    def check(selection: list[str] | None) -> None:
        args = ["report", str(out), "--from", f"{t_from - run_start:.6f}", "--to", f"{t_to - run_start:.6f}", "--json"]
        if selection:
            args += ["--workers", ",".join(selection)]
        answer = inferload(*args)
        assert answer.returncode == 0, answer.stdout + answer.stderr
        (figures,) = json.loads(answer.stdout)
        latencies = [float(r["latency_ms"]) for r in rows if selection is None or r["worker"] in selection]
        assert figures["requests"] - figures["failures"] == len(latencies)
        for q, key in ((50, "p50"), (90, "p90"), (99, "p99")):
            assert figures["latency_ms"][key] == pytest.approx(exact_percentile(latencies, q), rel=0.01), (
                key,
                selection,
            )

    check(None)  # both workers, merged exactly
    check([workers[0]])  # one worker alone
    assert len(rows) > 100


def test_a_range_names_unknown_workers_and_bad_times(local_servers, tmp_path):
    target = tiny_target("tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    scenario = write_scenario(
        tmp_path, {"name": "range", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    out: Path = tmp_path / "results"
    assert inferload("run", str(scenario), "--headless", "--out", str(out)).returncode == 0
    unknown = inferload("report", str(out), "--workers", "nobody")
    assert unknown.returncode == 2 and "nobody not in histograms.jsonl; it has all" in unknown.stderr
    bad = inferload("report", str(out), "--from", "yesterday")
    assert bad.returncode == 2 and "--from: expected seconds since the run's start" in bad.stderr
    whole = inferload("report", str(out), "--from", "0")
    assert whole.returncode == 0 and "tiny [all]" in whole.stdout
