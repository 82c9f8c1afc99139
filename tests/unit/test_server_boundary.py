"""The server's own gauges per window (waiting, running requests, the KV cache's use: an LLM server's
metrics page, Triton's pending count) go in windows.csv's last columns, and report.html names where
the server became the limit: requests kept waiting (with the p99 time to first token before and from
then on), a KV cache near full, preemptions; or that none waited. A server with no gauge gets no note."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from inferload.measure.run_record import RunRecord
from inferload.results.files import TargetSeries
from inferload.results.plots import plot_generation
from inferload.results.report import boundary_notes
from inferload.results.summary import WINDOW_COLUMNS, window_rows


def series(
    waiting: Sequence[float | None], running: Sequence[float | None], kv: Sequence[float | None], ttft: list[float]
) -> TargetSeries:
    """A generative target's windows: the first the warm-up, the rest steady."""
    count = len(ttft)
    made = TargetSeries(**{f.name: [None] * count for f in dataclasses.fields(TargetSeries)})  # type: ignore[arg-type]
    made.elapsed_s, made.phase = [float(i) for i in range(count)], ["warmup"] + ["steady"] * (count - 1)
    made.first_response_p99_ms = [float(v) for v in ttft]
    made.server_waiting, made.server_running, made.server_kv_cache_used_pct = list(waiting), list(running), list(kv)
    made.output_tokens_per_s = [100.0] * count
    return made


def test_the_windows_carry_the_servers_gauges_as_each_closed() -> None:
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=100.0, targets=("chat", "other"))
    record.record("chat", 5.0, False, 100.5)
    record.record("other", 5.0, False, 100.5)
    record.server_gauges[(100, "chat")] = (3.0, 4.0, 0.925)
    record.stopped_at = 101.0
    assert WINDOW_COLUMNS[-3:] == ["server_waiting", "server_running", "server_kv_cache_used_pct"]
    rows = {row["target"]: row for row in window_rows(record)}
    chat, other = rows["chat"], rows["other"]
    assert (chat["server_waiting"], chat["server_running"], chat["server_kv_cache_used_pct"]) == (3.0, 4.0, 92.5)
    assert (other["server_waiting"], other["server_running"], other["server_kv_cache_used_pct"]) == (None, None, None)


def test_requests_kept_waiting_are_named_with_the_ttft_before_and_after() -> None:
    waiting = [0.0, 0.0, 0.0, 2.0, 3.0, 1.0]
    made = series(waiting, [2.0, 4.0, 4.0, 4.0, 4.0, 4.0], [None] * 6, ttft=[99.0, 10.0, 12.0, 50.0, 60.0, 55.0])
    (note,) = boundary_notes("chat", made, {})
    assert note == (
        "chat: the server kept requests waiting from 3 s on (up to 3 waiting, at most 4 running); p99 time to first"
        " token 12.0 ms before, 55.0 ms from then on (window medians): its slots are the limit at this load"
    )


def test_a_kv_cache_near_full_and_preemptions_are_named() -> None:
    made = series([0.0] * 4, [4.0] * 4, [50.0, 80.0, 91.0, 97.5], ttft=[10.0] * 4)
    summary: dict[str, Any] = {"server_side": {"preemptions": 7}}
    notes = boundary_notes("chat", made, summary)
    assert notes == [
        "chat: the server's KV cache was 98 % used from 2 s on: near full, new requests wait for room or running ones are preempted",
        "chat: the server preempted 7 requests in the steady state (its KV cache full)",
    ]


def test_no_wait_is_said_and_a_server_without_gauges_gets_no_note() -> None:
    calm = series([0.0] * 3, [1.0, 2.0, 2.0], [None] * 3, ttft=[10.0] * 3)
    assert boundary_notes("chat", calm, {}) == ["chat: no request waited at the server in the steady state (at most 2 running)"]
    # the warm-up's window is not the steady state: its queue is not named
    warm = series([5.0, 0.0, 0.0], [4.0, 1.0, 1.0], [None] * 3, ttft=[10.0] * 3)
    assert boundary_notes("chat", warm, {}) == ["chat: no request waited at the server in the steady state (at most 1 running)"]
    silent = series([None] * 3, [None] * 3, [None] * 3, ttft=[10.0] * 3)
    assert boundary_notes("chat", silent, {}) == []


def test_a_generative_targets_windows_are_drawn_with_the_servers_requests() -> None:
    made = series([0.0, 1.0, 2.0], [4.0] * 3, [None] * 3, ttft=[10.0] * 3)
    assert plot_generation("chat", made, 1.0)  # a PNG (base64)
    made.output_tokens_per_s = [None] * 3  # not a generative target
    assert plot_generation("chat", made, 1.0) is None
