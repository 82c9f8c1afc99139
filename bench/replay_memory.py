"""Issue 26's memory goal: a 10-million-row replay file replays with the generator's memory flat.

    python -m bench.replay_memory [--rows 10000000] [--rate 2000] [--cv 3] [--workers 2] [--out DIR]

Writes a replay file of ``--rows`` arrivals (gamma gaps at ``--rate`` req/s with burstiness
``--cv``, a target column; numpy, in chunks) into a temporary folder, then in this process:

1. validates it as a run does (`inferload.scenario.replay_file.scan_replay`: the whole file once);
2. draws the whole run's arrivals from it (`inferload.traffic.arrivals.ReplayLaw`), keeps worker 0's
   share of ``--workers`` (`take_share`) and notes each arrival's gap (`GapStats`, as the
   scheduler notes the schedule), the generator's work without the clock: no sleeping.

The process's resident memory (RSS, /proc/self/statm) is sampled five times a second by a thread,
and at every tenth of the rows drawn (after a garbage collection). It prints and writes
``replay_memory.json``: RSS before, the peak of each phase, the checkpoints, the growth over the
draw, and each phase's rows per second. For scale, what the same rows would take held in memory
as `Arrival` objects is estimated from one object's size. Not a timed test: run it by hand.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import describe as describe_machine
from inferload.measure.run_record import GapStats
from inferload.scenario.replay_file import scan_replay
from inferload.traffic.arrivals import Arrival, ProcessSplit, ReplayLaw, take_share

CHUNK = 1_000_000
SAMPLE_S = 0.2


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class RssSampler:
    """The peak RSS between `mark()` calls, sampled by a daemon thread."""

    def __init__(self) -> None:
        self.peak = rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, rss_mib())

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def mark(self) -> float:
        """The peak since the last mark; starts a new span."""
        peak, self.peak = max(self.peak, rss_mib()), rss_mib()
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def write_file(path: Path, rows: int, rate: float, cv: float, seed: int = 1) -> float:
    """``rows`` gamma arrivals (mean ``rate``/s, CV ``cv``) as CSV t_s,target; the last time."""
    rng = np.random.default_rng(seed)
    shape_k = 1.0 / (cv * cv)
    t = 0.0
    with open(path, "w") as out:
        out.write("t_s,target\n")
        for start in range(0, rows, CHUNK):
            count = min(CHUNK, rows - start)
            times = t + np.cumsum(rng.gamma(shape_k, 1.0 / (rate * shape_k), count))
            t = float(times[-1])
            out.write("".join(f"{value:.6f},t\n" for value in times.tolist()))
    return t


def measure(path: Path, rows: int, workers: int) -> dict[str, Any]:
    gc.collect()
    before = rss_mib()
    sampler = RssSampler().start()
    started = time.perf_counter()
    facts = scan_replay(path)
    scan_s = time.perf_counter() - started
    scan_peak = sampler.mark()
    assert facts.rows == rows, facts.rows

    law = ReplayLaw(path, run_duration_s=float("inf"), targets=(("t", 1.0),))
    gaps = GapStats()
    checkpoints: list[dict[str, float]] = []
    every = max(1, rows // 10)
    drawn = kept = 0

    def noted(arrivals: Any) -> Any:
        nonlocal drawn
        for arrival in arrivals:
            drawn += 1
            gaps.add(arrival.t_s)
            if drawn % every == 0:
                gc.collect()
                checkpoints.append({"rows": drawn, "rss_mib": round(rss_mib(), 1)})
            yield arrival

    started = time.perf_counter()
    for _ in take_share(noted(law.arrivals()), ProcessSplit(workers, 0)):
        kept += 1
    draw_s = time.perf_counter() - started
    draw_peak = sampler.mark()
    sampler.stop()
    assert drawn == rows, drawn
    first, last = checkpoints[0]["rss_mib"], checkpoints[-1]["rss_mib"]
    one = Arrival(1.0, "t")
    in_memory_mib = rows * (sys.getsizeof(one) + 8) / 2**20  # the objects plus a list's pointer each
    return {
        "rows": rows,
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "rss_before_mib": round(before, 1),
        "scan": {"seconds": round(scan_s, 1), "rows_per_s": round(rows / scan_s), "rss_peak_mib": round(scan_peak, 1)},
        "draw": {
            "seconds": round(draw_s, 1),
            "rows_per_s": round(rows / draw_s),
            "rss_peak_mib": round(draw_peak, 1),
            "kept_by_worker_0": kept,
            "workers": workers,
            "checkpoints": checkpoints,
            "growth_mib_first_to_last_checkpoint": round(last - first, 1),
            "schedule_cv": None if gaps.cv is None else round(gaps.cv, 3),
        },
        "held_in_memory_estimate_mib": round(in_memory_mib),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="the file's mean req/s (default 2000)")
    parser.add_argument("--cv", type=float, default=3.0, help="the file's burstiness (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="the split worker 0 keeps its share of (default 2)")
    parser.add_argument("--out", type=Path, help="folder for replay_memory.json (default results/bench-replay-memory-<UTC>)")
    args = parser.parse_args(argv)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("results") / f"bench-replay-memory-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="inferload-replay-") as folder:
        path = Path(folder) / "trace.csv"
        started = time.perf_counter()
        last = write_file(path, args.rows, args.rate, args.cv)
        print(
            f"wrote {args.rows:,} rows ({path.stat().st_size / 2**20:.0f} MiB, {last:,.0f} s of trace) in {time.perf_counter() - started:.0f} s"
        )
        figures = measure(path, args.rows, args.workers)
    figures["machine"] = describe_machine()
    figures["trace"] = {"rate_rps": args.rate, "cv": args.cv, "span_s": round(last, 1)}
    (out / "replay_memory.json").write_text(json.dumps(figures, indent=2) + "\n")
    draw = figures["draw"]
    print(
        f"RSS before {figures['rss_before_mib']} MiB; validation pass peak {figures['scan']['rss_peak_mib']} MiB"
        f" ({figures['scan']['rows_per_s']:,} rows/s)"
    )
    print(
        f"drawing every row (worker 0 of {args.workers} keeps {draw['kept_by_worker_0']:,}): peak {draw['rss_peak_mib']} MiB,"
        f" growth {draw['growth_mib_first_to_last_checkpoint']} MiB from the first tenth to the last"
        f" ({draw['rows_per_s']:,} rows/s); the rows held in memory would take about {figures['held_in_memory_estimate_mib']:,} MiB"
    )
    print("checkpoints (rows: RSS MiB): " + ", ".join(f"{c['rows']:,}: {c['rss_mib']}" for c in draw["checkpoints"]))
    print(f"written {out / 'replay_memory.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
