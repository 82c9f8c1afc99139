"""`inferload run --repeat N` and `inferload compare --fail-on` as a CI regression gate, on the real Triton:
a real change (24 users against 1 on two cores: a third of the throughput; three repetitions each) fails the gate; a run against itself passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import inferload
from tests.support.scenario_factory import tiny_target, write_scenario


def repeated(folder: Path, address: str, users: int) -> Path:
    folder.mkdir()
    target = tiny_target("tiny", "triton-grpc", address)
    data = {"name": "gate", "duration": "4s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": users}}
    scenario = write_scenario(folder, data)
    out = folder / "runs"
    done = inferload("run", str(scenario), "--headless", "--repeat", "3", "--out", str(out), timeout_s=240)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: an SLO; these scenarios have none
    assert "3 repetitions" in done.stdout and "p99: mean" in done.stdout
    return out


@pytest.fixture(scope="module")
def calm(local_servers, tmp_path_factory) -> Path:
    """Three repetitions at one user."""
    return repeated(tmp_path_factory.mktemp("gate") / "calm", f"127.0.0.1:{local_servers.ports.triton_grpc}", users=1)


def test_repetitions_give_intervals_and_the_gate_fails_only_beyond_the_noise(local_servers, calm, tmp_path):
    busy = repeated(tmp_path / "busy", f"127.0.0.1:{local_servers.ports.triton_grpc}", users=24)

    document = json.loads((calm / "repeat.json").read_text())
    assert document["repeats"] == ["repeat-01", "repeat-02", "repeat-03"]
    p99 = document["targets"]["tiny"]["p99"]
    assert len(p99["values"]) == 3 and p99["ci95"][0] <= p99["mean"] <= p99["ci95"][1]
    assert (calm / "repeat-01" / "summary.json").is_file() and (calm / "repeat-02" / "summary.json").is_file()

    # from 24 users to 1, throughput falls to about a third, and it moves little from run to run (latency
    # percentiles on a shared 2-core machine move a lot more: three runs cannot show a 10 % change in them)
    slower = inferload("compare", str(busy), str(calm), "--fail-on", "throughput:-10%")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "tiny throughput:-10%" in slower.stdout and "FAIL" in slower.stdout

    same = inferload("compare", str(calm), str(calm), "--fail-on", "p99:+10%", "--fail-on", "throughput:-10%")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.count("pass") == 2


def test_single_runs_are_judged_against_their_window_to_window_noise(calm):
    one = calm / "repeat-01"
    done = inferload("compare", str(one), str(one), "--fail-on", "p99:+10%")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "noise from A's windows and B's windows" in done.stdout
    assert "target: tiny" in done.stdout  # the usual table comes first for single runs
