"""Window histograms as InfluxDB points (`latency_histograms`) and back, without any server: the
encoding, its split into parts under InfluxDB's string limit, the streamed points of a listener, and
the range merged from rows read back as from InfluxDB equal to the one from histograms.jsonl."""

from __future__ import annotations

import argparse
import random
import socket
from pathlib import Path
from typing import Any

import pytest
from locust.env import Environment

from inferload.cli import main
from inferload.measure.hdr import LatencyStats
from inferload.measure.run_record import RunRecord
from inferload.observe import influx_range
from inferload.observe.influx_export import InfluxExport
from inferload.observe.influx_range import cmd_report_influx, influxql_string
from inferload.observe.points import HISTOGRAM_MEASUREMENT, histogram_point, line_from_row
from inferload.observe.sink import SinkSettings, encode_point
from inferload.results.files import ResultsError
from inferload.results.histograms import histogram_lines, merge_range, parse_time, range_figures, write_histograms
from tests.support.ports import free_port
from tests.support.scenario_factory import scenario, tiny_target

START = 3_000_000.0
TAGS = {"target": "t", "server": "triton", "protocol": "grpc", "model": "m"}


def stats_of(latencies: list[float], failures: int = 0) -> LatencyStats:
    stats = LatencyStats()
    for ms in latencies:
        stats.record_success(ms)
    for _ in range(failures):
        stats.record_failure()
    return stats


def as_row(point: Any) -> dict[str, Any]:
    """What `SELECT *` gives back for the point: its fields and tags as columns, time in ns."""
    return {"time": point.time_ns, **point.tags, **point.fields}


def test_a_window_histogram_point_decodes_to_the_same_figures():
    stats = stats_of([random.Random(1).lognormvariate(3, 0.5) for _ in range(500)], failures=3)
    point = histogram_point("r1", TAGS, 3_000_000, 1.0, stats, "all")
    assert point is not None and point.measurement == HISTOGRAM_MEASUREMENT
    assert point.tags == {"run_id": "r1", "worker": "all", **TAGS}
    assert point.time_ns == 3_000_000 * 10**9
    assert point.fields["hdr_parts"] == 1 and point.fields["successes"] == 500 and point.fields["failures"] == 3
    line = encode_point(point)
    assert line is not None and ' hdr="' in line and "hdr_parts=1i" in line
    back = LatencyStats.from_wire(line_from_row(as_row(point)))
    assert back.latency_ms() == stats.latency_ms()
    assert (back.successes, back.failures, back.min_ms) == (500, 3, stats.min_ms)


def test_an_encoding_longer_than_the_field_limit_is_split_and_joined_again():
    stats = stats_of([float(ms) for ms in range(1, 400)])
    point = histogram_point("r1", TAGS, 10, 1.0, stats, "w1", max_field_chars=60)
    assert point is not None
    parts = point.fields["hdr_parts"]
    assert isinstance(parts, int) and parts > 2
    assert all(len(str(point.fields[f"hdr_{n}"])) <= 60 for n in range(2, parts + 1))
    line = line_from_row(as_row(point))
    assert line["worker"] == "w1" and line["h"] == stats.to_wire()["h"]
    row = as_row(point)
    del row[f"hdr_{parts}"]
    with pytest.raises(ValueError, match=f"hdr_{parts} missing"):
        line_from_row(row)


def test_a_window_without_requests_has_no_histogram_point_and_one_with_only_failures_has_one():
    assert histogram_point("r1", TAGS, 1, 1.0, LatencyStats(), "all") is None
    point = histogram_point("r1", TAGS, 1, 1.0, stats_of([], failures=2), "all")
    assert point is not None and point.fields["hdr"] == "" and point.fields["failures"] == 2
    assert LatencyStats.from_wire(line_from_row(as_row(point))).failures == 2


def test_a_row_missing_a_field_is_named():
    point = histogram_point("r1", TAGS, 1, 1.0, stats_of([1.0]), "all")
    assert point is not None
    row = as_row(point)
    del row["sum_ms"]
    with pytest.raises(ValueError, match="without the field 'sum_ms'"):
        line_from_row(row)


def test_run_ids_are_quoted_as_influxql_strings():
    assert influxql_string("a'b\\c") == "'a\\'b\\\\c'"


def distributed_record() -> RunRecord:
    """Two workers' reports merged on a master, over 6 windows."""
    rng = random.Random(7)
    record = RunRecord(window_s=1.0, warmup_s=1.0, started_at=START, stopped_at=START + 6.0, targets=("t",))
    for worker in ("w1", "w2"):
        part = RunRecord(window_s=1.0, warmup_s=1.0, started_at=START)
        for i in range(600):
            part.record("t", rng.lognormvariate(2.5 if worker == "w1" else 3.0, 0.6), i % 97 == 0, START + i / 100)
        record.merge_wire(part.drain_to_wire(), worker=worker)
    return record


class CapturingSink:
    def __init__(self) -> None:
        self.points: list[Any] = []

    def submit(self, points: list[Any]) -> None:
        self.points.extend(points)


def streamed_points(record: RunRecord) -> list[Any]:
    scn = scenario({"kind": "steady", "users": 1}, targets=[tiny_target("t", "triton-grpc", "127.0.0.1:1")])
    listener = InfluxExport(Environment(), record, scn, SinkSettings(url="http://127.0.0.1:1"), run_id=lambda: "r1")
    assert listener.sink is not None
    listener.sink.close(1.0)
    sink = CapturingSink()
    listener.sink = sink  # type: ignore[assignment]
    listener.emit(final=True)
    return sink.points


