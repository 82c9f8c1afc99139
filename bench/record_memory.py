"""Soak: the memory a run record holds after N simulated windows (no Locust, no server).

    python -m bench.record_memory [--windows 3600] [--targets 2] [--workers 2] [--requests 20]

Simulates a distributed run on the master: every worker records `--requests` requests per window
and target into its own `RunRecord`, and reports every 3 windows (Locust's worker report
interval with 1 s windows); the master merges the reports (`merge_wire`, with the worker id, so
the per-worker windows are kept too). `--workers 0` records straight into one local record
instead. Prints the process's resident memory (RSS, after a full garbage collection) at ten
checkpoints, and the record's full histograms where it counts them. Uses only the RunRecord API
that older versions have too, so the same script measures an older tree:

    git archive HEAD inferload | tar -x -C /tmp/old && PYTHONPATH=/tmp/old python bench/record_memory.py
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import time

import inferload
from inferload.measure.run_record import RunRecord

START = 1_700_000_000.0
REPORT_EVERY = 3  # windows between worker reports


def rss_mb() -> float:
    """Resident memory now (Linux /proc), else the peak so far."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def full_histograms(record: RunRecord) -> int | None:
    count = getattr(record, "open_histograms", None)  # newer records count them
    if count is not None:
        return int(count)
    return None


def soak(windows: int, targets: int, workers: int, requests: int) -> list[tuple[int, float, int | None]]:
    rng = random.Random(1)
    names = [f"target-{i}" for i in range(targets)]
    master = RunRecord(window_s=1.0, warmup_s=0.0, started_at=START)
    senders = [RunRecord(window_s=1.0, warmup_s=0.0, started_at=START) for _ in range(workers)] or [master]
    checkpoints = {max(1, windows * k // 10) for k in range(1, 11)}
    rows = []
    for window in range(windows):
        for sender in senders:
            for i in range(requests):
                now = START + window + (i + 0.5) / requests
                for name in names:
                    sender.record(name, rng.lognormvariate(1.5, 0.6), False, now)
        if workers and (window + 1) % REPORT_EVERY == 0:
            for number, sender in enumerate(senders):
                master.merge_wire(sender.drain_to_wire(), worker=f"worker-{number}")
        if window + 1 in checkpoints:
            gc.collect()
            rows.append((window + 1, rss_mb(), full_histograms(master)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3600, help="windows of 1 s to simulate (default 3600: one hour)")
    parser.add_argument("--targets", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="0: one local record, no reports")
    parser.add_argument("--requests", type=int, default=20, help="requests per window, target and worker")
    args = parser.parse_args()
    print(f"inferload from {os.path.dirname(inferload.__file__)}")
    print(f"{args.windows} windows x {args.targets} targets, {args.workers} workers, {args.requests} requests each")
    gc.collect()
    print(f"RSS before: {rss_mb():.0f} MB")
    started = time.perf_counter()
    for window, rss, histograms in soak(args.windows, args.targets, args.workers, args.requests):
        full = "" if histograms is None else f", full histograms held: {histograms}"
        print(f"after {window:>6} windows: RSS {rss:8.0f} MB{full}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
