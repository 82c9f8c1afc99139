"""A server whose truth is known, simulated: N service slots, FIFO, a fixed service time (M/D/N with
Poisson arrivals, D/D/N with evenly spaced ones), as the reference server scripts it.

`simulate_run` gives what a capacity-search run would measure (its steady windows' histograms);
`true_boundary` the highest rate whose p-th percentile stays under a bound, from one long simulation
per rate (bisection), for tests that assert an answer's interval contains the truth;
`short_step_boundary` the highest rate a step of a few seconds can still pass at (near saturation a
queue that starts empty takes longer than a short step to reach its steady p99, so a short step
passes above the steady boundary now and then). `simulate_closed_run` and `true_users_boundary` are
the same server under closed-loop users (each sends its next request when its last one is answered).
Pure numpy and Python: no server, no clock.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from functools import lru_cache

import numpy as np

from inferload.tune.capacity import RunEvidence
from inferload.tune.capacity_stats import WindowHistogram, histogram_of


def arrivals(rate: float, seconds: float, rng: np.random.Generator, poisson: bool = True) -> np.ndarray:
    """Intended send times (s) over `seconds` at `rate` req/s."""
    count = int(rate * seconds * 1.2) + 20
    gaps = rng.exponential(1.0 / rate, count) if poisson else np.full(count, 1.0 / rate)
    times = np.cumsum(gaps)
    return times[times < seconds]


def latencies_ms(
    times: np.ndarray, slots: int, service_ms: float, extra_ms: np.ndarray | None = None, max_in_flight: int | None = None
) -> np.ndarray:
    """Each request's latency from its intended send time: FIFO over `slots` servers of a fixed service
    time (a request starts when it has arrived and the request `slots` before it has finished)."""
    service = service_ms / 1000.0
    finish = np.empty(len(times))
    for i, arrived in enumerate(times):
        start = arrived if i < slots else max(arrived, finish[i - slots])
        finish[i] = start + service + (0.0 if extra_ms is None else extra_ms[i] / 1000.0)
    return (finish - times) * 1000.0


def simulate_run(
    rate: float,
    slots: int,
    service_ms: float,
    rng: np.random.Generator,
    windows: int = 4,
    warmup_s: float = 1.0,
    window_s: float = 1.0,
    poisson: bool = True,
    stall_ms: float = 0.0,
    stall_chance: float = 0.0,
    step: int = 0,
    good_under_ms: float | None = None,
) -> RunEvidence:
    """One run at `rate`: `windows` steady windows after the warm-up. A stall (a noisy machine: the
    server stops for `stall_ms`) starts in each window with `stall_chance`. `good_under_ms`: each
    window's requests are judged for goodput, good when they took at most that long."""
    seconds = warmup_s + windows * window_s
    times = arrivals(rate, seconds, rng, poisson)
    extra = np.zeros(len(times))
    for index in range(math.ceil(seconds / window_s)):
        if stall_chance and rng.random() < stall_chance:
            at = (index + rng.random()) * window_s
            first = int(np.searchsorted(times, at))
            if first < len(times):
                extra[first] += stall_ms  # the request in service when it stalls holds its slot longer
    latency = latencies_ms(times, slots, service_ms, extra)
    kept: list[WindowHistogram] = []
    for index in range(windows):
        start = warmup_s + index * window_s
        chosen = (times >= start) & (times < start + window_s)
        window = histogram_of(latency[chosen])
        if good_under_ms is not None:
            window = dataclasses.replace(window, good=int((latency[chosen] <= good_under_ms).sum()))
        kept.append(window)
    return RunEvidence(rate=rate, windows=tuple(kept), step=step)


