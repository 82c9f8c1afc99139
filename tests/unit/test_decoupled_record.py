"""Streamed requests' figures (Triton decoupled models): recorded per window and over the steady
state, exact across workers, compressed when old, and written to summary.json, windows.csv and
the `streams` InfluxDB point."""

from __future__ import annotations

import json
import random

import msgpack
import pytest
from locust.env import Environment

from inferload.errors import GrpcStatusError
from inferload.measure.decoupled_record import STREAM_CONTEXT_KEY, StreamRecord, StreamTiming
from inferload.measure.run_record import RunRecord
from inferload.observe.influx_export import stream_point
from inferload.results.files import read_summary, write_summary
from inferload.results.summary import STREAM_WINDOW_COLUMNS, WINDOW_COLUMNS, RunFacts, build_summary, window_rows
from inferload.run.recorder import RunRecorder
from tests.support.scenario_factory import scenario, tiny_target


def timings(seed: int, count: int) -> list[StreamTiming]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        responses = rng.randint(0, 6)
        first = rng.uniform(0.5, 40.0) if responses else None
        made.append(StreamTiming(responses, first, tuple(rng.uniform(0.05, 9.0) for _ in range(max(0, responses - 1)))))
    return made


def same_figures(got: dict[str, float | None], want: dict[str, float | None]) -> bool:
    """Percentiles and max exactly equal; the mean up to float summation order."""
    return got.pop("mean") == pytest.approx(want.pop("mean")) and got == want


def test_two_workers_merged_on_the_master_give_the_percentiles_of_all_requests_together() -> None:
    together = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    for seed in (1, 2):
        worker = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
        for i, timing in enumerate(timings(seed, 400)):
            now = 1000.0 + (i % 3) + 0.5
            together.record_stream("t", timing, now)
            worker.record_stream("t", timing, now)
        wire = msgpack.unpackb(msgpack.packb(worker.drain_to_wire()), strict_map_key=False)  # as Locust ships it
        master.merge_wire(wire, worker=f"w{seed}")
        assert not worker.streams.count_windows and not worker.streams.steady  # each request is reported once
    for record in (together, master):
        assert record.streams.steady["t"].counts.requests == 800
    want, got = together.streams.steady["t"], master.streams.steady["t"]
    assert same_figures(got.first_response.latency_ms(), want.first_response.latency_ms())
    assert same_figures(got.inter_response.latency_ms(), want.inter_response.latency_ms())
    assert (got.counts.responses, got.counts.max_responses) == (want.counts.responses, want.counts.max_responses)
    for index in (1000, 1001, 1002):
        mine, theirs = master.streams.window((index, "t")), together.streams.window((index, "t"))
        assert mine is not None and theirs is not None
        assert same_figures(mine.first_response.latency_ms(), theirs.first_response.latency_ms())
        assert mine.counts == theirs.counts


def test_the_warm_up_is_kept_out_of_the_steady_totals_but_not_out_of_its_windows() -> None:
    record = RunRecord(window_s=1.0, warmup_s=5.0, started_at=1000.0)
    record.record_stream("t", StreamTiming(3, 90.0, (1.0, 2.0)), now=1002.0)
    record.record_stream("t", StreamTiming(2, 4.0, (1.5,)), now=1006.0)
    totals = record.streams.steady["t"]
    assert (totals.counts.requests, totals.counts.responses) == (1, 2)
    assert totals.first_response.latency_ms()["max"] == 4.0
    warm = record.streams.window((1002, "t"))
    assert warm is not None and warm.first_response.latency_ms()["max"] == 90.0


def test_a_request_with_no_response_counts_but_has_no_time_to_first_response() -> None:
    record = StreamRecord()
    record.record((5, "t"), StreamTiming(0, None), steady=True)
    record.record((5, "t"), StreamTiming(1, 3.0), steady=True)
    window = record.window((5, "t"))
    assert window is not None and (window.counts.requests, window.counts.responses, window.counts.max_responses) == (2, 1, 1)
    assert window.first_response.successes == 1 and window.inter_response.successes == 0


def test_old_windows_are_compressed_and_a_late_report_still_merges_exactly() -> None:
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0, close_after_s=2.0)
    for i in range(10):
        record.record_stream("t", StreamTiming(2, 1.0 + i, (0.5,)), now=1000.5 + i)
        record.record("t", 2.0 + i, False, now=1000.5 + i)
    assert record.streams.open_histograms <= 2 * 4
    late = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0)
    late.record_stream("t", StreamTiming(2, 50.0, (0.7,)), now=1000.5)
    record.merge_wire(late.drain_to_wire())
    window = record.streams.window((1000, "t"))
    assert window is not None and window.counts.requests == 2
    assert window.first_response.latency_ms()["max"] == 50.0 and window.first_response.latency_ms()["p50"] == pytest.approx(1.0)


