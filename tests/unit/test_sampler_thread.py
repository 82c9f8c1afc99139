"""The step samplers' shared thread (`inferload.tune.step`): started, sampling, stopped."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from inferload.tune.step import CpuSampler, ResourceSampler, SamplerThread


@dataclass
class CountingSampler(SamplerThread):
    thread_name = "test-counting-sampler"
    count: int = 0
    sampled: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.count += 1
        self.sampled.set()


def test_start_samples_at_once_on_a_named_daemon_thread_and_stop_ends_it() -> None:
    sampler = CountingSampler().start()
    assert sampler.sampled.wait(timeout=5)
    thread = sampler._thread
    assert thread is not None and thread.daemon and thread.name == "test-counting-sampler"
    sampler.stop()
    assert not thread.is_alive()  # joined: nothing is sampled after stop()
    assert sampler.count >= 1


def test_a_resource_sampler_with_nothing_to_sample_starts_no_thread() -> None:
    sampler = ResourceSampler().start()
    assert sampler._thread is None
    sampler.stop()


def test_the_samplers_keep_their_positional_fields_and_thread_names() -> None:
    cpu = CpuSampler(1234)
    resources = ResourceSampler(4321, None)
    assert (cpu.pid, resources.server_pid, resources.gpu) == (1234, 4321, None)
    assert (cpu.thread_name, resources.thread_name) == ("inferload-cpu-sampler", "inferload-resource-sampler")
