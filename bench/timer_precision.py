"""How late an idle gevent loop wakes a greenlet for an arrival with `gevent.sleep` (the scheduler's wait).

    python -m bench.timer_precision

No server, no Locust users: one greenlet waits for 3,000 arrivals (evenly spaced and Poisson,
mean gap 200 µs, 300 µs, 2 ms) and records how late after each intended time it runs. This is
the floor under the open-loop send lag (item 4 of `make bench`): libev's epoll backend rounds
every timer wait up to whole milliseconds (at least 1 ms), so `gevent.sleep` alone gives
~0.55 ms p50 / ~1.1 ms p99. (A timerfd wait was tried and not kept: docs/benchmarks-history.md.)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import gevent

ARRIVALS = 3000


def _gevent_sleep_until(when: float) -> None:
    delay = when - time.time()
    if delay > 0:
        gevent.sleep(delay)


def lateness(wait_until: Callable[[float], None], gap_s: float, poisson: bool) -> dict[str, float]:
    rng = random.Random(1)
    started, t, lags = time.time(), 0.0, []
    cpu = time.process_time()
    for _ in range(ARRIVALS):
        t += rng.expovariate(1 / gap_s) if poisson else gap_s
        intended = started + t
        wait_until(intended)
        lags.append((time.time() - intended) * 1000.0)
    cpu = time.process_time() - cpu
    lags.sort()
    return {
        "p50_ms": round(lags[len(lags) // 2], 3),
        "p99_ms": round(lags[int(len(lags) * 0.99)], 3),
        "max_ms": round(lags[-1], 3),
        "early": sum(1 for x in lags if x < 0),
        "cpu_us_per_arrival": round(cpu / ARRIVALS * 1e6, 1),
    }


def main() -> None:
    for gap in (0.0002, 0.0003, 0.002):
        for poisson in (False, True):
            r = lateness(_gevent_sleep_until, gap, poisson)
            print(
                f"gap {gap * 1e6:5.0f} us {'poisson ' if poisson else 'constant'} gevent.sleep "
                f"late p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} max {r['max_ms']:.3f} ms  "
                f"early {r['early']}  CPU {r['cpu_us_per_arrival']} us/arrival",
                flush=True,
            )


if __name__ == "__main__":
    main()