def long_run_percentile(
    rate: float, slots: int, service_ms: float, percentile: float, poisson: bool = True, seconds: float = 400.0, seed: int = 7
) -> float:
    rng = np.random.default_rng(seed)
    latency = latencies_ms(arrivals(rate, seconds, rng, poisson), slots, service_ms)
    return float(np.percentile(latency[len(latency) // 20 :], percentile))


@lru_cache(maxsize=64)
def true_boundary(slots: int, service_ms: float, bound_ms: float, percentile: float = 99.0, poisson: bool = True) -> float:
    """The highest rate whose `percentile` stays under `bound_ms` (±0.2 %), by bisection on long runs."""
    low, high = 0.05 * slots / (service_ms / 1000.0), slots / (service_ms / 1000.0)
    while high / low - 1.0 > 0.002:
        middle = (low + high) / 2.0
        if long_run_percentile(middle, slots, service_ms, percentile, poisson) <= bound_ms:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


@lru_cache(maxsize=64)
def short_step_boundary(
    slots: int,
    service_ms: float,
    bound_ms: float,
    measured_s: float,
    warmup_s: float,
    chance: float = 0.02,
    percentile: float = 99.0,
    replicates: int = 200,
    seed: int = 11,
) -> float:
    """The highest rate at which at least `chance` of steps (Poisson arrivals into an empty queue,
    `warmup_s` excluded, `measured_s` measured) see their `percentile` under `bound_ms` (±0.2 %).
    The same unit-rate arrivals are scaled to every rate, so the passing share falls monotonically."""
    rng = np.random.default_rng(seed)
    seconds = warmup_s + measured_s
    top_rate = 2.0 * slots / (service_ms / 1000.0)
    unit_times = [arrivals(1.0, seconds * top_rate, rng) for _ in range(replicates)]

    def passing_share(rate: float) -> float:
        passed = 0
        for unit in unit_times:
            times = unit / rate
            times = times[times < seconds]
            latency = latencies_ms(times, slots, service_ms)
            passed += float(np.percentile(latency[times >= warmup_s], percentile)) <= bound_ms
        return passed / replicates

    low, high = 0.05 * top_rate / 2.0, top_rate
    while high / low - 1.0 > 0.002:
        middle = (low + high) / 2.0
        if passing_share(middle) >= chance:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def closed_loop_latencies_ms(
    users: int, slots: int, service_ms: float, seconds: float, rng: np.random.Generator, jitter: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """(send times s, latencies ms) of `users` closed-loop users for `seconds`: each sends again when its
    last request is answered; FIFO over `slots`, each hold `service_ms` x (1 + up to `jitter`)."""
    ready = [(0.0, user) for user in range(users)]  # (send time, user), served in the order sent
    heapq.heapify(ready)
    free = [0.0] * slots  # when each slot is next free
    sent: list[float] = []
    took: list[float] = []
    while ready:
        at, user = heapq.heappop(ready)
        if at >= seconds:
            continue
        slot = min(range(slots), key=free.__getitem__)
        done = max(at, free[slot]) + service_ms / 1000.0 * (1.0 + jitter * rng.random())
        free[slot] = done
        sent.append(at)
        took.append((done - at) * 1000.0)
        heapq.heappush(ready, (done, user))
    return np.asarray(sent), np.asarray(took)


def simulate_closed_run(
    users: float, slots: int, service_ms: float, rng: np.random.Generator, windows: int = 4, step: int = 0
) -> RunEvidence:
    """One closed-loop run at `users`: `windows` steady windows of 1 s after a 1 s warm-up."""
    times, latency = closed_loop_latencies_ms(int(users), slots, service_ms, 1.0 + windows, rng)
    kept = tuple(histogram_of(latency[(times >= 1.0 + index) & (times < 2.0 + index)]) for index in range(windows))
    return RunEvidence(rate=float(users), windows=kept, step=step)


@lru_cache(maxsize=16)
def true_users_boundary(slots: int, service_ms: float, bound_ms: float, percentile: float = 99.0) -> int:
    """The most users whose `percentile` stays under `bound_ms`, from one long run per count (the
    latency grows with the users: by Little's law, about users x hold / slots once every slot is busy)."""
    rng = np.random.default_rng(5)
    users = 1
    while True:
        times, latency = closed_loop_latencies_ms(users + 1, slots, service_ms, 120.0, rng)
        if float(np.percentile(latency[times >= 5.0], percentile)) > bound_ms:
            return users
        users += 1
