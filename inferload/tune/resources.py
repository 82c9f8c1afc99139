"""The server's memory and the GPU during a step: what "memory is the limit" is judged on.

A thread samples twice a second, for the whole step:

- the **server's memory**: the resident set (RSS) of the server's process and every process under
  it (TorchServe's Python workers are children of its Java frontend; Triton is one process), in MiB,
  psutil. The pid comes from `--server-pid`, or from the local servers' state.json
  (`--server-state DIR`, as `inferload servers up` writes it).
- the **GPU**: every GPU NVML sees on this host (`inferload.observe.sources.nvml.NvmlSource`):
  utilisation (%) and memory used (MiB). On a host without an NVIDIA driver or GPU the source
  reads nothing and both stay None.

`figures(t0, t1)` then gives the step's row: the peak server RSS, the mean GPU utilisation of the
busiest GPU and the peak memory used on one GPU, between two wall-clock times.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import psutil

from inferload.errors import InferloadError
from inferload.tune.sampler_thread import SamplerThread

if TYPE_CHECKING:  # the sources package imports every server's reader (requests): not at import time
    from inferload.observe.sources.nvml import GpuReading

MIB = 1024 * 1024
STATE_FILE = "state.json"


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...


@dataclass(frozen=True)
class ResourceFigures:
    server_memory_mib: float | None = None
    gpu_util_pct: float | None = None
    gpu_memory_mib: float | None = None


def process_tree_rss_mib(pid: int) -> float | None:
    """RSS of `pid` and all its descendants (MiB); None when the process is gone or unreadable."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue  # a worker that ended between the listing and the reading
    return total / MIB


def server_pid_from_state(state_dir: Path, server: str) -> int:
    """The pid of `server` ('triton' | 'torchserve') recorded in the local servers' state.json."""
    path = Path(state_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise InferloadError(f"--server-state: {path} does not exist (start the servers with `inferload servers up`)") from None
    except (OSError, ValueError) as error:
        raise InferloadError(f"--server-state: {path}: cannot be read: {error}") from None
    entry = state.get("servers", {}).get(server) if isinstance(state, dict) else None
    pid = entry.get("pid") if isinstance(entry, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise InferloadError(f"{path}: servers.{server}.pid: no {server} recorded there")
    if not psutil.pid_exists(pid):
        raise InferloadError(f"{path}: servers.{server}.pid: process {pid} is not running")
    return pid


@dataclass
class ResourceSampler(SamplerThread):
    thread_name: ClassVar[str] = "inferload-resource-sampler"
    server_pid: int | None = None
    gpu: GpuSource | None = None
    #: (wall time, server RSS MiB)
    memory: list[tuple[float, float]] = field(default_factory=list)
    #: (wall time, busiest GPU's util %, largest GPU memory used MiB)
    gpus: list[tuple[float, float | None, float | None]] = field(default_factory=list)

    def wants_thread(self) -> bool:
        return self.server_pid is not None or self.gpu is not None

    def sample(self) -> None:
        now = time.time()
        if self.server_pid is not None:
            rss = process_tree_rss_mib(self.server_pid)
            if rss is not None:
                self.memory.append((now, rss))
        if self.gpu is not None:
            readings = self.gpu.read()
            if readings:
                utils = [r.util_pct for r in readings if r.util_pct is not None]
                used = [r.mem_used_bytes / MIB for r in readings if r.mem_used_bytes is not None]
                self.gpus.append((now, max(utils) if utils else None, max(used) if used else None))

    def figures(self, t0: float, t1: float) -> ResourceFigures:
        """Peak server RSS over the whole step (memory is a ceiling: the warm-up counts too), mean GPU
        utilisation between t0 and t1 (the steady part), peak GPU memory over the whole step."""
        rss = [value for _, value in self.memory]
        utils = [u for t, u, _ in self.gpus if t0 <= t <= t1 and u is not None]
        used = [m for _, _, m in self.gpus if m is not None]
        return ResourceFigures(
            server_memory_mib=round(max(rss), 1) if rss else None,
            gpu_util_pct=round(sum(utils) / len(utils), 1) if utils else None,
            gpu_memory_mib=round(max(used), 1) if used else None,
        )
