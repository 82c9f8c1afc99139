"""Records every request into per-target, per-window latency statistics, on every Locust process.

Windows are aligned to wall-clock time (`floor(t / window)`), so windows from many workers line
up and merge exactly on the master. Requests finished before the warm-up ends go to the
warm-up figures; the steady-state totals exclude them. Workers send what they gathered since
their last report with each Locust report; the master (or a local runner) holds the run's whole
record and turns it into results when the run stops.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.measure.hdr import LatencyStats

logger = logging.getLogger(__name__)

REPORT_KEY = "inferload_latency"


@dataclass
class RunRecord:
    """What a run measured: the figures a summary and the per-window series are made from."""

    window_s: float
    warmup_s: float
    started_at: float | None = None  # wall clock, seconds
    stopped_at: float | None = None
    windows: dict[tuple[int, str], LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    steady: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    warmup: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    users_by_window: dict[int, int] = field(default_factory=dict)
    # open-loop only: send lag (intended -> actual send) and arrivals [intended, unsent]
    lag_windows: dict[tuple[int, str], LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    lag_steady: dict[str, LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    arrival_windows: dict[tuple[int, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    arrivals_steady: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    # on the master: each worker's own windows too, by worker id (for the per-worker stream)
    worker_windows: dict[tuple[int, str, str], LatencyStats] = field(default_factory=lambda: defaultdict(LatencyStats))
    # the server's own mean request duration per window (master or local only)
    server_request_ms: dict[tuple[int, str], float] = field(default_factory=dict)

    @property
    def warmup_ends_at(self) -> float | None:
        return None if self.started_at is None else self.started_at + self.warmup_s

    def record(self, target: str, latency_ms: float, failed: bool, now: float) -> None:
        window = self.windows[(int(now // self.window_s), target)]
        ends = self.warmup_ends_at
        phase = self.warmup if ends is not None and now < ends else self.steady
        totals = phase[target]
        if failed:
            window.record_failure()
            totals.record_failure()
        else:
            window.record_success(latency_ms)
            totals.record_success(latency_ms)

    def _in_steady(self, t: float) -> bool:
        ends = self.warmup_ends_at
        return ends is None or t >= ends

    def record_send_lag(self, target: str, lag_ms: float, now: float) -> None:
        self.lag_windows[(int(now // self.window_s), target)].record_success(max(lag_ms, 0.0))
        if self._in_steady(now):
            self.lag_steady[target].record_success(max(lag_ms, 0.0))

    def record_arrival(self, target: str, intended: float) -> None:
        self.arrival_windows[(int(intended // self.window_s), target)][0] += 1
        if self._in_steady(intended):
            self.arrivals_steady[target][0] += 1

    def record_unsent(self, target: str, intended: float) -> None:
        self.arrival_windows[(int(intended // self.window_s), target)][1] += 1
        if self._in_steady(intended):
            self.arrivals_steady[target][1] += 1

    def drain_to_wire(self) -> dict[str, Any]:
        """Everything gathered since the last call, as plain data; leaves the record empty."""
        wire = {
            "windows": [[index, target, stats.to_wire()] for (index, target), stats in self.windows.items()],
            "steady": {t: s.to_wire() for t, s in self.steady.items()},
            "warmup": {t: s.to_wire() for t, s in self.warmup.items()},
            "lag_windows": [[index, target, stats.to_wire()] for (index, target), stats in self.lag_windows.items()],
            "lag_steady": {t: s.to_wire() for t, s in self.lag_steady.items()},
            "arrival_windows": [[index, target, counts] for (index, target), counts in self.arrival_windows.items()],
            "arrivals_steady": dict(self.arrivals_steady),
        }
        for part in (
            self.windows,
            self.steady,
            self.warmup,
            self.lag_windows,
            self.lag_steady,
            self.arrival_windows,
            self.arrivals_steady,
        ):
            part.clear()
        return wire

    def merge_wire(self, wire: dict[str, Any], worker: str | None = None) -> None:
        for index, target, data in wire.get("windows", []):
            stats = LatencyStats.from_wire(data)
            self.windows[(int(index), target)].merge(stats)
            if worker is not None:
                self.worker_windows[(int(index), target, worker)].merge(stats)
        for target, data in wire.get("steady", {}).items():
            self.steady[target].merge(LatencyStats.from_wire(data))
        for target, data in wire.get("warmup", {}).items():
            self.warmup[target].merge(LatencyStats.from_wire(data))
        for index, target, data in wire.get("lag_windows", []):
            self.lag_windows[(int(index), target)].merge(LatencyStats.from_wire(data))
        for target, data in wire.get("lag_steady", {}).items():
            self.lag_steady[target].merge(LatencyStats.from_wire(data))
        for index, target, (arrivals, unsent) in wire.get("arrival_windows", []):
            counts = self.arrival_windows[(int(index), target)]
            counts[0] += arrivals
            counts[1] += unsent
        for target, (arrivals, unsent) in wire.get("arrivals_steady", {}).items():
            counts = self.arrivals_steady[target]
            counts[0] += arrivals
            counts[1] += unsent

    @property
    def steady_duration_s(self) -> float:
        if self.started_at is None or self.stopped_at is None:
            return 0.0
        return max(0.0, self.stopped_at - (self.started_at + self.warmup_s))


class RunRecorder:
    """Subscribes a RunRecord to a Locust environment's events (a listener class, no globals)."""

    def __init__(self, environment: Environment, warmup_s: float, window_s: float) -> None:
        self.environment = environment
        self.record = RunRecord(window_s=window_s, warmup_s=warmup_s)
        self._sampler: gevent.Greenlet | None = None
        events = environment.events
        events.request.add_listener(self._on_request)
        events.test_start.add_listener(self._on_test_start)
        events.test_stop.add_listener(self._on_test_stop)
        events.report_to_master.add_listener(self._on_report_to_master)
        events.worker_report.add_listener(self._on_worker_report)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def is_master(self) -> bool:
        return isinstance(self.environment.runner, MasterRunner)

    def _on_request(
        self,
        name: str,
        response_time: float,
        exception: BaseException | None = None,
        context: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        now = time.time()
        self.record.record(name, response_time, exception is not None, now)
        if context:
            lag = context.get("send_lag_ms")
            if lag is not None:
                self.record.record_send_lag(name, lag, now)

    def _on_test_start(self, **_: Any) -> None:
        self.record.started_at = time.time()
        self.record.stopped_at = None
        if not self.is_worker and self._sampler is None:
            self._sampler = gevent.spawn(self._sample_users)

    def _on_test_stop(self, **_: Any) -> None:
        self.record.stopped_at = time.time()
        if self._sampler is not None:
            self._sampler.kill(block=False)
            self._sampler = None

    def _sample_users(self) -> None:
        window = self.record.window_s
        while True:
            runner = self.environment.runner
            if runner is not None:
                self.record.users_by_window[int(time.time() // window)] = runner.user_count
            gevent.sleep(window / 2)

    def _on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        data[REPORT_KEY] = self.record.drain_to_wire()

    def _on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        wire = data.get(REPORT_KEY)
        if wire:
            self.record.merge_wire(wire, worker=client_id)
