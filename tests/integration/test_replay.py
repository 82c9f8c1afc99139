"""Replayed production traffic and bursty arrival laws against a real Triton.

One Triton of the module's own serves ``tail_queue`` (tests/examples/triton: 1 ms per request for
inputs of 0.5, one instance); the recording runs on another with a trace file (and on a new one if
tracing crashed it: tests/support/example_triton.py). The truth each test holds the run to is known
before it runs:

- **Recorded, then replayed.** A first run (gamma arrivals, bursty) traces every request; its
  Triton trace becomes a replay file (`inferload trace-to-replay`, what a user does with a
  production Triton's trace); a second run replays it. Its intended arrivals per window must be the
  file's own per window (±1: a float at a window's edge), each answered or counted unsent (a busy
  machine may leave a few unsent: that is the senders', not the schedule's).
- **Gamma's burstiness.** The schedules are seeded, so the laws' draws are fixed: the requests a
  gamma CV 1 run answered have Poisson's gaps (two-sample KS at 0.1 % against a Poisson run's, from
  requests.csv), CV 3's do not; each run sends what it scheduled (its sent CV, the gaps between the
  actual sends, within 15 % of its schedule's), and CV 3 sends far burstier than Poisson.
- **Distributed.** With two workers each sends every other arrival; merged on the master the
  per-window counts are the file's, and the sent CV (all workers' sends merged) the file's.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from inferload.local.servers.triton_local import trace_arguments
from inferload.measure.run_record import gap_cv
from inferload.scenario.replay_file import replay_rows
from tests.support.cli import inferload
from tests.support.example_triton import ExampleTriton, example_triton, on_triton_surviving_its_crash
from tests.support.ks import ks_critical, ks_two_sample
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario

MODEL = "tail_queue"
#: the runs' warm-up: a busy machine's start-up (senders not all up, a first clump of sends) stays in it
WARMUP_S = 2.0


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleTriton]:
    with example_triton(tmp_path_factory.mktemp("triton-replay"), {MODEL: MODEL}) as server:
        yield server


def _target(address: str, traced: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {
        "name": "t",
        "kind": "triton-grpc",
        "address": address,
        "model": MODEL,
        "inputs": [{"name": "INPUT0", "shape": [4], "dtype": "FP32", "data": {"generator": "constant", "value": 0.5}}],
        "timeout": "10s",
    }
    if traced:
        target["trace"] = {"rate": 1}
    return target


def _scenario(folder: Path, address: str, shape: dict[str, Any], duration: str = "8s", traced: bool = False) -> Path:
    data: dict[str, Any] = {"name": "replay", "duration": duration, "warmup": f"{WARMUP_S:g}s", "window": "1s"}
    data["targets"] = [_target(address, traced)]
    data["shape"] = {**shape, "max_in_flight": 32}
    return write_scenario(folder, data)


def _windows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _arrivals_per_window(rows: list[dict[str, str]]) -> dict[int, int]:
    """Intended arrivals per window index (windows.csv's target_rps x window; 1 s windows)."""
    counts = {}
    for row in rows:
        if row["target_rps"]:
            index = round(datetime.fromisoformat(row["window_start"]).timestamp())
            counts[index] = round(float(row["target_rps"]))
    return counts


def _file_per_window(path: Path, started_at: float, duration_s: float) -> tuple[Counter[int], list[float]]:
    """The replay file's arrivals per wall-clock window once started at ``started_at`` (1 s windows)."""
    counts: Counter[int] = Counter()
    times = []
    for _, row in replay_rows(path):
        if row.t_s >= duration_s:
            break
        counts[math.floor(started_at + row.t_s)] += 1
        times.append(row.t_s)
    return counts, times


def _assert_windows_match(expected: Counter[int], seen: dict[int, int], output: str = "") -> None:
    for index in sorted(set(expected) | set(seen)):
        assert abs(seen.get(index, 0) - expected.get(index, 0)) <= 1, (index, expected, seen, output[-3000:])
    assert abs(sum(seen.values()) - sum(expected.values())) <= 1, (sum(seen.values()), sum(expected.values()))


def _record(folder: Path, server: ExampleTriton, trace_file: Path) -> Path:
    """A bursty run traced whole, turned into a replay file the way a user records production traffic."""
    scenario = _scenario(folder, server.grpc, {"kind": "gamma", "rate": 60, "cv": 2.0, "seed": 5}, traced=True)
    run = run_locust(scenario, folder)
    assert run.returncode == 0, run.output
    replay = folder / "recorded.csv"
    done = inferload("trace-to-replay", str(trace_file), "--out", str(replay), timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "burstiness (CV of the gaps between arrivals)" in done.stdout, done.stdout
    summary = json.loads((folder / "recorded.summary.json").read_text())
    traced = run.summary["targets"]["t"]["requests"] + run.summary["targets"]["t"]["failures"]
    assert summary["arrivals"] >= traced * 0.9, (summary, traced)  # every request of the run (warm-up too) was traced
    assert summary["burstiness_cv"] > 1.3, summary  # the recording kept the run's bursts
    return replay


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded on a Triton of its own with a trace file: Triton 2.51 crashes now and then tracing
    every request (docs/observability.md), so again on a new one when it did."""
    return on_triton_surviving_its_crash(
        tmp_path_factory.mktemp("recorded"),
        {MODEL: MODEL},
        lambda folder: trace_arguments(folder / "trace.json"),
        lambda server, folder: _record(folder, server, folder / "trace.json"),
    )


def test_a_replay_of_a_recorded_triton_trace_sends_its_arrivals_window_by_window(
    triton: ExampleTriton, recorded: Path, tmp_path: Path
) -> None:
    run = run_locust(_scenario(tmp_path, triton.grpc, {"kind": "replay", "file": str(recorded)}), tmp_path)
    assert run.returncode == 0, run.output
    figures = run.summary["targets"]["t"]
    open_loop = figures["open_loop"]
    started = datetime.fromisoformat(run.summary["started_at"]).timestamp()
    expected, times = _file_per_window(recorded, started, 8.0)
    _assert_windows_match(expected, _arrivals_per_window(_windows(run.windows_csv)))
    steady = [t for t in times if t >= WARMUP_S]
    assert abs(open_loop["arrivals"] - len(steady)) <= 1, (open_loop, len(steady))
    # every arrival answered or counted unsent (a busy machine may leave a few unsent: not the schedule's doing)
    assert figures["requests"] + open_loop["unsent"] == pytest.approx(open_loop["arrivals"], abs=32), figures
    assert open_loop["burstiness"]["scheduled_cv"] == pytest.approx(gap_cv(steady), rel=1e-3), open_loop
    assert open_loop["burstiness"]["sent_cv"] == pytest.approx(gap_cv(steady), rel=0.15), open_loop
    assert "burstiness sent (CV of the gaps between sends" in run.stdout, run.stdout


def _intended_gaps(results: Path) -> list[float]:
    """The gaps between the run's steady requests' intended times, from requests.csv (time - latency:
    open-loop latency counts from the intended time), in order."""
    with (results / "requests.csv").open() as handle:
        intended = sorted(float(row["time"]) - float(row["latency_ms"]) / 1000 for row in csv.DictReader(handle))
    summary = json.loads((results / "summary.json").read_text())
    steady_from = datetime.fromisoformat(summary["started_at"]).timestamp() + summary["warmup_s"]
    steady = [t for t in intended if t >= steady_from]
    return [b - a for a, b in itertools.pairwise(steady)]


def test_gamma_cv_1_sends_as_poisson_does_and_cv_3_is_burstier(triton: ExampleTriton, tmp_path: Path) -> None:
    sent, gaps = {}, {}
    for name, shape in (
        ("poisson", {"kind": "poisson", "rate": 80, "seed": 11}),
        ("gamma-1", {"kind": "gamma", "rate": 80, "cv": 1.0, "seed": 12}),
        ("gamma-3", {"kind": "gamma", "rate": 80, "cv": 3.0, "seed": 13}),
    ):
        folder = tmp_path / name
        folder.mkdir()
        run = run_locust(_scenario(folder, triton.grpc, shape), folder, "--requests-csv")
        assert run.returncode == 0, run.output
        burstiness = run.summary["targets"]["t"]["open_loop"]["burstiness"]
        assert burstiness["sent_cv"] == pytest.approx(burstiness["scheduled_cv"], rel=0.15), (name, burstiness)
        sent[name], gaps[name] = burstiness, _intended_gaps(run.results_dir)
    for name in ("poisson", "gamma-1"):  # ~560 gaps each: the CV of an exponential sample is 1 +- ~0.06
        assert 0.8 < sent[name]["scheduled_cv"] < 1.2, sent
    # the requests the runs answered, timed by their intended send: gamma CV 1 has Poisson's gaps (the
    # seeded draws are fixed, so this is a fixed pass, not a coin toss), CV 3 does not
    n, m = len(gaps["gamma-1"]), len(gaps["poisson"])
    assert ks_two_sample(gaps["gamma-1"], gaps["poisson"]) < ks_critical(0.001, n, m), (n, m)
    assert ks_two_sample(gaps["gamma-3"], gaps["poisson"]) > ks_critical(0.001, len(gaps["gamma-3"]), m)
    assert sent["gamma-3"]["scheduled_cv"] > 2.0 and sent["gamma-3"]["sent_cv"] > 2 * sent["poisson"]["sent_cv"], sent


def test_a_distributed_replay_keeps_the_global_schedule(triton: ExampleTriton, recorded: Path, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, triton.grpc, {"kind": "replay", "file": str(recorded)})
    out = tmp_path / "results"
    done = inferload("run", str(scenario), "--headless", "--workers", "2", "--out", str(out), timeout_s=180)
    (tmp_path / "run-output.log").write_text(done.stdout + done.stderr)  # the master's log, kept for a failure
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workers"] == 2, summary
    # the master ended the run with both workers' last reports in: each told to quit and waited for
    # (Locust's own quit waits 0.5 s, and a busy machine's worker missed it, its last ~3 s out of the figures)
    assert len(re.findall(r"Worker '[^']+' \(index \d\) quit\.", done.stderr + done.stdout)) == 2, done.stderr
    # stopped before its workers quit: the first quit does not spread the users again over the one left
    assert (done.stderr + done.stdout).count("Sending spawn jobs") == 1, done.stderr
    open_loop = summary["targets"]["t"]["open_loop"]
    started = datetime.fromisoformat(summary["started_at"]).timestamp()
    expected, times = _file_per_window(recorded, started, 8.0)
    # each worker's arrivals are every other one of the file's, timed from the master's start: merged, the file's
    _assert_windows_match(expected, _arrivals_per_window(_windows((out / "windows.csv").read_text())), done.stdout + done.stderr)
    steady = [t for t in times if t >= WARMUP_S]
    assert abs(open_loop["arrivals"] - len(steady)) <= 1, (open_loop, len(steady))  # none twice, none missing
    assert open_loop["burstiness"]["sent_cv"] == pytest.approx(gap_cv(steady), rel=0.15), open_loop


def test_a_sweep_steps_a_recording_through_rates_keeping_its_bursts(
    triton: ExampleTriton, recorded: Path, tmp_path: Path
) -> None:
    """`inferload sweep --rate` on a replay scenario: each step replays the recording at its level's mean rate."""
    scenario = _scenario(tmp_path, triton.grpc, {"kind": "replay", "file": str(recorded)})
    out = tmp_path / "sweep"
    options = ["--rate", "30,60", "--window", "1s", "--warmup", "1s", "--max-windows", "4", "--stable-windows", "2"]
    done = inferload(
        "sweep",
        str(scenario),
        *options,
        "--tolerance",
        "90",
        "--max-unsent",
        "0.5",
        "--max-send-lag",
        "5000",
        "--no-gpu",
        "--out",
        str(out),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recording_cv = json.loads(recorded.with_name("recorded.summary.json").read_text())["burstiness_cv"]
    steps = json.loads((out / "sweep.json").read_text())["steps"]
    assert [step["level"] for step in steps] == [30.0, 60.0], steps
    for step in steps:
        summary = json.loads((Path(step["results_dir"]) / "summary.json").read_text())
        open_loop = summary["targets"]["t"]["open_loop"]
        shape = yaml.safe_load((Path(step["results_dir"]).parent / "scenario.yaml").read_text())["shape"]
        assert shape["kind"] == "replay" and shape["rate"] == step["level"] and shape["loop"] is True, shape
        # the level's mean rate over the part the step ran (a window of the recording: within a third),
        # and the recording's bursts (its CV over the whole recording: within a half)
        assert open_loop["configured_rps"] == pytest.approx(step["level"], rel=0.35), (step, open_loop)
        assert open_loop["burstiness"]["scheduled_cv"] == pytest.approx(recording_cv, rel=0.5), open_loop


def _batch_executions(server: ExampleTriton) -> dict[int, int]:
    """Triton's executions of the model by batch size so far (its statistics; no dynamic batching:
    each request is one execution at the batch it carried)."""
    answer = requests.get(f"http://{server.http}/v2/models/{MODEL}/stats", timeout=10)
    assert answer.status_code == 200, answer.text
    [model] = answer.json()["model_stats"]
    return {int(entry["batch_size"]): int(entry["compute_infer"]["count"]) for entry in model.get("batch_stats", [])}


@pytest.mark.parametrize("kind", ["triton-grpc", "triton-http"])
def test_a_replays_batch_column_sends_each_request_at_its_rows_batch_size(
    triton: ExampleTriton, tmp_path: Path, kind: str
) -> None:
    """Rows of batch 1 to 4 (tail_queue batches up to 4, without dynamic batching): Triton executes
    each request at its row's batch size, and every answer passes the shape check at that batch."""
    batches = [1, 2, 3, 4, 2, 4, 1, 3] * 4  # 32 rows, 10 a second
    replay = tmp_path / "batches.csv"
    replay.write_text("t_s,batch\n" + "".join(f"{0.1 * (i + 1):.1f},{b}\n" for i, b in enumerate(batches)))
    data: dict[str, Any] = {"name": "replay-batch", "duration": "4s", "warmup": "0s", "window": "1s"}
    address = triton.grpc if kind == "triton-grpc" else triton.http
    data["targets"] = [{**_target(address), "kind": kind, "response_check": "shape"}]
    data["shape"] = {"kind": "replay", "file": str(replay), "max_in_flight": 8}
    before = _batch_executions(triton)
    run = run_locust(write_scenario(tmp_path, data), tmp_path)
    assert run.returncode == 0, run.output
    after = _batch_executions(triton)
    executed = {size: after.get(size, 0) - before.get(size, 0) for size in after}
    assert {size: count for size, count in executed.items() if count} == dict(Counter(batches)), (executed, run.output[-3000:])
    figures = run.summary["targets"]["t"]
    assert figures["requests"] == len(batches) and figures["failures"] == 0, figures
    assert "its replay's batch column gives requests batch sizes of their own" in run.output, run.output[-3000:]
