"""Window histograms streamed to the real InfluxDB (`latency_histograms`) and the exact figures since
the warm-up (`requests_cumulative`), in a distributed run with two workers against the real Triton:
`inferload report --influx-url` gives the figures `inferload report RESULTS_DIR` gives, and both
equal the percentiles of the per-request log (requests.csv) over the same range within 1 %; the
last cumulative point equals the per-request log's percentiles over the steady windows."""

from __future__ import annotations

import argparse
import csv
import json
from datetime import datetime
from typing import Any

import pytest

from inferload.observe.influx_range import cmd_report_influx, influx_range_figures
from inferload.observe.sink import SinkSettings
from inferload.results.histograms import range_figures
from inferload.results.tail import nearest_rank
from tests.support.cli import inferload
from tests.support.influx_fixture import InfluxServer
from tests.support.scenario_factory import tiny_target, write_scenario


def exact(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (rank ceil(q % of n)) of every value, the definition summary.json uses."""
    return nearest_rank(sorted(values), q)


@pytest.fixture(scope="module")
def streamed(local_servers: Any, influxdb: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("influx_histograms")
    target = tiny_target("tiny", "triton-grpc", f"127.0.0.1:{local_servers.ports.triton_grpc}")
    data = {
        "name": "hist",
        "duration": "6s",
        "warmup": "1s",
        "window": "1s",
        "targets": [target],
        "shape": {"kind": "steady", "users": 4},
    }
    scenario = write_scenario(tmp, data)
    out, run_id = tmp / "results", f"influx-hist-{tmp.name}"
    done = inferload(
        "run", str(scenario), "--headless", "--workers", "2", "--requests-csv", "--out", str(out), "--run-id", run_id,
        "--", "--influx-url", influxdb.url, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "requests.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["outcome"] == "ok"]
    return {
        "out": out,
        "run_id": run_id,
        "start": datetime.fromisoformat(summary["started_at"]).timestamp(),
        "rows": rows,
        "lines": [json.loads(line) for line in (out / "histograms.jsonl").read_text().splitlines()],
    }


def report(*args: str) -> dict[str, Any]:
    answer = inferload("report", *args, "--json")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    (figures,) = json.loads(answer.stdout)
    return dict(figures)


def test_range_percentiles_from_influxdb_equal_the_folder_and_the_request_log(streamed, influxdb: InfluxServer) -> None:
    run = streamed
    workers = sorted({line["worker"] for line in run["lines"]} - {"all"})
    assert len(workers) == 2
    starts = sorted({line["start"] for line in run["lines"] if line["worker"] == "all" and line["s"] > 0})
    t_from, t_to = starts[1], starts[-2] + 1.0  # whole windows inside the run
    relative = (f"{t_from - run['start']:.6f}", f"{t_to - run['start']:.6f}")
    bounds = ["--from", relative[0], "--to", relative[1]]
    # the command both ways for all workers; one worker alone through the same functions in-process
    from_folder = report(str(run["out"]), *bounds)
    from_influx = report("--influx-url", influxdb.url, "--run-id", run["run_id"], *bounds)
    settings = SinkSettings(url=influxdb.url)
    _, (alone,) = influx_range_figures(settings, run["run_id"], *relative, [workers[1]])
    (alone_in_folder,) = range_figures(run["out"], t_from, t_to, [workers[1]])
    assert alone.as_dict() == alone_in_folder.as_dict()
    assert from_influx == from_folder  # the same histograms, merged by the same code
    for figures, selection in ((from_influx, None), (alone.as_dict(), [workers[1]])):
        latencies = [
            float(r["latency_ms"])
            for r in run["rows"]
            if t_from <= float(r["time"]) < t_to and (selection is None or r["worker"] in selection)
        ]
        assert figures["requests"] - figures["failures"] == len(latencies) > 50
        for q, key in ((50, "p50"), (90, "p90"), (99, "p99")):
            assert figures["latency_ms"][key] == pytest.approx(exact(latencies, q), rel=0.01), (key, selection)


def test_the_last_cumulative_point_has_the_request_logs_percentiles_since_the_warm_up(streamed, influxdb: InfluxServer) -> None:
    run = streamed
    series = influxdb.series(
        f"SELECT count, windows, p50_ms, p95_ms, p99_ms FROM requests_cumulative WHERE run_id = '{run['run_id']}'"
        " AND target = 'tiny' AND worker = 'all'"
    )
    columns, values = series[0]["columns"], series[0]["values"]
    last = dict(zip(columns, values[-1], strict=True))
    counts = [row[columns.index("count")] for row in values]
    assert counts == sorted(counts) and len(values) == last["windows"] >= 4  # one point per steady window, growing
    first_steady = min(line["start"] for line in run["lines"] if line["start"] >= run["start"] + 1.0)
    latencies = [float(r["latency_ms"]) for r in run["rows"] if float(r["time"]) >= first_steady]
    assert last["count"] >= len(latencies) > 50  # failures are counted, not timed
    for q, key in ((50, "p50_ms"), (95, "p95_ms"), (99, "p99_ms")):
        assert last[key] == pytest.approx(exact(latencies, q), rel=0.01), key
    sizes = influxdb.series(f"SELECT hdr, hdr_parts FROM latency_histograms WHERE run_id = '{run['run_id']}'")
    encoded = [len(row[1]) for row in sizes[0]["values"]]
    assert all(row[2] == 1 for row in sizes[0]["values"]) and max(encoded) < 60_000


def test_report_from_influxdb_names_an_unknown_run(influxdb: InfluxServer, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        influx_url=influxdb.url, influx_db=None, run_id="no-such-run", results_dir=None,
        t_from=None, t_to=None, range_workers=None, as_json=False,
    )  # fmt: skip
    assert cmd_report_influx(args) == 2
    assert "--run-id: no run 'no-such-run' in InfluxDB database 'inferload'" in capsys.readouterr().err
