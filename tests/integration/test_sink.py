"""The InfluxDB sink against a real InfluxDB: the v1 write API, refusals, v2 errors, throughput (the
sink's pure parts are in tests/unit/test_sink_offline.py)."""

from __future__ import annotations

import logging
import time

import pytest
from pydantic import SecretStr

from inferload.observe.sink import Point, SinkError, SinkSettings, make_writer, open_sink


def points(n: int, start: int = 0) -> list[Point]:
    return [Point("m", {"run_id": "r"}, {"i": i}, i) for i in range(start, start + n)]


# --- the real InfluxDB -----------------------------------------------------------------------------


def test_v1_writes_reach_a_real_influxdb_and_read_back(influxdb) -> None:
    settings = SinkSettings(url=influxdb.url, database="inferload")
    writer = make_writer(settings)
    writer.write(b'sinktest,run_id=v1 count=3i,text="a b" 1700000000000000000\n')
    series = influxdb.series("SELECT count, text FROM sinktest WHERE run_id = 'v1'")
    assert series[0]["values"] == [[1700000000000, 3, "a b"]]


def test_v1_refuses_a_malformed_line_as_not_retryable(influxdb) -> None:
    writer = make_writer(SinkSettings(url=influxdb.url))
    with pytest.raises(SinkError) as caught:
        writer.write(b"no fields here\n")
    assert caught.value.status == 400 and not caught.value.retryable


def test_v2_errors_never_show_the_token(influxdb, caplog) -> None:
    # InfluxDB 1.6 has no /api/v2/write: the v2 writer gets a 404, the permanent-error path.
    settings = SinkSettings(url=influxdb.url, api="v2", org="o", token=SecretStr("tok-SECRET-123"))
    sink = open_sink(settings, start=False)
    sink.submit(points(3))
    with caplog.at_level(logging.DEBUG):
        sink.flush_once()
        stats = sink.close(timeout_s=1)
    assert stats.points_dropped == 3 and "404" in (stats.last_error or "")
    assert "tok-SECRET-123" not in caplog.text and "tok-SECRET-123" not in str(stats.as_dict())


def test_sink_throughput_into_the_real_influxdb(influxdb) -> None:
    """Measured, not only checked: 100,000 `requests`-shaped points through the background writer."""
    settings = SinkSettings(url=influxdb.url, batch_size=5000, flush_interval_s=0.01, max_buffer_points=200_000)
    sink = open_sink(settings)
    n = 100_000
    batch = [
        Point(
            "throughput",
            {"run_id": "tp", "target": f"t{i % 4}", "worker": "all"},
            {"count": 100, "rps": 100.0, "mean_ms": 3.2, "p50_ms": 3.0, "p99_ms": 9.5, "users": 16},
            1_700_000_000_000_000_000 + i * 1000,
        )
        for i in range(n)
    ]
    started = time.perf_counter()
    sink.submit(batch)
    stats = sink.close(timeout_s=60)
    elapsed = time.perf_counter() - started
    assert (stats.points_written, stats.points_dropped) == (n, 0)
    total = influxdb.series("SELECT count(p99_ms) FROM throughput WHERE run_id = 'tp'")[0]["values"][0][1]
    assert total == n
    print(f"\nsink throughput: {n / elapsed:,.0f} points/s ({n} points in {elapsed:.2f} s, batches of 5000, v1 /write)")
