"""What a step's samplers share: a daemon thread that calls ``sample()`` twice a second until stopped.

A subclass (a dataclass, as this base is) gives ``sample()`` and its thread's name, and may say by
``wants_thread()`` that it has nothing to sample (no thread is started then). ``start()`` returns
the sampler itself, so a step writes ``sampler = CpuSampler(pid).start()``; ``stop()`` ends the
thread, waiting for it at most 5 s. The fields here are keyword-only, so a subclass's own fields
keep their positions in its constructor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

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
