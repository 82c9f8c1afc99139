"""The tail anatomy: what the slow requests (above the p99) spent their time on, next to the typical
ones (around the p50), and a one-line verdict (pure; `inferload.measure.trace_join` makes the input).

For each group: the median of each part in milliseconds, the median *share* of each part (each
request's part over its own latency, then the median over the group: shares of one request add up
to 1, medians of shares need not), and the median batch size. The verdict names the part with the
largest median share above the p99, in four kinds:

    queueing           queue_ms
    compute            compute_input_ms + compute_infer_ms + compute_output_ms
    batching           compute, when the slow requests ran in larger batches than the typical ones
    network or client  network_client_ms + frontend_ms (the wire, the server's frontend, the client)

With the anatomy, ``residual_ms`` (`residual_distribution`, below): for each joined request, its
client latency minus Triton's own span of it (REQUEST_START .. its response's send start,
`trace_join.RESPONSE_LEFT`), i.e. what the server did not see (the client library, the load
generator, the wire both ways, Triton's frontend before the request). The summary's
``residual_ms`` is a difference of two means; this is nearly the same quantity request by request,
so its distribution shows whether the gap is a constant cost or a tail. Its percentiles are
nearest-rank (a value one request had); its histogram has ``BINS`` equal bins from the smallest
residual to the p99 and counts the requests above the p99 apart, so a few long ones do not flatten
the rest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from inferload.measure.trace_join import COMPONENTS, JoinedRequest

#: the verdict's kinds and the parts each adds up
KINDS: dict[str, tuple[str, ...]] = {
    "queueing": ("queue_ms",),
    "compute": ("compute_input_ms", "compute_infer_ms", "compute_output_ms"),
    "network or client": ("network_client_ms", "frontend_ms"),
}
#: fewer joined requests above the run's p99 than this: the p99 of the joined sample is used instead
MIN_TAIL = 3
#: the slow requests' median batch over the typical ones' at least this: compute is "batching"
BATCHING_RATIO = 1.5


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[rank]


def group_figures(requests: Sequence[JoinedRequest]) -> dict[str, Any]:
    """count, median latency, median ms and median share of each part and kind, median batch size."""
    if not requests:
        return {"count": 0}
    medians = {name: statistics.median(r.component(name) for r in requests) for name in COMPONENTS}
    shares = {
        name: statistics.median(r.component(name) / r.latency_ms if r.latency_ms > 0 else 0.0 for r in requests)
        for name in COMPONENTS
    }
    kinds = {
        kind: statistics.median(sum(r.component(p) for p in parts) / r.latency_ms if r.latency_ms > 0 else 0.0 for r in requests)
        for kind, parts in KINDS.items()
    }
    return {
        "count": len(requests),
        "latency_ms_median": round(statistics.median(r.latency_ms for r in requests), 3),
        "median_ms": {k: round(v, 3) for k, v in medians.items()},
        "median_share": {k: round(v, 4) for k, v in shares.items()},
        "kind_share": {k: round(v, 4) for k, v in kinds.items()},
        "batch_size_median": statistics.median(r.batch_size for r in requests),
    }


def verdict(tail: dict[str, Any], typical: dict[str, Any]) -> str | None:
    """queueing, batching, compute or network or client; None without slow requests."""
    if not tail.get("count"):
        return None
    kind_share: dict[str, float] = tail["kind_share"]
    kind = max(kind_share, key=lambda k: kind_share[k])
    slow_batch, typical_batch = tail["batch_size_median"], typical.get("batch_size_median", 0)
    if kind == "compute" and typical.get("count") and slow_batch > 1 and slow_batch >= BATCHING_RATIO * typical_batch:
        return "batching"
    return kind


def verdict_line(kind: str | None, tail: dict[str, Any], typical: dict[str, Any]) -> str:
    """The one line a reader takes away."""
    if kind is None:
        return "no traced request above the p99: nothing to explain"
    shares = tail["kind_share"]
    share = shares["compute" if kind == "batching" else kind]
    where = {
        "queueing": "waiting in Triton's queue",
        "compute": "in the model's execution",
        "batching": "in the model's execution",
    }
    place = where.get(kind, "on the wire, in Triton's frontend or in the client")
    line = f"the p99 is {kind}: {share:.0%} of a slow request's time is spent {place}"
    line += f" (median over {tail['count']} requests above the p99, {tail['latency_ms_median']:g} ms each"
    if typical.get("count"):
        base = typical["kind_share"]["compute" if kind == "batching" else kind]
        line += f"; {base:.0%} around the p50"
    if kind == "batching":
        line += f"; batch {tail['batch_size_median']:g} vs {typical['batch_size_median']:g} around the p50"
    return line + ")"


def tail_anatomy(requests: Sequence[JoinedRequest], p99_ms: float | None, p50_ms: float | None) -> dict[str, Any]:
    """The anatomy of the joined requests against the run's p99 and p50 (client latency, all requests)."""
    latencies = [r.latency_ms for r in requests]
    threshold = p99_ms if p99_ms is not None else _percentile(latencies, 99)
    basis = "run"
    slow = [r for r in requests if r.latency_ms >= threshold]
    if len(slow) < MIN_TAIL and requests:
        threshold = _percentile(latencies, 99)
        basis = "sample"
        slow = [r for r in requests if r.latency_ms >= threshold]
    low, high = _percentile(latencies, 40), _percentile(latencies, 60)
    typical = [r for r in requests if low <= r.latency_ms <= high]
    tail, middle = group_figures(slow), group_figures(typical)
    kind = verdict(tail, middle)
    return {
        "joined": len(requests),
        "p99_ms": round(threshold, 3),
        "p99_basis": basis,
        "p50_ms": p50_ms,
        "above_p99": tail,
        "around_p50": middle,
        "verdict": kind,
        "verdict_line": verdict_line(kind, tail, middle),
    }


def tail_summary(tail: dict[str, Any], p99_ms: float | None, p50_ms: float | None) -> dict[str, Any]:
    """``targets.<t>.tail``: a run's trace join (`inferload.run.trace_run`) with its anatomy against the
    run's own p99 and p50; the joined requests themselves are not kept."""
    out = {key: value for key, value in tail.items() if key != "requests"}
    joined = tail.get("requests")
    if joined:
        out.update(tail_anatomy(joined, p99_ms, p50_ms))
        out["residual_ms"] = residual_distribution(joined)  # per request: client latency - Triton's span
    return out


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
