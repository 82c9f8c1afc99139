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

if TYPE_CHECKING:  # the sources package imports every server's reader (requests): not at import time
    from inferload.observe.sources.nvml import GpuReading
import threading
from typing import TypeVar

# What a step's samplers share: a daemon thread that calls ``sample()`` twice a second until stopped.
#
# A subclass (a dataclass, as this base is) gives ``sample()`` and its thread's name, and may say by
# ``wants_thread()`` that it has nothing to sample (no thread is started then). ``start()`` returns
# the sampler itself, so a step writes ``sampler = CpuSampler(pid).start()``; ``stop()`` ends the
# thread, waiting for it at most 5 s. The fields here are keyword-only, so a subclass's own fields
# keep their positions in its constructor.
SAMPLE_EVERY_S = 0.5
#: how long `stop()` waits for the thread
JOIN_TIMEOUT_S = 5.0

SamplerT = TypeVar("SamplerT", bound="SamplerThread")


@dataclass
class SamplerThread:
    #: the thread's name (seen in a thread dump)
    thread_name: ClassVar[str] = "inferload-sampler"
    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True)
    _thread: threading.Thread | None = field(default=None, kw_only=True)

    def sample(self) -> None:
        raise NotImplementedError

    def wants_thread(self) -> bool:
        """False: nothing to sample, `start()` starts no thread."""
        return True

    def start(self: SamplerT) -> SamplerT:
        if self.wants_thread():
            self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_EVERY_S)


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
