"""`--stop-when-stable N,P`: end a run once N consecutive steady windows agree within ±P %.

The rule is perf_analyzer's (`inferload.measure.stability`): each target's throughput and p99 of
N consecutive windows after the warm-up are within ±P % of their mean. A window counts once it is
complete: its end has passed, and on a master also one worker report interval more, so the workers'
figures for it have arrived. When every target is stable the run ends as at the end of its timeline
(the shape's next tick returns None), so the results are written exactly as for a run that ran its
course; the scenario's duration stays the upper bound (the maximum number of windows).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import gevent
from locust.env import Environment
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner

from inferload.measure.run_record import RunRecord
from inferload.measure.stability import StabilityRule, WindowFigures, first_stable_run
from inferload.run.traffic import ScenarioShape

logger = logging.getLogger(__name__)


def parse_stop_when_stable(text: str) -> StabilityRule:
    """``N,P`` (windows, tolerance %) as a rule; ValueError with a message on anything else."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got {text!r}")
    try:
        windows, tolerance = int(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got {text!r}") from None
    return StabilityRule(windows=windows, tolerance_pct=tolerance, max_windows=max(windows, 1))


@dataclass
class StableStop:
    """Watches the run's windows and ends the run when every target is stable."""

    environment: Environment
    record: RunRecord
    rule: StabilityRule
    targets: tuple[str, ...]
    stable_since: dict[str, float] | None = None

    def complete_windows(self, now: float) -> dict[str, list[WindowFigures]]:
        """Each target's steady windows that are complete at `now`, oldest first."""
        warmup_ends = self.record.warmup_ends_at
        if warmup_ends is None:
            return {}
        lag_s = WORKER_REPORT_INTERVAL + 0.5 if isinstance(self.environment.runner, MasterRunner) else 0.1
        window_s = self.record.window_s
        by_target: dict[str, list[WindowFigures]] = {target: [] for target in self.targets}
        for (index, target), stats in self.record.all_windows():
            start = index * window_s
            if target not in by_target or start < warmup_ends or start + window_s + lag_s > now:
                continue
            p99 = stats.latency_ms()["p99"] if stats.requests else None
            by_target[target].append(WindowFigures(stats.requests / window_s, p99))
        return by_target

    def check(self, now: float) -> bool:
        """True (and the run told to end) when every target has a stable run of windows."""
        windows = self.complete_windows(now)
        if not windows:
            return False
        starts = {target: first_stable_run(figures, self.rule) for target, figures in windows.items()}
        if any(start is None for start in starts.values()):
            return False
        self.stable_since = {
            target: round(self.record.window_s * start, 3) for target, start in starts.items() if start is not None
        }
        shape = self.environment.shape_class
        if isinstance(shape, ScenarioShape):
            shape.ended_early = True
        logger.info(
            "stable: %d windows within ±%g %% for every target; ending the run", self.rule.windows, self.rule.tolerance_pct
        )
        return True

    def watch(self) -> None:
        """Greenlet body: check twice a window until stable or the run ends."""
        while not self.check(time.time()):
            gevent.sleep(self.record.window_s / 2)
