"""Mergeable latency statistics: an HDR histogram (3 significant digits) plus exact count, sum, max.

Latencies are recorded in microseconds; figures come out in milliseconds. Two `LatencyStats`
merge exactly (histogram counts add up), so percentiles over many workers are those of all
requests together, not an average of per-worker percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


@dataclass
class LatencyStats:
    """Successful requests' latencies, and the count of failed ones."""

    histogram: HdrHistogram = field(default_factory=new_histogram)
    successes: int = 0
    failures: int = 0
    sum_ms: float = 0.0
    max_ms: float = 0.0

    def record_success(self, latency_ms: float) -> None:
        self.histogram.record_value(min(HIGHEST_US, max(LOWEST_US, round(latency_ms * 1000.0))))
        self.successes += 1
        self.sum_ms += latency_ms
        if latency_ms > self.max_ms:
            self.max_ms = latency_ms

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

    def latency_ms(self) -> dict[str, float | None]:
        """mean, p50, p90, p95, p99, p999, max in ms (None when nothing succeeded)."""
        if not self.successes:
            return {"mean": None, **{k: None for k in PERCENTILES}, "max": None}
        figures: dict[str, float | None] = {"mean": self.sum_ms / self.successes}
        for key, pct in PERCENTILES.items():
            figures[key] = self.histogram.get_value_at_percentile(pct) / 1000.0
        figures["max"] = self.max_ms
        return figures

    # -- transport between Locust workers and the master (msgpack-friendly) --------------
    def to_wire(self) -> dict:
        return {
            "h": self.histogram.encode().decode("ascii") if self.successes else "",
            "s": self.successes,
            "f": self.failures,
            "sum": self.sum_ms,
            "max": self.max_ms,
        }

    @classmethod
    def from_wire(cls, data: dict) -> LatencyStats:
        stats = cls(successes=int(data["s"]), failures=int(data["f"]), sum_ms=float(data["sum"]), max_ms=float(data["max"]))
        if data["h"]:
            stats.histogram.decode_and_add(data["h"])
        return stats
