"""`inferload report --from --to --workers` on a results folder: what it refuses, and a whole run.

That the range percentiles equal the per-request log's within 1 % (two workers, both and one alone)
is tested with the folder and InfluxDB side by side in test_influx_histograms.py."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import inferload
from tests.support.scenario_factory import tiny_target, write_scenario


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
    past = inferload("report", str(out), "--from", "100", "--to", "200")
    assert past.returncode == 2 and "no whole window lies in that range" in past.stderr and "gave windows from " in past.stderr
