"""`inferload tune` ranks candidates by their capacity intervals: a candidate becomes the best only when
its interval clears the best's; the winner is declared outright only when its interval clears the
runner-up's, else the servers' candidates are "tied within noise". No server: the
candidates' capacities are given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferload.measure.windows import StabilityRule
from inferload.tune.server_config import SearchSpace
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep import SweepSettings
from inferload.tune.tune import CandidateResult, ServerTune, Tune, TuneSettings, beats, clears


def candidate(name: str, estimate: float, low: float, high: float | None, server: str = "triton") -> CandidateResult:
    return CandidateResult(
        server,
        name,
        {},
        {},
        capacity_rps=low,
        first_failing_rps=high,
        capacity_estimate_rps=estimate,
        capacity_low_rps=low,
        capacity_high_rps=high,
    )


def test_an_interval_that_clears_the_others_wins_and_an_overlapping_one_ties():
    baseline = candidate("no batching", 200, 180, 220)
    overlapping = candidate("batching 100 us", 230, 210, 250)
    clear = candidate("batching 1000 us", 300, 270, 330)
    assert clears(clear, baseline) and not clears(overlapping, baseline) and not clears(baseline, overlapping)
    assert not beats(overlapping, baseline, 5.0)  # 15 % higher, but within the noise
    assert beats(clear, baseline, 5.0)
    assert not beats(clear, candidate("b", 290, 280, None), 0.0)  # an open interval cannot be cleared


class NoConfigurator:
    changed = False

    def current(self) -> dict[str, Any]:
        return {}

    def apply(self, asked: Any) -> dict[str, Any]:
        return {}

    def restore(self) -> str | None:
        return None

    def fragment_options(self) -> dict[str, Any]:
        return {}


def tune_of(tmp_path: Path, results: list[CandidateResult], lines: list[str]) -> Tune:
    sweep = SweepSettings(tmp_path / "s.yaml", tmp_path, StabilityRule(3, 10, 10), StopRules(slo={"p99_ms": 50.0}))
    settings = TuneSettings(tmp_path / "s.yaml", tmp_path, sweep=sweep, space=SearchSpace(), printer=lines.append)
    tuned = Tune(settings, [ServerTune("triton", "t", "cnn", NoConfigurator())])
    tuned.results = results
    return tuned


def test_the_winner_is_tied_within_noise_unless_its_interval_clears_the_runner_up(tmp_path: Path):
    lines: list[str] = []
    tuned = tune_of(tmp_path, [candidate("no batching", 200, 180, 220), candidate("batching 100 us", 230, 210, 250)], lines)
    winner = tuned.winners()["triton"]
    assert winner.name == "batching 100 us" and [t.name for t in tuned.tied_with(winner)] == ["no batching"]
    document = tuned.document()["winners"]["triton"]
    assert document["decided"] is False and document["tied_with"] == ["no batching"]
    tuned.print_end()
    assert any(
        line.startswith("triton: tied within noise under p99 ≤ 50 ms: batching 100 us 230 [210, 250] req/s; no batching")
        for line in lines
    ), lines

    lines.clear()
    tuned = tune_of(tmp_path, [candidate("no batching", 200, 180, 220), candidate("batching 1000 us", 300, 270, 330)], lines)
    assert tuned.document()["winners"]["triton"]["decided"] is True
    tuned.print_end()
    assert any(
        "triton: best batching 1000 us: 300 [270, 330] req/s under p99 ≤ 50 ms, clearing no batching" in line for line in lines
    ), lines


def test_the_loop_keeps_the_simpler_candidate_when_the_next_is_within_noise(tmp_path: Path):
    lines: list[str] = []
    tuned = tune_of(tmp_path, [], lines)
    tuned.save = lambda: None  # type: ignore[method-assign]
    capacities = iter([(200, 180, 220), (230, 210, 250), (240, 215, 265), (260, 235, 285)])

    def score(tune: ServerTune, asked: Any, start: float) -> CandidateResult:
        estimate, low, high = next(capacities)
        return candidate(asked.name, estimate, low, high)

    tuned.score = score  # type: ignore[method-assign,assignment]
    tuned.tune_server(tuned.servers[0])
    assert (
        "[triton] batching did not beat the best (no batching, 1 instance: 200 [180, 220] req/s) beyond the noise and by 5 %"
        in lines
    )