def test_the_streamed_histograms_give_the_folder_figures_for_every_range_and_worker(tmp_path: Path):
    record = distributed_record()
    points = [p for p in streamed_points(record) if p.measurement == HISTOGRAM_MEASUREMENT]
    assert {p.tags["worker"] for p in points} == {"all", "w1", "w2"}
    rows = [line_from_row(as_row(p)) for p in points]
    write_histograms(tmp_path, record)
    assert len(rows) == len(list(histogram_lines(record)))
    for t_from, t_to, workers in ((None, None, None), (START + 1, START + 5, None), (START + 2, None, ["w2"])):
        from_influx = merge_range(rows, t_from, t_to, workers, "InfluxDB")
        from_folder = range_figures(tmp_path, t_from, t_to, workers)
        assert [r.as_dict() for r in from_influx] == [r.as_dict() for r in from_folder]
        assert from_influx[0].stats.requests > 0
    with pytest.raises(ResultsError, match="nobody not in InfluxDB; it has all, w1, w2"):
        merge_range(rows, None, None, ["nobody"], "InfluxDB")
    # a range that holds no whole window says where the windows are, from either place (InfluxDB's
    # answered nothing at all but an empty table)
    first = min(float(row["start"]) for row in rows) - START
    last = max(float(row["start"]) + float(row["window_s"]) for row in rows) - START
    where = (
        f"no whole window lies in that range; {{}} gave windows from {round(first, 3):g} s to {round(last, 3):g} s after the run's start,"
        " 1 s each"
    )
    for place, merge in (
        ("InfluxDB", lambda: merge_range(rows, START + 1.5, START + 2, None, "InfluxDB", START)),
        ("histograms.jsonl", lambda: range_figures(tmp_path, START + 1.5, START + 2, None, START)),
    ):
        with pytest.raises(ResultsError) as nothing:
            merge()
        assert str(nothing.value) == "--from/--to: " + where.format(place)


def report_args(**given: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"influx_url": None, "influx_db": None, "run_id": None, "results_dir": None}
    values |= {"t_from": None, "t_to": None, "range_workers": None, "as_json": False, **given}
    return argparse.Namespace(**values)


def test_report_from_influxdb_says_what_is_missing_or_malformed(capsys: pytest.CaptureFixture[str]):
    assert cmd_report_influx(report_args(influx_url="127.0.0.1:8086", run_id="r1")) == 2
    assert "inferload report: --influx-url (or INFLUX_URL): expected an http:// or https:// URL" in capsys.readouterr().err
    assert cmd_report_influx(report_args(influx_url="http://127.0.0.1:1")) == 2
    assert "--influx-url needs --run-id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["report"])
    assert stopped.value.code == 2 and "give RESULTS_DIR, or --influx-url with --run-id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["report", "results/run", "--json"])  # the whole run's figures are report.html's
    assert (
        stopped.value.code == 2 and "--json prints a range's figures: give --from, --to or --workers" in capsys.readouterr().err
    )


def test_report_from_an_influxdb_that_refuses_or_never_answers_says_so_in_a_few_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    assert cmd_report_influx(report_args(influx_url=f"http://127.0.0.1:{port}", run_id="r1")) == 2
    assert (
        capsys.readouterr().err
        == f"inferload report: --influx-url: cannot reach http://127.0.0.1:{port}/query: connection refused\n"
    )
    monkeypatch.setattr(influx_range, "QUERY_TIMEOUT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the kernel's backlog), never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        assert cmd_report_influx(report_args(influx_url=url, run_id="r1")) == 2
    assert capsys.readouterr().err == f"inferload report: --influx-url: {url}/query: no answer within 0.5 s\n"


def test_a_range_that_ends_before_it_starts_or_is_not_finite_is_refused(tmp_path: Path):
    record = distributed_record()
    write_histograms(tmp_path, record)
    with pytest.raises(ResultsError, match="--to must be after --from; the range given ends 99998 s before it starts"):
        range_figures(tmp_path, START + 99999, START + 1, None)
    with pytest.raises(ResultsError, match="--to must be after --from"):
        merge_range([], START + 5, START + 5, None, "InfluxDB")
    for text in ("nan", "inf", "-infs"):
        with pytest.raises(ResultsError, match=f"--from: expected a finite number of seconds; got '{text}'"):
            parse_time("--from", text, START)
    assert parse_time("--to", "30s", START) == START + 30


def test_a_generative_targets_merged_lines_carry_each_windows_good_and_judged_requests():
    """What the capacity search's goodput bound reads: on the merged line of a window whose
    generations were judged, how many were good and how many judged; no such keys elsewhere."""
    record = distributed_record()
    first, second = sorted(index for index, _ in record.windows)[:2]
    record.generations.count_windows[(first, "t")] = [30, 300, 27, 30]  # [generations, tokens, good, judged]
    record.generations.count_windows[(second, "t")] = [30, 300, 0, 0]  # a target without goodput thresholds
    judged = [line for line in histogram_lines(record) if "good" in line]
    expected = [("all", first * record.window_s, 27, 30)]
    assert [(line["worker"], line["start"], line["good"], line["judged"]) for line in judged] == expected
