"""InfluxDB sink throughput: points/s through inferload's BackgroundWriter into a real InfluxDB.

    python -m bench.sink_bench URL DATABASE POINTS OUT_JSON

Runs under gevent like a Locust process: `requests`-shaped points (the tags and fields a real
window point has) are submitted in chunks of one window's worth, and the clock stops when the
writer reports every point written.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import gevent
import locust  # noqa: F401  (first: gevent monkey patching, as in a Locust process)

from inferload.observe.sink import Point, open_sink, settings_from_mapping

CHUNK = 1000


def make_points(count: int, start_ns: int) -> list[Point]:
    fields = {
        "count": 512,
        "failures": 0,
        "rps": 512.0,
        "mean_ms": 1.93,
        "p50_ms": 1.8,
        "p90_ms": 2.4,
        "p95_ms": 2.7,
        "p99_ms": 3.9,
        "p999_ms": 6.1,
        "max_ms": 7.2,
        "users": 16,
    }
    return [
        Point(
            "requests",
            {
                "run_id": "bench",
                "worker": "all",
                "target": f"t{i % 8}",
                "server": "triton",
                "protocol": "grpc",
                "model": "identity",
            },
            fields,
            start_ns + i * 1000,
        )
        for i in range(count)
    ]


def main(argv: list[str]) -> int:
    url, database, count, out = argv[0], argv[1], int(argv[2]), Path(argv[3])
    settings = settings_from_mapping({"url": url, "database": database}, environ={})
    assert settings is not None  # a URL was given
    points = make_points(count, time.time_ns() - count * 1000)
    sink = open_sink(settings.model_copy(update={"max_buffer_points": max(count, 100_000)}))
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for i in range(0, count, CHUNK):
        sink.submit(points[i : i + CHUNK])
        gevent.sleep(0)
    submitted = time.perf_counter()
    deadline = started + 120
    while sink.stats().points_written + sink.stats().points_dropped < count and time.perf_counter() < deadline:
        gevent.sleep(0.01)
    finished = time.perf_counter()
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    stats = sink.close(10.0)
    wall = finished - started
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    out.write_text(
        json.dumps(
            {
                "points": count,
                "points_written": stats.points_written,
                "points_dropped": stats.points_dropped,
                "write_errors": stats.write_errors,
                "last_error": stats.last_error,
                "submit_s": round(submitted - started, 3),
                "wall_s": round(wall, 3),
                "points_per_s": round(stats.points_written / wall, 0) if wall else 0.0,
                "client_cpu_us_per_point": round(cpu / count * 1e6, 2),
                "batch_size": settings.batch_size,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
