"""`inferload run --repeat N` and `inferload compare --fail-on` as a CI regression gate, on the reference
server (tests/support/reference_server.py): each request held 20 ms in one of 6 slots, so one user serves
about 50 req/s and six users about 300 req/s, whatever else the machine is doing. That change (three
repetitions each) fails a -10 % throughput gate; a run against itself passes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import inferload
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import write_scenario

SLOTS, HOLD_MS = 6, 20.0


def repeated(folder: Path, address: str, users: int) -> Path:
    folder.mkdir()
    target = reference_target("tiny", "triton-grpc", address)
    data = {"name": "gate", "duration": "4s", "warmup": "1s", "targets": [target], "shape": {"kind": "steady", "users": users}}
    scenario = write_scenario(folder, data)
    out = folder / "runs"
    done = inferload("run", str(scenario), "--headless", "--repeat", "3", "--out", str(out), timeout_s=240)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: an SLO; these scenarios have none
    assert "3 repetitions" in done.stdout and "p99: mean" in done.stdout
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as running:
        yield running


@pytest.fixture(scope="module")
def calm(server, tmp_path_factory) -> Path:
    """Three repetitions at one user."""
    return repeated(tmp_path_factory.mktemp("gate") / "calm", server.grpc_address, users=1)


def test_repetitions_give_intervals_and_the_gate_fails_only_beyond_the_noise(server, calm, tmp_path):
    busy = repeated(tmp_path / "busy", server.grpc_address, users=SLOTS)

    document = json.loads((calm / "repeat.json").read_text())
    assert document["repeats"] == ["repeat-01", "repeat-02", "repeat-03"]
    p99 = document["targets"]["tiny"]["p99"]
    assert len(p99["values"]) == 3 and p99["ci95"][0] <= p99["mean"] <= p99["ci95"][1]
    assert p99["mean"] >= HOLD_MS, p99  # no answer comes back before its hold
    assert (calm / "repeat-01" / "summary.json").is_file() and (calm / "repeat-02" / "summary.json").is_file()

    # from six users on six slots to one, throughput falls to about a sixth: the holds set it, not the CPU
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
