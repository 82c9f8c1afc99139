"""Mergeable latency statistics: an HDR histogram (3 significant digits) plus exact count, sum, min, max.

Latencies are recorded in microseconds; figures come out in milliseconds. Two `LatencyStats`
merge exactly (histogram counts add up), so percentiles over many workers are those of all
requests together, not an average of per-worker percentiles. Percentiles are clamped to the
exact min and max: HDR reports a bucket's highest equivalent value, which can lie above the
largest latency actually seen.

A full histogram (1 µs .. 1 h) holds ~23,500 counters (~184 KB). A window that can no longer
receive data is kept as a `ClosedStats` instead: the histogram's compressed encoding (a few
hundred bytes) and its figures, computed once. `reopen()` turns it back into a `LatencyStats`
that merges exactly, for figures that arrive late.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
FIGURE_KEYS = ("mean", *PERCENTILES, "max")

Figures = dict[str, float | None]


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def percentile_values_us(histogram: HdrHistogram, percentiles: Iterable[float]) -> list[int]:
    """The nearest-rank p-th percentile for each p (0 < p <= 100): the value of the ceil(p/100 * n)-th
    smallest latency, to the histogram's resolution, the definition `requests.csv` gives when sorted.
    HdrHistogram's own lookup rounds the rank to nearest instead, one request lower whenever p/100 * n
    has a fraction under one half, which in a sparse tail moves p99 by a whole neighbour's gap. One
    cumulative sum over the counters, not a Python loop over ~23,500 of them per percentile."""
    cumulative = np.cumsum(np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len], dtype=np.uint64)
    total = int(cumulative[-1]) if len(cumulative) else 0
    ranks = [max(1, math.ceil(min(pct, 100.0) * total / 100.0 - 1e-9)) for pct in percentiles]
    indices = np.searchsorted(cumulative, np.array(ranks, dtype=np.uint64), side="left")  # the first counter reaching the rank
    return [histogram.get_highest_equivalent_value(histogram.get_value_from_index(int(i))) for i in indices]


def no_figures() -> Figures:
    return dict.fromkeys(FIGURE_KEYS)


class WindowStats(Protocol):
    """What readers of a window need; both `LatencyStats` and `ClosedStats` have it."""

    @property
    def successes(self) -> int: ...

    @property
    def failures(self) -> int: ...

    @property
    def requests(self) -> int: ...

    def latency_ms(self) -> Figures: ...

    def to_wire(self) -> dict[str, Any]: ...


@dataclass
class LatencyStats:
    """Successful requests' latencies, and the count of failed ones."""

    histogram: HdrHistogram = field(default_factory=new_histogram)
    successes: int = 0
    failures: int = 0
    sum_ms: float = 0.0
    max_ms: float = 0.0
    min_ms: float = math.inf

    def record_success(self, latency_ms: float) -> None:
        self.histogram.record_value(min(HIGHEST_US, max(LOWEST_US, round(latency_ms * 1000.0))))
        self.successes += 1
        self.sum_ms += latency_ms
        if latency_ms > self.max_ms:
            self.max_ms = latency_ms
        if latency_ms < self.min_ms:
            self.min_ms = latency_ms

    def record_failure(self) -> None:
        self.failures += 1

    @property
    def requests(self) -> int:
        return self.successes + self.failures

    def merge(self, other: LatencyStats) -> None:
        if other.successes:
            self.histogram.add(other.histogram)
        self.successes += other.successes
        self.failures += other.failures
        self.sum_ms += other.sum_ms
        self.max_ms = max(self.max_ms, other.max_ms)
        self.min_ms = min(self.min_ms, other.min_ms)

    def latency_ms(self) -> Figures:
        """mean, p50, p90, p95, p99, p999, max in ms (None when nothing succeeded).

        Percentiles lie within [min, max] of the recorded latencies."""
        if not self.successes:
            return no_figures()
        figures: Figures = {"mean": self.sum_ms / self.successes}
        for key, value_us in zip(PERCENTILES, percentile_values_us(self.histogram, PERCENTILES.values()), strict=True):
            figures[key] = min(self.max_ms, max(self.min_ms, value_us / 1000.0))
        figures["max"] = self.max_ms
        return figures

    def close(self) -> ClosedStats:
        """This window as its compressed histogram and figures (a few hundred bytes)."""
        encoded = self.histogram.encode().decode("ascii") if self.successes else ""
        figures = self.latency_ms()
        return ClosedStats(
            encoded=encoded,
            successes=self.successes,
            failures=self.failures,
            sum_ms=self.sum_ms,
            max_ms=self.max_ms,
            min_ms=self.min_ms,
            figures=tuple(figures[k] for k in FIGURE_KEYS),
        )

    def release(self) -> None:
        """Let the histogram's counters go as soon as nothing else refers to it. An HdrHistogram
        and its encoder refer to each other, so a dropped one would wait for the cyclic garbage
        collector, which runs rarely once the objects are old: memory would grow in between.
        The histogram cannot encode or merge after this; call it only when dropping the stats."""
        encoder = getattr(self.histogram, "encoder", None)
        if encoder is not None and getattr(encoder, "histogram", None) is self.histogram:
            encoder.histogram = None

    # -- transport between Locust workers and the master (msgpack-friendly) --------------
    def to_wire(self) -> dict[str, Any]:
        return {
            "h": self.histogram.encode().decode("ascii") if self.successes else "",
            "s": self.successes,
            "f": self.failures,
            "sum": self.sum_ms,
            "max": self.max_ms,
            "min": self.min_ms if self.successes else 0.0,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> LatencyStats:
        stats = cls(successes=int(data["s"]), failures=int(data["f"]), sum_ms=float(data["sum"]), max_ms=float(data["max"]))
        if data["h"]:
            decoded = HdrHistogram.decode(data["h"])
            stats.histogram.add(decoded)
            cls(histogram=decoded).release()
        if stats.successes:
            # a report without "min" (an older worker): the histogram's lowest equivalent value
            stats.min_ms = float(data["min"]) if "min" in data else stats.histogram.get_min_value() / 1000.0
        return stats


@dataclass(frozen=True, slots=True)
class ClosedStats:
    """A window that no longer receives data: compressed histogram, exact totals, figures."""

    encoded: str  # HdrHistogram.encode() (base64 of the compressed V2 encoding); "" when nothing succeeded
    successes: int
    failures: int
    sum_ms: float
    max_ms: float
    min_ms: float
    figures: tuple[float | None, ...]  # in FIGURE_KEYS order

    @classmethod
    def empty(cls) -> ClosedStats:
        """A window in which no request finished."""
        return cls("", 0, 0, 0.0, 0.0, math.inf, (None,) * len(FIGURE_KEYS))

    @property
    def requests(self) -> int:
        return self.successes + self.failures

    def latency_ms(self) -> Figures:
        return dict(zip(FIGURE_KEYS, self.figures, strict=True))

    def reopen(self) -> LatencyStats:
        """A full `LatencyStats` again, equal to the one that was closed (merges exactly)."""
        stats = LatencyStats(
            successes=self.successes, failures=self.failures, sum_ms=self.sum_ms, max_ms=self.max_ms, min_ms=self.min_ms
        )
        if self.encoded:
            decoded = HdrHistogram.decode(self.encoded)
            stats.histogram.add(decoded)
            LatencyStats(histogram=decoded).release()
        return stats

    def to_wire(self) -> dict[str, Any]:
        return {
            "h": self.encoded,
            "s": self.successes,
            "f": self.failures,
            "sum": self.sum_ms,
            "max": self.max_ms,
            "min": self.min_ms if self.successes else 0.0,
        }
