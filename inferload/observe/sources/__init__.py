"""Metric sources for the collector: Triton, TorchServe, NVML. Each is one small class with
`scrape(now) -> list[Point]` (see `base.Source`); the arithmetic is in pure functions."""

from inferload.observe.sources.base import Source, SourceError
from inferload.observe.sources.nvml import NvmlSource
from inferload.observe.sources.torchserve import TorchServeSource
from inferload.observe.sources.triton import TritonSource, TritonStatistics

__all__ = ["NvmlSource", "Source", "SourceError", "TorchServeSource", "TritonSource", "TritonStatistics"]
