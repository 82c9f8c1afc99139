"""`--ramp-hold SPEC` inside a run: the plan (`inferload.traffic.ramp_hold`) fed with the run's complete
windows in order; its rate changes applied to this process's arrivals, or sent to the workers from a
master (`RATE_MESSAGE`, applied by `inferload.run.open_loop`); ramp_hold.json written as it goes."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.measure.run_record import RunRecord
from inferload.run.traffic import ScenarioShape
from inferload.traffic.arrivals import AdjustableTimeline
from inferload.traffic.ramp_hold import LEAD_S, RAMP_HOLD_JSON, RATE_MESSAGE, RampEnd, RampHoldPlan, RampWindow, RateChange

logger = logging.getLogger(__name__)


@dataclass
class RampHold:
    """The plan, fed with the run's complete windows; its changes applied (or sent to the workers)."""

    environment: Environment
    record: RunRecord
    plan: RampHoldPlan
    target: str
    timeline: AdjustableTimeline | None  # this process's arrivals (None on a master: it sends the changes)
    results_dir: Path | None
    start_rps: float
    seen: int = -1  # the last window index judged
    ended: RampEnd | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)

    def lag_s(self) -> float:
        return WORKER_REPORT_INTERVAL + 0.5 if isinstance(self.environment.runner, MasterRunner) else 0.1

    def _window(self, index: int, stats: WindowStats) -> RampWindow:
        full = stats.reopen() if isinstance(stats, ClosedStats) else stats
        copy = LatencyStats()
        if isinstance(full, LatencyStats):
            copy.merge(full)
        arrivals, unsent = self.record.arrival_windows.get((index, self.target), [0, 0])
        return RampWindow(index, copy, arrivals, unsent)

    def check(self, now: float) -> None:
        warmup_ends = self.record.warmup_ends_at
        if warmup_ends is None or self.ended is not None:
            return
        window_s = self.record.window_s
        next_index = math.ceil((now + LEAD_S) / window_s)
        for (index, target), stats in self.record.all_windows():
            start = index * window_s
            if target != self.target or index <= self.seen or start < warmup_ends or start + window_s + self.lag_s() > now:
                continue
            self.seen = index
            decision = self.plan.on_window(self._window(index, stats), next_index)
            if isinstance(decision, RateChange):
                self.apply(decision)
            elif isinstance(decision, RampEnd):
                self.end(decision)
                return

    def apply(self, change: RateChange) -> None:
        at_unix = change.from_index * self.record.window_s
        self.changes.append({"at": at_unix, "rate": change.rate, "why": change.why})
        logger.info("ramp-hold: %s (from %s)", change.why, time.strftime("%H:%M:%S", time.localtime(at_unix)))
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            for client in runner.clients.values():
                runner.send_message(RATE_MESSAGE, {"at": at_unix, "rate": change.rate}, client_id=client.id)
        elif self.timeline is not None:
            self.timeline.change(at_unix - (self.record.started_at or time.time()), change.rate)
        self.save()

    def end(self, decision: RampEnd) -> None:
        self.ended = decision
        logger.info("ramp-hold: %s; ending the run", decision.why)
        shape = self.environment.shape_class
        if isinstance(shape, ScenarioShape):
            shape.ended_early = True
        self.save()

    def document(self) -> dict[str, Any]:
        plan = self.plan
        hold_from = None if plan.hold_from is None else plan.hold_from * self.record.window_s
        hold_to = None if hold_from is None else hold_from + plan.held_windows * self.record.window_s
        return {
            "rule": asdict(plan.rule),
            "target": self.target,
            "start_rps": self.start_rps,
            "held_rps": self.ended.held_rps if self.ended else None,
            "ended": self.ended.why if self.ended else "the run ended before a hold was complete",
            "hold": {"rate": plan.rate, "from": hold_from, "to": hold_to, "windows": plan.held_windows}
            if plan.hold_from is not None
            else None,
            "changes": self.changes,
            "windows": plan.history,
        }

    def save(self) -> None:
        if self.results_dir is None:
            return
        try:
            self.results_dir.mkdir(parents=True, exist_ok=True)
            temporary = self.results_dir / f".{RAMP_HOLD_JSON}.tmp"
            temporary.write_text(json.dumps(self.document(), indent=2) + "\n")
            temporary.replace(self.results_dir / RAMP_HOLD_JSON)
        except OSError as error:
            logger.warning("ramp-hold: %s not written: %s", RAMP_HOLD_JSON, error)

    def watch(self) -> None:
        """Greenlet body: judge the windows as they complete, twice a window, until the run ends."""
        while self.ended is None:
            self.check(time.time())
            gevent.sleep(self.record.window_s / 2)
