"""The collector's metric sources: Triton and TorchServe (thin adapters over
inferload.servermetrics: readings → `server`/`batch_sizes` points) and NVML (`gpu` points). Each
is one small class with `scrape(now) -> list[Point]` (see `server.Source`); Triton's trace file, tailed
next to the server, gives `triton_traces` points (`triton_trace_file`)."""

from inferload.observe.sources.nvml import NvmlSource
from inferload.observe.sources.server import (
    BentoMLSource,
    KServeSource,
    OpenAISource,
    ServerSource,
    Source,
    TorchServeSource,
    TritonSource,
)
from inferload.observe.sources.triton_trace_file import TritonTraceFileSource

__all__ = [
    "BentoMLSource",
    "KServeSource",
    "NvmlSource",
    "OpenAISource",
    "ServerSource",
    "Source",
    "TorchServeSource",
    "TritonSource",
    "TritonTraceFileSource",
]
