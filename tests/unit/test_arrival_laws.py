"""Every arrival law behind one interface: gamma's burstiness, the replay law's time keys, and the
split over processes that keeps the whole schedule (pure: no server, no gevent)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from inferload.measure.run_record import GapStats
from inferload.traffic.arrivals import Arrival, ProcessSplit, ReplayLaw, WeightedTargets, law_for, take_share
from tests.support.ks import ks_against_exponential, ks_critical, ks_two_sample
from tests.support.scenario_factory import scenario, tiny_target


def gaps_of(shape: dict[str, Any], duration: str = "60s", seed: int = 3) -> list[float]:
    times = [a.t_s for a in law_for(scenario(shape, duration=duration)).arrivals(seed)]
    return [b - a for a, b in itertools.pairwise(times)]


def cv(gaps: list[float]) -> float:
    stats = GapStats()
    t = 0.0
    stats.add(t)
    for gap in gaps:
        t += gap
        stats.add(t)
    assert stats.cv is not None
    return stats.cv


def test_gamma_with_cv_1_has_poissons_inter_arrival_distribution() -> None:
    gamma = gaps_of({"kind": "gamma", "rate": 200, "cv": 1.0}, seed=1)
    poisson = gaps_of({"kind": "poisson", "rate": 200}, seed=2)
    n, m = len(gamma), len(poisson)
    assert ks_against_exponential(gamma, 200) < ks_critical(0.001, n)  # ~12,000 gaps: D < 0.018
    assert ks_two_sample(gamma, poisson) < ks_critical(0.001, n, m)
    assert cv(gamma) == pytest.approx(1.0, abs=0.03)


def test_gamma_with_cv_3_is_burstier_at_the_same_mean_rate() -> None:
    bursty = gaps_of({"kind": "gamma", "rate": 200, "cv": 3.0}, seed=1)
    assert len(bursty) / 60 == pytest.approx(200, rel=0.05)  # the count's sd is cv / sqrt(N): 2.7 %
    assert cv(bursty) == pytest.approx(3.0, rel=0.1)
    assert ks_against_exponential(bursty, 200) > 10 * ks_critical(0.001, len(bursty))  # far from Poisson
    short = sum(1 for gap in bursty if gap < 0.1 / 200)
    assert short / len(bursty) > 0.5  # most gaps are a tenth of the mean or less: the bursts


def test_a_seeded_law_draws_the_same_stream_on_every_process() -> None:
    law = law_for(scenario({"kind": "gamma", "rate": 500, "cv": 2.0}, duration="5s"))
    assert list(law.arrivals(9)) == list(law.arrivals(9))
    assert list(law.arrivals(9)) != list(law.arrivals(10))


def test_two_targets_share_the_rate_by_weight_in_one_ordered_stream() -> None:
    targets = [tiny_target("a", "triton-grpc", "127.0.0.1:1", weight=3), tiny_target("b", "triton-grpc", "127.0.0.1:1")]
    arrivals = list(law_for(scenario({"kind": "poisson", "rate": 400}, duration="30s", targets=targets)).arrivals(4))
    assert [a.t_s for a in arrivals] == sorted(a.t_s for a in arrivals)
    counts = Counter(a.target for a in arrivals)
    assert counts["a"] / 30 == pytest.approx(300, rel=0.03) and counts["b"] / 30 == pytest.approx(100, rel=0.05)


def test_the_split_over_processes_keeps_the_whole_schedule_even_when_it_changes() -> None:
    stream = [Arrival(k * 0.01, "t") for k in range(1000)]
    splits = [ProcessSplit(3, index) for index in range(3)]

    def resplit_at(split: ProcessSplit, process: int, index: int) -> Any:
        """The stream as one process sees it: the master's new split (worker 2 lost) arrives before arrival ``index``."""
        for i, arrival in enumerate(stream):
            if i == index:
                if process == 2:
                    return
                split.workers, split.index = 2, process
            yield arrival

    parts = [list(take_share(resplit_at(split, process, 400), split)) for process, split in enumerate(splits)]
    assert [len(part) for part in parts] == [134 + 300, 133 + 300, 133]
    union = sorted(itertools.chain.from_iterable(parts), key=lambda a: a.t_s)
    assert union == stream  # every arrival once: the whole schedule, before and after the change
    assert [a.t_s for a in parts[0][:3]] == [0.0, 0.03, 0.06]  # each process sends every third arrival ...
    assert [round(a.t_s, 2) for a in parts[0][134:137]] == [4.0, 4.02, 4.04]  # ... then every second one


