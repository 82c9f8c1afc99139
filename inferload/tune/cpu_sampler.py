"""The load generator's own CPU during a step: per load-generating process, over the steady part.

A thread samples the CPU time of the step's process and every process under it twice a second
(psutil): the Locust process of a local step, or `inferload run --workers` with its master and workers. Afterwards `busiest_cores(t0, t1)` gives the busiest load-generating process's CPU use
between two wall-clock times, in cores (1.0 = one full core): a Locust process (gevent) cannot use
more than one core, so near 1.0 the generator, not the server, bounds the step. Load-generating
processes are the workers of a distributed step (found by `--worker` in their command line), or
else the busiest process sampled: the single Locust process of a local one.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar

import psutil

from inferload.tune.sampler_thread import SamplerThread


@dataclass
class CpuSampler(SamplerThread):
    thread_name: ClassVar[str] = "inferload-cpu-sampler"
    pid: int
    #: pid -> [(wall time, cpu seconds)]
    samples: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    workers: set[int] = field(default_factory=set)

    def sample(self) -> None:
        try:
            lead = psutil.Process(self.pid)
            processes = [lead, *lead.children(recursive=True)]
        except psutil.Error:
            return
        now = time.time()
        for process in processes:
            try:
                times = process.cpu_times()
                if process.pid not in self.samples and "--worker" in process.cmdline():
                    self.workers.add(process.pid)
            except psutil.Error:
                continue
            self.samples[process.pid].append((now, times.user + times.system))

    def busiest_cores(self, t0: float, t1: float) -> float | None:
        """The highest CPU use (cores) of one load-generating process between t0 and t1; None if unknown."""
        pids = self.workers or set(self.samples)
        best: float | None = None
        for pid in pids:
            inside = [(t, cpu) for t, cpu in self.samples.get(pid, []) if t0 <= t <= t1]
            if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
                continue
            cores = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
            best = cores if best is None else max(best, cores)
        return None if best is None else round(best, 3)
