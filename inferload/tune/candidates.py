"""The settings `inferload tune` tries on each server, in the seeds' order.

A candidate is one server configuration: for Triton, dynamic batching on or off, its queue delay,
its preferred batch sizes, the model's max_batch_size (None keeps the model's own) and its
instance count; for TorchServe, the batch size, the batch delay and the worker
count. The loop (`inferload.tune.tune`) tries them in stages: the baseline (no batching, one
instance/worker), then batching with each delay (the conservative one first), then more
instances/workers on the best so far; a stage that does not beat the best by the plateau margin ends
that line of the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TritonCandidate:
    batching: bool
    max_queue_delay_us: int = 0
    instances: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    #: the model's max_batch_size while batching (None: the model's own)
    max_batch_size: int | None = None

    @property
    def name(self) -> str:
        batching = f"batching {self.max_queue_delay_us} us" if self.batching else "no batching"
        if self.batching and self.max_batch_size is not None:
            batching += f", max batch {self.max_batch_size}"
        if self.batching and self.preferred_batch_sizes:
            batching += f", preferred {'/'.join(str(n) for n in self.preferred_batch_sizes)}"
        return f"{batching}, {self.instances} instance{'s' if self.instances > 1 else ''}"

    def settings(self) -> dict[str, object]:
        return {
            "dynamic_batching": self.batching,
            "max_queue_delay_microseconds": self.max_queue_delay_us if self.batching else None,
            "preferred_batch_size": list(self.preferred_batch_sizes)
            if self.batching and self.preferred_batch_sizes
            else None,  # none asked: the server picks
            "instance_count": self.instances,
            "max_batch_size": self.max_batch_size if self.batching else None,
        }


@dataclass(frozen=True)
class TorchServeCandidate:
    batch_size: int = 1
    max_batch_delay_ms: int = 0
    workers: int = 1

    @property
    def name(self) -> str:
        batching = f"batch {self.batch_size}, delay {self.max_batch_delay_ms} ms" if self.batch_size > 1 else "no batching"
        return f"{batching}, {self.workers} worker{'s' if self.workers > 1 else ''}"

    def settings(self) -> dict[str, object]:
        return {"batch_size": self.batch_size, "max_batch_delay_ms": self.max_batch_delay_ms, "workers": self.workers}


Candidate = TritonCandidate | TorchServeCandidate


@dataclass(frozen=True)
class SearchSpace:
    """What to try (the first delay is the conservative one); each list is tried in its order."""

    triton_delays_us: tuple[int, ...] = (100, 1000)
    triton_instances: tuple[int, ...] = (2,)
    triton_preferred: tuple[int, ...] = ()
    #: max_batch_size values to try with batching (empty: the model's own)
    triton_max_batch_sizes: tuple[int, ...] = ()
    torchserve_batch_sizes: tuple[int, ...] = (8,)
    torchserve_delays_ms: tuple[int, ...] = (5, 20)
    torchserve_workers: tuple[int, ...] = (2,)
    extra: dict[str, object] = field(default_factory=dict)

    def baseline(self, server: str) -> Candidate:
        return TritonCandidate(batching=False) if server == "triton" else TorchServeCandidate()

    def batching(self, server: str, best: Candidate) -> list[Candidate]:
        """Stage 2: batching on, each max batch size and delay (instances/workers as in `best`)."""
        if isinstance(best, TritonCandidate):
            sizes: tuple[int | None, ...] = self.triton_max_batch_sizes or (None,)
            return [
                TritonCandidate(True, d, best.instances, self.triton_preferred, size)
                for size in sizes
                for d in self.triton_delays_us
            ]
        return [
            TorchServeCandidate(size, delay, best.workers)
            for size in self.torchserve_batch_sizes
            for delay in self.torchserve_delays_ms
        ]

    def scale_out(self, best: Candidate) -> list[Candidate]:
        """Stage 3: more instances/workers on the best so far."""
        if isinstance(best, TritonCandidate):
            return [
                TritonCandidate(best.batching, best.max_queue_delay_us, n, best.preferred_batch_sizes, best.max_batch_size)
                for n in self.triton_instances
            ]
        return [TorchServeCandidate(best.batch_size, best.max_batch_delay_ms, n) for n in self.torchserve_workers]