def write_trace(folder: Path, rows: list[str], header: str = "t_s") -> Path:
    path = folder / "trace.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_speed_scales_time_and_the_run_cuts_the_replay(tmp_path: Path) -> None:
    path = write_trace(tmp_path, ["0", "1", "2", "3", "4"])
    assert [a.t_s for a in ReplayLaw(path, 10.0, speed=2.0, targets=[("t", 1.0)]).arrivals()] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert [a.t_s for a in ReplayLaw(path, 2.5, targets=[("t", 1.0)]).arrivals()] == [0.0, 1.0, 2.0]


def test_a_window_plays_from_its_start_and_a_loop_repeats_it(tmp_path: Path) -> None:
    path = write_trace(tmp_path, ["0", "1", "2", "3", "4", "5"])
    law = ReplayLaw(path, 7.0, start_s=1.0, window_s=2.5, loop=True, targets=[("t", 1.0)])  # 1, 2, 3 every 2.5 s
    assert [a.t_s for a in law.arrivals()] == [0.0, 1.0, 2.0, 2.5, 3.5, 4.5, 5.0, 6.0]
    unlooped = ReplayLaw(path, 60.0, start_s=3.0, targets=[("t", 1.0)])
    assert [a.t_s for a in unlooped.arrivals()] == [0.0, 1.0, 2.0]


def test_a_short_window_looped_at_a_high_rate_is_read_once_and_played_from_memory(tmp_path: Path, monkeypatch) -> None:
    import inferload.traffic.arrivals as arrivals_module

    path = write_trace(tmp_path, ["0", "0.001"])
    reads: list[Path] = []
    real_rows = arrivals_module.replay_rows

    def counted(file: Path, pause: Any = None) -> Any:
        reads.append(file)
        return real_rows(file, pause)

    monkeypatch.setattr(arrivals_module, "replay_rows", counted)
    law = ReplayLaw(path, 5.0, loop=True, rate=20_000.0, targets=[("t", 1.0)])
    played = [a.t_s for a in law.arrivals()]
    assert len(played) == 100_000  # 20,000 req/s for 5 s, to the request
    assert played[:3] == pytest.approx([0.0, 5e-05, 1e-04]) and played[-1] < 5.0
    assert len(reads) == 1  # the first pass (timing's scan reads the file on its own); before: 50,000 passes read it


def test_rate_rescales_the_window_keeping_its_shape(tmp_path: Path) -> None:
    times = [0.0, 0.1, 0.15, 1.0, 1.05, 1.9]  # bursty, 6 arrivals in a period of 1.9 + 1.9 / 5 s
    path = write_trace(tmp_path, [f"{t}" for t in times])
    law = ReplayLaw(path, 100.0, rate=30.0, loop=True, targets=[("t", 1.0)])
    played = [a.t_s for a in law.arrivals()]
    assert len(played) / 100.0 == pytest.approx(30.0, rel=0.01)
    scale = played[1] / times[1]
    assert [t * scale for t in times] == pytest.approx(played[:6])  # the same shape, time stretched


def test_rows_without_a_target_go_to_the_targets_by_weight(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [f"{k * 0.01:.2f},{'x' if k % 10 == 0 else ''}" for k in range(100)], header="t_s,target")
    arrivals = list(ReplayLaw(path, 10.0, targets=[("a", 0.75), ("b", 0.25)]).arrivals())
    counts = Counter(a.target for a in arrivals)
    assert counts["x"] == 10 and counts["a"] + counts["b"] == 90
    assert abs(counts["a"] - 0.75 * 90) <= 1, counts  # the weight's share, to one request


def test_smooth_weighted_round_robin_spreads_each_target_evenly() -> None:
    chooser = WeightedTargets([("a", 5.0), ("b", 1.0), ("c", 1.0)])
    assert [chooser.next() for _ in range(14)] == list("aabacaa") * 2


def test_a_long_file_lets_the_scheduler_run_while_it_is_read(tmp_path: Path) -> None:
    """Counting a window for ``rate`` and skipping to ``start`` read many rows at once: the reader
    pauses every PAUSE_EVERY rows (the scheduler lets the hub run there: Locust's heartbeats)."""
    path = write_trace(tmp_path, [f"{k * 0.001:.3f}" for k in range(25_000)])
    pauses: list[int] = []
    law = ReplayLaw(path, 100.0, start_s=20.0, rate=500.0, targets=[("t", 1.0)], pause=lambda: pauses.append(1))
    first = next(iter(law.arrivals()))
    assert first.t_s == 0.0
    assert len(pauses) == 2 + 2  # the count for rate (25,000 rows), then the skip to 20 s (20,000 rows)
