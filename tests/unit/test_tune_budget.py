"""`inferload tune --budget` bounds the whole tune, applying and putting back the candidates included
(`tune --budget 40s` took 60 s: each candidate's capacity search ran without the budget, and the
servers' loading and unloading were not counted). A clock the test moves: a candidate takes 10 s to
apply (a Triton model load) and 20 s to put back (unload and load); each step of a capacity search
takes its plan's longest run and its start-up. Real runs of a tune: tests/integration/test_tune.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferload.measure.windows import StabilityRule
from inferload.tune import tune as tune_module
from inferload.tune.server_config import SearchSpace
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep import SweepSettings
from inferload.tune.tune import ServerTune, Tune, TuneSettings

APPLY_S = 10.0
PUT_BACK_S = 20.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class SlowConfigurator:
    changed = True  # a candidate is applied before each search

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.applied = 0

    def current(self) -> dict[str, Any]:
        return {}

    def apply(self, candidate: Any) -> dict[str, Any]:
        self.clock.now += APPLY_S
        self.applied += 1
        return {}

    def restore(self) -> str:
        self.clock.now += PUT_BACK_S
        return "put back"

    def fragment_options(self) -> dict[str, Any]:
        return {}


def fake_sweep(clock: Clock, budgets: list[float | None]) -> type:
    class FakeSweep:
        """A capacity search that runs steps while its budget lets it (as `Sweep._within_budget` does)."""

        def __init__(self, settings: SweepSettings) -> None:
            self.settings = settings
            self.capacity: dict[str, Any] = {"max_rps": 100.0, "first_failing_rps": None}
            self.steps: list[Any] = []
            self.signalled: int | None = None
            budgets.append(settings.budget_s)

        def run(self) -> int:
            step_s = (self.settings.warmup_s or 0.0) + (self.settings.rule.max_windows + 1) * (self.settings.window_s or 1.0)
            started = clock.now
            for _ in range(5):
                budget = self.settings.budget_s
                if budget is not None and budget - (clock.now - started) < step_s + 15.0:
                    break
                clock.now += step_s + 5.0  # a step and its start-up
            return 0

    return FakeSweep


@pytest.mark.parametrize("budget_s", [40.0, 90.0, 200.0])
def test_a_tune_ends_within_its_budget_putting_back_included(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget_s: float):
    clock = Clock()
    budgets: list[float | None] = []
    monkeypatch.setattr(tune_module.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(tune_module, "Sweep", fake_sweep(clock, budgets))
    sweep = SweepSettings(
        tmp_path / "s.yaml", tmp_path, StabilityRule(2, 30, 3), StopRules(slo={"p99_ms": 50}), window_s=1.0, warmup_s=1.0
    )
    settings = TuneSettings(
        tmp_path / "s.yaml", tmp_path, sweep=sweep, space=SearchSpace(), budget_s=budget_s, printer=lambda _: None
    )
    configurator = SlowConfigurator(clock)
    tuned = Tune(settings, [ServerTune("triton", "t", "cnn", configurator)])
    tuned.save = lambda: None  # type: ignore[method-assign]
    started = clock.now
    tuned.run()
    assert clock.now - started <= budget_s, (clock.now - started, budgets)  # 60 s of a 40 s budget before
    assert all(b is not None and b >= 0 for b in budgets)  # each capacity search had the budget left
    if budget_s >= 90.0:
        assert configurator.applied >= 1


def test_a_signal_during_a_candidate_stops_the_tune_and_puts_the_server_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = Clock()
    budgets: list[float | None] = []
    monkeypatch.setattr(tune_module.time, "monotonic", clock.monotonic)
    sweep_class = fake_sweep(clock, budgets)

    class SignalledSweep(sweep_class):  # type: ignore[misc, valid-type]
        def run(self) -> int:
            self.signalled = 15  # SIGTERM reached the step (ChildProcesses forwarded it)
            return 143

    monkeypatch.setattr(tune_module, "Sweep", SignalledSweep)
    sweep = SweepSettings(tmp_path / "s.yaml", tmp_path, StabilityRule(2, 30, 3), StopRules(slo={"p99_ms": 50}))
    settings = TuneSettings(tmp_path / "s.yaml", tmp_path, sweep=sweep, space=SearchSpace(), printer=lambda _: None)
    configurator = SlowConfigurator(clock)
    tuned = Tune(settings, [ServerTune("triton", "t", "cnn", configurator)])
    tuned.save = lambda: None  # type: ignore[method-assign]
    assert tuned.run() == 143
    assert configurator.applied == 1  # the baseline only: no other candidate started
    assert tuned.stopped == "interrupted" and tuned.results[0].error == "interrupted"
    assert tuned.winners() == {}
