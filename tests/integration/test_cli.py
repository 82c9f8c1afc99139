"""The `inferload demo` command as a user runs it, on the real servers (the CLI answers that start
nothing are in tests/unit/test_cli_errors.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from inferload.local.servers.procs import processes_mentioning
from tests.support.cli import inferload
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, built_models) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("demo")
    done = inferload(
        "demo",
        "--model",
        "tiny",
        "--users",
        "4",
        "--warmup",
        "1",
        "--steady",
        "4",
        "--burst",
        "4",
        "--capacity-runs",  # the search's logic is test_capacity's (its truth exact): here, that it runs and is printed
        "2",
        "--out",
        str(out),
        timeout_s=300,
    )
    return done, out


def test_the_demo_prints_both_servers_side_by_side(demo_run):
    done, _ = demo_run
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout[done.stdout.index("p99 (ms)") - 600 :]
    header = next(line for line in done.stdout.splitlines() if "triton-grpc.steady" in line and "torchserve-rest.steady" in line)
    assert "capacity under p99 <= 100 ms" in done.stdout and "  triton: " in done.stdout and "  torchserve: " in done.stdout
    assert "triton-grpc.burst" in header and "torchserve-rest.burst" in header
    # one sure answer per server: an interval only where the search reached ±10 %, else what was measured
    capacity = json.loads((demo_run[1] / "summary.json").read_text())["capacity"]
    for server, answer in capacity.items():
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"  {server}: "))
        if answer.get("precision_reached"):
            low, high = answer["interval_rps"]
            # (the interval is written rounded: its width within a hair of the precision asked)
            assert high is not None and (high - low) / low <= 0.2 + 1e-3 and f"[{low:g}, {high:g}]" in line, (line, answer)
        else:
            assert " at least " in line or " no rate met " in line, (line, answer)
    for row in (
        "p50 (ms)",
        "p95 (ms)",
        "p99 (ms)",
        "throughput (req/s)",
        "avg batch (server)",
        "queue (ms, server)",
        "cold start (s)",
    ):
        assert row in table
    assert "[1/6]" in done.stdout and "[5/6]" in done.stdout and "[6/6]" in done.stdout  # progress while it runs


def test_the_demo_summary_follows_the_contract(demo_run):
    _, out = demo_run
    summary = json.loads((out / "summary.json").read_text())
    assert {"run_id", "scenario", "started_at", "duration_s", "warmup_s", "workers", "targets", "slo"} <= set(summary)
    assert summary["warmup_s"] == 1
    assert set(summary["targets"]) == {
        "triton-grpc.steady",
        "torchserve-rest.steady",
        "triton-grpc.burst",
        "torchserve-rest.burst",
    }
    for name, target in summary["targets"].items():
        assert target["server"] == ("triton" if name.startswith("triton") else "torchserve")
        assert target["protocol"] == ("grpc" if name.startswith("triton") else "http")
        assert target["model"] == "tiny"
        assert target["requests"] > 0 and target["failures"] == 0 and target["error_rate"] == 0
        assert target["throughput_rps"] > 0
        latency = target["latency_ms"]
        assert set(latency) == {"mean", "p50", "p90", "p95", "p99", "p999", "max"}
        assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"] <= latency["p999"] <= latency["max"]
        assert target["cold_start_s"] > 0
        side = target["server_side"]
        assert set(side) >= {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram"}
        # batch sizes come from the server: its histogram accounts for the items it ran
        items = sum(int(size) * count for size, count in side["batch_size_histogram"].items())
        assert items == pytest.approx(target["requests"], rel=0.35), (name, side, target["requests"])
        assert side["avg_batch_size"] >= 1
        if name.endswith(".burst"):  # the burst phase: its one burst (3 s from 2 s after the warm-up), peak and recovery
            (burst,) = target["bursts"]
            assert (burst["start_s"], burst["end_s"]) == (3, 5)
            assert burst["peak_p99_ms"] > 0 and burst["failures"] == 0
            assert set(burst) == {
                "start_s",
                "end_s",
                "pre_burst_p99_ms",
                "peak_p99_ms",
                "recovery_s",
                "server_recovery_s",
                "failures",
                "unsent",
            }
        else:
            assert "bursts" not in target
    assert "Bursts: peak and recovery" in (out / "triton-grpc.burst" / "report.html").read_text()
    # the closing capacity pass: each server's capacity under p99 <= 100 ms, and its settings read back from it
    capacity = summary["capacity"]
    assert set(capacity) == {"triton", "torchserve"}
    for server, answer in capacity.items():
        assert answer["p99_ms"] == 100
        assert answer["max_rps"] is None or answer["first_failing_rps"] is None or answer["max_rps"] < answer["first_failing_rps"]
        assert (out / "capacity" / server / "sweep.json").is_file()
    for answer in capacity.values():  # every rate the search measured, with its p99 interval and verdict
        assert answer.get("curve") is None or all(p["verdict"] in ("pass", "fail", "unsure") for p in answer["curve"])
    if any(answer.get("curve") for answer in capacity.values()):
        page = (out / "report.html").read_text()
        assert "each server as configured</h2>" in page and "every server&#x27;s p99 against the offered rate" in page
    assert "instance(s), max_batch_size 32" in capacity["triton"]["config"]  # the sample model's config.pbtxt
    assert "batch size 8" in capacity["torchserve"]["config"]
    assert (out / "windows.csv").read_text().startswith("window_start,")
    for phase in summary["targets"]:
        assert (out / phase / "summary.json").exists()


def test_ctrl_c_during_the_demo_keeps_the_measured_phase_and_stops_the_servers(tmp_path, built_models):
    """A terminal's Ctrl-C reaches the demo's whole process group: the running phase ends early and
    keeps its results, no later phase starts, the servers are stopped, and the exit code says SIGINT."""
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "inferload.cli", "demo", "--model", "tiny", "--users", "2", "--warmup", "1"]
    command += ["--steady", "60", "--burst", "60", "--out", str(out)]
    demo = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(demo.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # the first phase's first progress line comes 5 s into its run (1 s of it warm-up)
        wait_until(lambda: any(" s / 61 s" in line for line in lines), timeout_s=180, what="the first phase's progress line")
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    reader.join(timeout=10)
    output = "".join(lines)
    assert demo.returncode == 130, output
    assert "[3/6]" not in output and "[6/6]" not in output, output  # no later phase, no capacity pass
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert list(summary["targets"]) == ["triton-grpc.steady"]
    assert summary["targets"]["triton-grpc.steady"]["requests"] > 0
    assert processes_mentioning(str(out)) == []
