"""The `requests` points a window streams to InfluxDB, built without any server."""

from __future__ import annotations

import pytest

from inferload.measure.hdr import LatencyStats
from inferload.observe.influx_export import window_point


def test_an_open_loop_window_carries_its_target_rate_unsent_arrivals_and_send_lag():
    stats, lag = LatencyStats(), LatencyStats()
    for ms in (2.0, 3.0, 4.0):
        stats.record_success(ms)
        lag.record_success(ms / 10)
    point = window_point("run-1", {"target": "t"}, 100, 1.0, stats, 8, arrivals=[5, 2], send_lag=lag)
    assert point.fields["target_rps"] == 5.0 and point.fields["unsent"] == 2
    assert point.fields["send_lag_p99_ms"] == pytest.approx(0.4, rel=1e-2)
    closed_loop = window_point("run-1", {"target": "t"}, 100, 1.0, stats, 8)
    assert "target_rps" not in closed_loop.fields
