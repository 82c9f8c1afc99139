"""A server source: two readings of a model's counters (servermetrics) → `server` and
`batch_sizes` points. The figures are `servermetrics.figures.server_figures`, the same function
summary.json's `server_side` uses; this module only turns them into points.

After a failed read or a restart (counters that went down) the interval gives no points and the
new reading becomes the baseline, so rates are never smeared over a gap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from inferload.errors import ScrapeError
from inferload.observe.sink.line_protocol import FieldValue, Point, seconds_to_ns
from inferload.servermetrics.figures import ServerFigures, server_figures
from inferload.servermetrics.reading import ServerSnapshot


def server_point(target: str, figures: ServerFigures, time_s: float) -> Point:
    """The `server` point of one interval (`pending` only where the server reports it)."""
    fields: dict[str, FieldValue] = {
        "inferences_per_s": figures.inferences_per_s,
        "executions_per_s": figures.executions_per_s,
        "avg_batch_size": figures.avg_batch_size,
        "queue_ms": figures.queue_ms,
        "compute_ms": figures.compute_ms,
        "request_ms": figures.request_ms,
        "failures_per_s": figures.failures_per_s,
    }
    if figures.pending is not None:
        fields["pending"] = figures.pending
    tags = {"target": target, "server": figures.server, "model": figures.model}
    return Point("server", tags, fields, seconds_to_ns(time_s))


def batch_size_points(target: str, model: str, counts: dict[int, int], time_s: float) -> list[Point]:
    """One `batch_sizes` point per batch size formed in the interval."""
    return [
        Point("batch_sizes", {"target": target, "model": model, "batch_size": str(size)}, {"count": count}, seconds_to_ns(time_s))
        for size, count in sorted(counts.items())
    ]


def figure_points(target: str, figures: ServerFigures, time_s: float) -> list[Point]:
    points = [server_point(target, figures, time_s)]
    if figures.batch_sizes:
        points.extend(batch_size_points(target, figures.model, figures.batch_sizes, time_s))
    return points


class ServerSource(ABC):
    """One model of one target: `read(now)` a reading, and points from it and the previous one."""

    def __init__(self, name: str, target: str, model: str) -> None:
        self.name = name
        self.target = target
        self.model = model
        self._previous: ServerSnapshot | None = None

    @abstractmethod
    def read(self, now: float) -> ServerSnapshot | None:
        """The model's counters now; None when the server does not show the model yet."""

    def scrape(self, now: float) -> list[Point]:
        try:
            current = self.read(now)
        except ScrapeError:
            self._previous = None
            raise
        previous, self._previous = self._previous, current
        if previous is None or current is None:
            return []
        try:
            figures = server_figures(previous, current)
        except ScrapeError:  # the server restarted: this reading is the new baseline
            return []
        if figures.interval_s <= 0:
            return []
        return figure_points(self.target, figures, now)

    def close(self) -> None:  # noqa: B027 (readers without connections keep this default)
        """Close the reader's connections."""
