"""The per-request residual of a traced target: for each joined request, its client latency minus
Triton's own span of it (REQUEST_START .. its response's send start, `trace_join.RESPONSE_LEFT`),
i.e. what the server did not see (the client library, the load generator, the wire both ways,
Triton's frontend before the request).
Pure: `inferload.results.tail` adds it to ``targets.<t>.tail.residual_ms``.

``residual_ms`` in the summary is the difference of two means (client mean - Triton's mean request
duration over the whole run, which ends at REQUEST_END); this is nearly the same quantity request
by request, so its distribution shows whether the gap is a constant cost or a tail (a few requests
that waited in the client).

Percentiles are nearest-rank (a value one request had: the smallest value with at least q % of the
requests at or below it). The histogram has ``BINS`` equal bins from the smallest residual to the
p99, and counts the requests above the p99 separately, so a few long ones do not flatten the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from inferload.measure.trace_join import JoinedRequest

BINS = 10
QUANTILES = (50, 90, 99)


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted values, nearest-rank (ordered must not be empty)."""
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def histogram(ordered: Sequence[float], high: float, bins: int = BINS) -> dict[str, Any]:
    """``bins`` equal bins from the smallest value to ``high`` (the last one closed), and the count above."""
    low = ordered[0]
    width = (high - low) / bins if high > low else 0.0
    counts = [0] * bins
    above = 0
    for value in ordered:
        if value > high:
            above += 1
        elif width == 0.0:
            counts[0] += 1
        else:
            counts[min(bins - 1, int((value - low) / width))] += 1
    edges = [round(low + i * width, 4) for i in range(bins + 1)]
    return {"edges_ms": edges, "counts": counts, "above": above}


def residual_distribution(requests: Sequence[JoinedRequest]) -> dict[str, Any] | None:
    """n, mean, min, p50, p90, p99, max (ms) and a histogram of the joined requests' residuals; None
    without joined requests."""
    if not requests:
        return None
    ordered = sorted(r.residual_ms for r in requests)
    figures: dict[str, Any] = {"n": len(ordered), "mean": round(sum(ordered) / len(ordered), 4), "min": round(ordered[0], 4)}
    for q in QUANTILES:
        figures[f"p{q}"] = round(nearest_rank(ordered, q), 4)
    figures["max"] = round(ordered[-1], 4)
    figures["histogram"] = histogram(ordered, nearest_rank(ordered, 99))
    return figures
