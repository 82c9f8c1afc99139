"""`inferload tune` on the real local servers: the seeds' loop on the sample CNN, batching off against
batching on, each applied to the running server, read back from it, scored by its capacity under the
SLO; the winner is the candidate with the highest capacity, written as a config fragment, and the
original settings are back at the end.

Whether batching beats the baseline is physics, not code: on this 2-core machine the client and the
server share the CPU, and measured once (docs/tuning.md) Triton's CNN gave 250 req/s with batching
against 200 without, TorchServe's 150 against 150. The tests assert what the tool must get right."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import inferload
from tests.support.scenario_factory import cnn_target, write_scenario

SEARCH = [
    "--max-unsent",
    "0.05",
    "--precision",
    "100",  # wide: the tests judge what tune applies, reads back, ranks and restores, not the boundary's digits
    "--window",
    "1s",
    "--warmup",
    "1s",
    "--max-windows",
    "10",  # a rate is decided on >= 500 requests: 10 windows of 1 s let rates down to 50 req/s be decided
]
SEARCH += ["--stable-windows", "2", "--tolerance", "30"]
# the search's own logic (its interval, its verification runs, its ranking on close calls) is held on
# the reference server's exact truth (test_capacity.py, tests/unit/test_tune_*.py): here each candidate's
# search is two steps (the start rate, then double or half it), no verification runs
SEARCH += ["--no-verify", "--max-steps", "2"]


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def ranked(candidate: dict[str, Any]) -> float:
    """What tune ranks by: the capacity's estimate (its boundary), else the highest rate that passed."""
    estimate = candidate.get("capacity_estimate_rps")
    return estimate if estimate is not None else candidate.get("capacity_rps") or 0.0


def assert_ranked_by_intervals(winner: dict[str, Any], candidates: list[dict[str, Any]]) -> None:
    """Decided only when the winner's interval clears every other's; else the others are named as tied."""
    others = [c for c in candidates if c["name"] != winner["name"] and ranked(c) > 0]

    def clears(other: dict[str, Any]) -> bool:
        if winner.get("capacity_low_rps") is not None and other.get("capacity_low_rps") is not None:
            high = other.get("capacity_high_rps")
            return high is not None and winner["capacity_low_rps"] > high
        return ranked(winner) > ranked(other)

    cleared = [c["name"] for c in others if clears(c)]
    assert winner["tied_with"] == [c["name"] for c in others if c["name"] not in cleared]
    assert winner["decided"] is (not winner["tied_with"])


def tune(tmp_path: Path, server: str, target: dict[str, Any], p99_ms: int, *options: str) -> dict[str, Any]:
    """Runs tune with a p99 bound that its start rate meets by a wide margin on this machine (each test says
    what it measured): a candidate that passes no rate has no capacity to rank."""
    scenario = write_scenario(
        tmp_path, {"name": "tune", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    out = str(tmp_path / "out")
    done = inferload(
        "tune", str(scenario), "--servers", server, "--out", out, *SEARCH, "--slo", f"p99_ms={p99_ms}", *options, timeout_s=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "putting the original settings back" in done.stdout
    document = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert (tmp_path / "out" / "tune.html").is_file()
    return document


def test_tune_on_triton_applies_reads_back_scores_and_restores_each_candidate(local_servers, tmp_path):
    ports = local_servers.ports
    before = get(f"http://127.0.0.1:{ports.triton_http}/v2/models/cnn/config")
    target = cnn_target("triton", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}")
    options = ["--triton-url", f"http://127.0.0.1:{ports.triton_http}", "--triton-delays-us", "2000", "--triton-instances", ""]
    document = tune(tmp_path, "triton", target, 50, "--start-rate", "200", *options)
    baseline, batching = document["candidates"]
    assert baseline["applied"]["dynamic_batching"] is False and baseline["applied"]["instance_count"] == 1
    assert batching["applied"]["dynamic_batching"] is True and batching["applied"]["max_queue_delay_microseconds"] == 2000
    # batches formed, read from the server: at the candidate's highest measured rate (its best step may
    # be a low rate where a 2 ms delay rarely pairs two requests; a loaded run here once read 1.0 there)
    steps = json.loads((Path(batching["folder"]) / "sweep.json").read_text())["steps"]
    measured = [step for step in steps if step.get("avg_batch") is not None]
    assert measured, steps
    assert max(measured, key=lambda step: step["level"])["avg_batch"] > 1, measured
    winner = document["winners"]["triton"]
    best = max(document["candidates"], key=ranked)
    assert winner["name"] == best["name"] and ranked(winner) == ranked(best)
    assert_ranked_by_intervals(winner, document["candidates"])
    expected = "max_queue_delay_microseconds: 2000" if best is batching else "instance_group [ { kind: KIND_CPU, count: 1 } ]"
    assert expected in winner["fragment"]
    assert winner["name"] in (tmp_path / "out" / "tune.html").read_text()
    after = get(f"http://127.0.0.1:{ports.triton_http}/v2/models/cnn/config")
    assert after.get("dynamic_batching") == before.get("dynamic_batching")
    assert after["instance_group"][0]["count"] == before["instance_group"][0]["count"]


def test_tune_on_torchserve_applies_reads_back_scores_and_restores_each_candidate(local_servers, tmp_path):
    ports = local_servers.ports
    management = f"http://127.0.0.1:{ports.ts_management}"
    before = get(f"{management}/models/cnn")[0]
    target = cnn_target("torchserve", "torchserve-rest", f"127.0.0.1:{ports.ts_inference}")
    options = ["--torchserve-management", management, "--torchserve-batch-sizes", "8", "--torchserve-delays-ms", "10"]
    # p99 <= 200 ms: at 100 req/s the CNN's p99 on TorchServe read 36-84 ms (p50 6-21 ms) in one clean
    # clone (ci44, 2026-12-07), where a 50 ms bound failed both candidates: a tail of the JVM and its
    # worker on two shared cores, not what this test judges
    document = tune(tmp_path, "torchserve", target, 200, "--start-rate", "100", *options, "--torchserve-workers", "")
    baseline, batching = document["candidates"]
    assert baseline["applied"] == {"batch_size": 1, "max_batch_delay_ms": 0, "workers": 1}
    assert batching["applied"] == {"batch_size": 8, "max_batch_delay_ms": 10, "workers": 1}
    winner = document["winners"]["torchserve"]
    best = max(document["candidates"], key=ranked)
    assert ranked(winner) == ranked(best)
    assert_ranked_by_intervals(winner, document["candidates"])
    assert f'"batchSize":{winner["applied"]["batch_size"]}' in winner["fragment"]
    after = get(f"{management}/models/cnn")[0]
    assert (after["batchSize"], after["maxBatchDelay"], after["minWorkers"]) == (
        before["batchSize"],
        before["maxBatchDelay"],
        before["minWorkers"],
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--servers", "triton"], "give Triton's HTTP API with --triton-url"),
        (["--servers", "kserve"], "--servers: expected triton and/or torchserve"),
        (
            ["--servers", "triton", "--triton-url", "http://127.0.0.1:1", "--slo", "error_rate=0.1"],
            "needs a latency or goodput bound",
        ),
    ],
)
def test_tune_refuses_what_it_cannot_do_before_touching_a_server(tmp_path, options, message):
    target = cnn_target("triton", "triton-grpc", "127.0.0.1:1")
    scenario = write_scenario(
        tmp_path, {"name": "tune", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    )
    slo = [] if "--slo" in options else ["--slo", "p99_ms=50"]
    done = inferload("tune", str(scenario), *slo, *options)
    assert done.returncode == 2 and message in done.stderr, done.stderr
