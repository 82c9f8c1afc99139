"""A scenario's arrival law: the replay law for a replay shape, a rate law for every other open-loop shape."""

from __future__ import annotations

from inferload.scenario.replay_file import Pause
from inferload.scenario.schema import Scenario, is_open_loop
from inferload.scenario.shapes import ReplayShape
from inferload.traffic.arrivals import ArrivalLaw, RateLaw, Timeline, rate_timeline
from inferload.traffic.replay import ReplayLaw


def target_shares(scenario: Scenario) -> tuple[tuple[str, float], ...]:
    """(target name, share of the run's rate by weight), in the scenario's order."""
    total = sum(target.weight for target in scenario.targets)
    return tuple((target.name, target.weight / total) for target in scenario.targets)


def law_for(scenario: Scenario, pause: Pause | None = None, timeline: Timeline | None = None) -> ArrivalLaw:
    """The arrival law of an open-loop scenario (TypeError for a closed-loop one); a replay's reader
    calls ``pause`` every few thousand rows; ``timeline``: a rate shape's rate over the run in place
    of the shape's (`--ramp-hold`'s adjustable one)."""
    shape = scenario.shape
    if not is_open_loop(shape):
        raise TypeError(f"a closed-loop shape ({shape.kind}) has no arrival law")
    if isinstance(shape, ReplayShape):
        return ReplayLaw.from_shape(shape, scenario.duration, target_shares(scenario), pause)
    return RateLaw(timeline or rate_timeline(shape, scenario.duration), target_shares(scenario))
