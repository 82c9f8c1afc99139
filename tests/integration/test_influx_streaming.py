"""Client-side streaming in real runs: the real servers under Locust, a real InfluxDB, the
collector alongside; and an InfluxDB stopped in the middle of a run (against the reference server,
whose slots set the load)."""

from __future__ import annotations

import csv
import json
import re
import threading
import time
from datetime import datetime
from pathlib import Path

from tests.support.influx_fixture import InfluxServer, observed_scenario, streamed_run
from tests.support.reference_server import reference_server, reference_target

#: the reference server's two slots, each holding a request 20 ms: 100 requests a second for 4 users,
#: whatever else the machine runs (the client could send far more)
SLOTS, HOLD_MS, USERS = 2, 20, 4


def window_rows(results: Path) -> list[dict[str, str]]:
    with open(results / "windows.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def window_start_s(row: dict[str, str]) -> float:
    return datetime.fromisoformat(row["window_start"]).timestamp()


def test_every_window_of_every_target_is_streamed_with_the_figures_of_windows_csv(observed_run) -> None:
    run = observed_run
    for target in run.targets:
        rows = {int(window_start_s(r)): r for r in window_rows(run.results) if r["target"] == target}
        series = run.influx.series(
            f"SELECT \"count\", failures, p99_ms, \"users\" FROM requests WHERE run_id = '{run.run_id}' AND target = '{target}' AND worker = 'all'"
        )
        assert series, f"no requests points for {target}"
        streamed = {row[0] // 1000: row for row in series[0]["values"]}
        assert set(streamed) == set(rows)  # windows in which nothing completed are streamed too, as zeros
        for start, (_, count, failures, p99, users) in streamed.items():
            assert count == int(rows[start]["requests"]) and failures == int(rows[start]["failures"])
            if not rows[start]["p99_ms"]:
                assert p99 is None  # nothing succeeded in that window: no latency fields
                continue
            # windows.csv writes ms with 3 decimals (whole µs); a percentile clamped to the exact max is finer
            assert abs(p99 - float(rows[start]["p99_ms"])) <= 0.0005 + 1e-9
            assert users == (int(rows[start]["users"]) if rows[start]["users"] else None)
        assert sum(1 for row in streamed.values() if row[4]) >= len(streamed) - 1  # all but a last, partial window


def test_requests_points_carry_the_target_tags(observed_run) -> None:
    run = observed_run
    answer = run.influx.series(
        f"SELECT last(\"count\") FROM requests WHERE run_id = '{run.run_id}' GROUP BY target, server, protocol, model, worker"
    )
    tags = sorted(
        (s["tags"]["target"], s["tags"]["server"], s["tags"]["protocol"], s["tags"]["model"], s["tags"]["worker"]) for s in answer
    )
    assert tags == [("torchserve-cnn", "torchserve", "http", "cnn", "all"), ("triton-grpc-cnn", "triton", "grpc", "cnn", "all")]


def test_run_start_stop_and_stage_changes_are_events(observed_run) -> None:
    run = observed_run
    series = run.influx.series(f"SELECT \"text\" FROM events WHERE run_id = '{run.run_id}' GROUP BY kind")
    kinds = {s["tags"]["kind"]: [v[1] for v in s["values"]] for s in series}
    assert kinds["start"] == [f"run {run.run_id} started: scenario observed (triton-grpc-cnn, torchserve-cnn)"]
    assert kinds["stop"] == [f"run {run.run_id} stopped"]
    assert any("users -> 4" in text for text in kinds["stage"])
    assert kinds["warmup_end"] == ["warm-up of 2 s over"]
    assert {"collector_start", "collector_stop"} <= set(kinds)


def test_the_collector_wrote_server_figures_and_batch_sizes_for_both_servers(observed_run) -> None:
    run = observed_run
    for target in run.targets:
        series = run.influx.series(
            f"SELECT max(inferences_per_s), max(avg_batch_size), max(queue_ms), max(compute_ms), max(request_ms) "
            f"FROM server WHERE run_id = '{run.run_id}' AND target = '{target}'"
        )
        _, inferences, batch, queue, compute, request = series[0]["values"][0]
        assert inferences > 0 and batch >= 1 and queue >= 0 and compute > 0 and request > 0, (target, series)
        if target.startswith("triton"):  # one statistics answer holds both: each interval's request time holds its compute
            assert request >= compute, (target, request, compute)
        # (not TorchServe's: its frontend times a request as it answers, while the handler's own counters
        # reach /metrics when the frontend reads the worker's log; an interval can hold a batch's compute
        # and not its answers: a clean clone read 60 ms of compute and at most 19 ms a request, with a 7 ms
        # queue: TorchServe waits up to 5 ms to batch here, Triton 1 ms)
        batches = run.influx.series(
            f"SELECT sum(\"count\") FROM batch_sizes WHERE run_id = '{run.run_id}' AND target = '{target}' GROUP BY batch_size"
        )
        assert batches and all(int(s["tags"]["batch_size"]) >= 1 for s in batches)


def test_the_collector_says_once_why_nvml_is_unavailable_and_goes_on(observed_run) -> None:
    assert observed_run.collector_log.count("GPU metrics off: NVML is unavailable") == 1
    assert "collector stopped:" in observed_run.collector_log


def test_the_token_never_reaches_results(observed_run) -> None:
    text = (observed_run.results / "summary.json").read_text()
    assert "INFLUX_TOKEN" not in text and "Token " not in text


def test_an_influxdb_stopped_mid_run_costs_points_not_load(tmp_path) -> None:
    """The server's slots set the load (100 requests a second), so a window after InfluxDB stopped
    with half the load of the windows before is the client waiting on InfluxDB, not a busy machine
    (against a real server whose answers took the machine's CPU, windows beside other tests ranged
    158 to 424 requests before the stop)."""
    influx = InfluxServer(tmp_path / "influx")
    influx.start()
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}, concurrency=SLOTS) as server:
        target = reference_target("ref", "triton-grpc", server.grpc_address, timeout="10s")
        scenario = observed_scenario(tmp_path, [target], "10s", users=USERS, warmup="1s")
        stop_at = time.time() + 7.0  # locust needs a few seconds to start; the run lasts 10 s
        stopper = threading.Timer(7.0, influx.stop)  # stimulus: InfluxDB goes away in the middle of the run
        stopper.start()
        try:
            started = time.time()
            result = streamed_run(scenario, tmp_path, "influx-down", influx.url)
            elapsed = time.time() - started
        finally:
            stopper.cancel()
            influx.stop()
    assert result.returncode == 0, result.stderr[-4000:]
    assert elapsed < 30, f"the run took {elapsed:.0f} s: it waited on the stopped InfluxDB"
    output = result.output
    match = re.search(r"streaming to InfluxDB: (\d+) points written, (\d+) dropped", output)
    assert match is not None, output[-4000:]
    written, dropped = map(int, match.groups())
    assert written > 0 and dropped > 0
    rows = [r for r in window_rows(tmp_path / "results") if r["phase"] == "steady"]
    before = [int(r["requests"]) for r in rows if window_start_s(r) + 1 <= stop_at]
    after = [int(r["requests"]) for r in rows if window_start_s(r) >= stop_at + 1]
    assert before and after, (rows, stop_at)
    assert min(after[:-1] or after) > 0.5 * (sum(before) / len(before)), (
        f"load fell after InfluxDB stopped: {before} then {after}"
    )
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    if "streaming" in summary:  # once the lead adds it to summary.json
        assert summary["streaming"]["points_dropped"] == dropped
