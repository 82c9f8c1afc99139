"""Burst recovery from a target's windows: the peak, and the time back to the pre-burst tail."""

from __future__ import annotations

from inferload.results.summary import burst_recovery, burst_spans
from tests.support.scenario_factory import scenario


def rows(p99: list[float | None], server: list[float | None] | None = None, failures: dict[int, int] | None = None) -> list[dict]:
    return [
        {
            "elapsed_s": float(i),
            "phase": "steady",
            "p99_ms": value,
            "server_request_ms": None if server is None else server[i],
            "failures": (failures or {}).get(i, 0),
            "unsent": None,
        }
        for i, value in enumerate(p99)
    ]


def test_bursts_are_found_from_the_shape():
    shape = scenario(
        {"kind": "burst", "base_users": 1, "burst_users": 8, "burst_length": "2s", "period": "5s"}, duration="12s"
    ).shape
    assert burst_spans(shape, 12.0) == [(3.0, 5.0), (8.0, 10.0)]
    assert burst_spans(scenario({"kind": "steady", "users": 1}).shape, 60.0) == []


def test_recovery_is_counted_from_the_burst_end_until_the_p99_settles_back():
    # before: ~10 ms; burst at 4..6 s lifts it to 80; back within 20 % from the window at 8 s
    series = rows(
        [10, 11, 10, 9, 50, 80, 40, 15, 11, 10, 10, 10], server=[2, 2, 2, 2, 20, 30, 12, 2, 2, 2, 2, 2], failures={5: 3}
    )
    (burst,) = burst_recovery(series, [(4.0, 6.0)], 12.0)
    assert burst["pre_burst_p99_ms"] == 10.0
    assert burst["peak_p99_ms"] == 80
    assert burst["recovery_s"] == 2.0  # the windows at 8 and 9 s are within 12 ms
    assert burst["server_recovery_s"] == 1.0  # the server's own request time was back at 7 s
    assert burst["failures"] == 3


def test_a_tail_that_never_settles_before_the_next_burst_is_not_back():
    series = rows([10, 10, 10, 90, 90, 60, 50, 40, 90, 90, 10, 10])
    first, second = burst_recovery(series, [(3.0, 5.0), (8.0, 10.0)], 12.0)
    assert first["recovery_s"] is None and first["peak_p99_ms"] == 90
    assert second["pre_burst_p99_ms"] == 50  # the windows since the last burst, even if not calm
    assert first["server_recovery_s"] is None  # no server figures per window
