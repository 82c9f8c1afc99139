"""Each target's server figures as the tab shows them: over the steady state so far while the run
goes (the reading at the warm-up's end to the newest per-window reading), and once it stopped,
exactly the `server_side` that summary.json gets. Pure: the readings are handed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferload.errors import InferloadError
from inferload.scenario.model import Scenario
from inferload.servermetrics.readers import server_side
from inferload.servermetrics.reading import ServerSnapshot
from inferload.servermetrics.sharing import reading_groups


@dataclass(frozen=True)
class ServerReadings:
    """What the run read of its servers (by the name of each reading group's first target, except
    `final` and `errors`, which are by target): at the warm-up's end, the newest per-window reading,
    and after the stop the summary's figures and the reasons some are missing."""

    at_warmup_end: Mapping[str, ServerSnapshot]
    newest: Mapping[str, ServerSnapshot]
    final: Mapping[str, Mapping[str, Any] | None]
    errors: Mapping[str, str]


@dataclass(frozen=True)
class ServerView:
    """One target's server figures (None: not known, `why` says why)."""

    figures: Mapping[str, Any] | None
    why: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"figures": None if self.figures is None else dict(self.figures), "why": self.why}


def server_views(scenario: Scenario, readings: ServerReadings, stopped: bool, in_warmup: bool) -> dict[str, ServerView]:
    """target name -> its server figures now (see the module's docstring)."""
    views: dict[str, ServerView] = {}
    for group in reading_groups(scenario.targets):
        read = group[0].name
        others = {t.name: [o.name for o in group if o.name != t.name] for t in group}
        for target in group:
            views[target.name] = _view(read, target.name, others[target.name], readings, stopped, in_warmup)
    return views


def _view(read: str, name: str, others: list[str], readings: ServerReadings, stopped: bool, in_warmup: bool) -> ServerView:
    error = readings.errors.get(name)
    if stopped and name in readings.final:
        final = readings.final[name]
        return ServerView(final, None if final is not None else error or "the server could not be read")
    if error is not None:
        return ServerView(None, error)
    before = readings.at_warmup_end.get(read)
    if before is None:
        why = "server figures start when the warm-up ends" if in_warmup or not stopped else "not read yet"
        return ServerView(None, why)
    after = readings.newest.get(read)
    if after is None or after.taken_at <= before.taken_at:
        return ServerView(None, "waiting for the first server reading after the warm-up (one per window)")
    try:
        figures = server_side(before, after)
    except InferloadError as exc:  # counters went backwards: the server restarted
        return ServerView(None, str(exc))
    if others:
        figures = {**figures, "scope": "model", "shared_with": others}
    return ServerView(figures, None)