def test_the_recorder_keeps_a_streamed_requests_timing_only_when_it_succeeded() -> None:
    environment = Environment()
    recorder = RunRecorder(environment, warmup_s=0.0, window_s=1.0, targets=("t",))
    fire = environment.events.request.fire
    ok = StreamTiming(4, 2.0, (1.0, 1.0, 1.0))
    fire(request_type="gRPC", name="t", response_time=5.0, response_length=16, exception=None, context={STREAM_CONTEXT_KEY: ok})
    failed = GrpcStatusError("INTERNAL", "model failed")
    fire(request_type="gRPC", name="t", response_time=5.0, response_length=0, exception=failed, context={STREAM_CONTEXT_KEY: ok})
    fire(request_type="gRPC", name="t", response_time=5.0, response_length=0, exception=None, context={"target": "t"})
    totals = recorder.record.streams.steady["t"]
    assert (totals.counts.requests, totals.counts.responses) == (1, 4)
    assert recorder.record.steady["t"].requests == 3


def streamed_record() -> RunRecord:
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=1000.0, stopped_at=1003.0, targets=("plain", "square"))
    for i in range(30):
        now = 1000.1 + i / 10
        record.record("square", 10.0, False, now)
        record.record_stream("square", StreamTiming(4, 2.0 + i / 10, (1.0, 2.0, 3.0)), now)
        record.record("plain", 3.0, False, now)
    return record


def test_the_summary_has_a_decoupled_block_for_a_streamed_target_only(tmp_path) -> None:
    targets = [tiny_target("plain", "triton-grpc", "127.0.0.1:1"), tiny_target("square", "triton-grpc", "127.0.0.1:1")]
    summary = build_summary(scenario({"kind": "steady", "users": 1}, "3s", targets), streamed_record(), RunFacts(run_id="r"))
    assert summary.targets["plain"].decoupled is None
    streaming = summary.targets["square"].decoupled
    assert streaming is not None
    assert (streaming.requests, streaming.responses, streaming.max_responses_per_request) == (30, 120, 4)
    assert streaming.responses_per_request == 4.0 and streaming.responses_per_s == pytest.approx(40.0)
    assert streaming.first_response_ms.max == pytest.approx(4.9) and streaming.inter_response_ms.max == 3.0
    write_summary(tmp_path, summary)
    assert read_summary(tmp_path / "summary.json") == summary  # typed, written and read back the same
    assert "decoupled" not in (tmp_path / "summary.json").read_text().split('"plain"')[1].split('"square"')[0]
    assert '"schema_version": 2' in (tmp_path / "summary.json").read_text()  # the block's name since schema 2


def test_a_schema_1_summary_reads_its_streaming_block_as_decoupled(tmp_path) -> None:
    targets = [tiny_target("square", "triton-grpc", "127.0.0.1:1")]
    summary = build_summary(scenario({"kind": "steady", "users": 1}, "3s", targets), streamed_record(), RunFacts(run_id="r"))
    data = summary.model_dump(mode="json")
    del data["schema_version"]
    data["targets"]["square"]["streaming"] = data["targets"]["square"].pop("decoupled")
    (tmp_path / "summary.json").write_text(json.dumps(data))
    old = read_summary(tmp_path / "summary.json")
    assert old.schema_version is None and old.targets["square"].decoupled == summary.targets["square"].decoupled


def test_windows_csv_appends_the_stream_columns_filled_for_a_streamed_target_and_empty_otherwise() -> None:
    assert WINDOW_COLUMNS[WINDOW_COLUMNS.index("residual_ms") + 1 :][: len(STREAM_WINDOW_COLUMNS)] == STREAM_WINDOW_COLUMNS
    rows = {(row["elapsed_s"], row["target"]): row for row in window_rows(streamed_record())}
    square, plain = rows[(0.0, "square")], rows[(0.0, "plain")]
    assert square["responses"] == 4 * square["requests"] and square["responses_per_s"] == 4.0 * square["requests"]
    assert square["first_response_p50_ms"] <= square["first_response_p99_ms"] and square["inter_response_p99_ms"] == 3.0
    assert all(plain[column] is None for column in STREAM_WINDOW_COLUMNS)


def test_the_streams_point_carries_counts_and_percentiles_and_leaves_out_what_has_no_sample() -> None:
    record = StreamRecord()
    record.record((100, "t"), StreamTiming(3, 2.0, (1.0, 4.0)), steady=True)
    record.record((100, "t"), StreamTiming(1, 6.0), steady=True)
    window = record.window((100, "t"))
    assert window is not None
    point = stream_point("run-1", {"target": "t"}, 100, 2.0, window)
    assert point.measurement == "streams" and point.tags == {"run_id": "run-1", "worker": "all", "target": "t"}
    assert point.fields["requests"] == 2 and point.fields["responses"] == 4 and point.fields["responses_per_s"] == 2.0
    assert point.fields["responses_per_request"] == 2.0
    assert point.fields["first_response_max_ms"] == 6.0 and point.fields["inter_response_max_ms"] == 4.0
    lone = StreamRecord()
    lone.record((100, "t"), StreamTiming(1, 6.0), steady=True)
    single = lone.window((100, "t"))
    assert single is not None
    assert stream_point("run-1", {"target": "t"}, 100, 1.0, single).fields["inter_response_p99_ms"] is None
