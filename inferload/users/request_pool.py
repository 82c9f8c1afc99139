"""A target's requests, encoded once per process up front, and the cursor its users take them from.

``RequestSource`` knows what each distinct request holds: the generated inputs (made once, the same
in every request) and, for inputs fed by a data set, ``batch_size`` samples per request in the
target's rotation order (``scenario.datasets.request_plan``). ``RequestPool`` encodes every distinct
request with the protocol's encoder when it is made, and ``next()`` only picks: the hot path copies
nothing and encodes nothing. One pool per process per target (the user class holds it), shared by
all of the target's users, so users of one process send different samples at the same moment; on a
distributed worker the cursor starts at an offset from the worker's index (and a random rotation's
order is seeded with it too), so workers do not move in lockstep either.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from inferload.scenario.datasets import DatasetError, read_target_datasets, request_plan
from inferload.scenario.messages import format_key_path
from inferload.scenario.targets import InputSpec, Target
from inferload.users.payload import make_input_array

T = TypeVar("T")

#: the fractional part of the golden ratio: worker k starts at frac(k * phi) of the pool, which spreads
#: any number of workers evenly without knowing how many there are
_PHI = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class RequestData:
    """What an encoder gets for one distinct request (once, up front)."""

    #: the request's index in the pool (0 .. size - 1)
    index: int
    #: data-set sample indices in this request, in batch order; () when no input has a data set
    samples: tuple[int, ...]
    #: every input in the scenario's order, the batch dimension first (none when the model does not batch)
    arrays: tuple[tuple[InputSpec, np.ndarray], ...]


class RequestSource:
    """The distinct requests of a target: generated inputs plus data-set samples, before encoding."""

    def __init__(self, target: Target, scenario_dir: Path, *, model_batches: bool = True) -> None:
        self.target = target
        self.model_batches = model_batches
        datasets, problems = read_target_datasets(target.inputs, target.batch_size, scenario_dir, target.name)
        if problems:
            path, message = problems[0]
            where = format_key_path(("inputs", *path))
            raise DatasetError(f"target {target.name!r}: {where}: {message}")
        self._samples = {name: dataset.samples for name, dataset in datasets.items()}
        #: where each sample came from (a file name, ``line 3``), from the first data set, for messages
        self._sample_names = next(iter(datasets.values())).names if datasets else ()
        self._generated = {
            spec.name: make_input_array(spec, target.batch_size, scenario_dir)
            for spec in target.inputs
            if spec.name not in datasets
        }
        if datasets:
            count = len(next(iter(datasets.values())).samples)
            self._plan = request_plan(count, target.batch_size, target.rotation, target.rotation_seed or 0)
        else:
            self._plan = np.zeros((1, 0), dtype=np.int64)

    @property
    def size(self) -> int:
        """How many distinct requests there are (1 without a data set)."""
        return int(self._plan.shape[0])

    def samples(self, index: int) -> tuple[int, ...]:
        return tuple(int(i) for i in self._plan[index])

    def sample_label(self, sample: int) -> str:
        """A data-set sample as a message names it: ``sample 3 (3.png)``, ``sample 2 (line 3)``, ``sample 5``."""
        label = f"sample {sample}"
        name = self._sample_names[sample] if 0 <= sample < len(self._sample_names) else label
        return label if name == label else f"{label} ({name})"

    def data(self, index: int) -> RequestData:
        """Request ``index``'s arrays (stacked from its samples; not for the hot path)."""
        plan = self._plan[index]
        arrays = []
        for spec in self.target.inputs:
            samples = self._samples.get(spec.name)
            array = self._generated[spec.name] if samples is None else _stack([samples[i] for i in plan])
            arrays.append((spec, array if self.model_batches else array[0]))
        return RequestData(index=index, samples=self.samples(index), arrays=tuple(arrays))


def _stack(samples: list[np.ndarray]) -> np.ndarray:
    if samples[0].dtype != object:
        return np.stack(samples)
    stacked = np.empty((len(samples), *samples[0].shape), dtype=object)
    for row, sample in enumerate(samples):
        stacked[row] = sample
    return stacked


class RequestPool(Generic[T]):
    """Every distinct request of a target, encoded by ``encode`` when the pool is made; ``next()`` picks."""

    def __init__(self, source: RequestSource, encode: Callable[[RequestData], T], *, worker_index: int = 0) -> None:
        self.source = source
        self._requests: list[T] = [encode(source.data(index)) for index in range(source.size)]
        self._random = source.target.rotation == "random"
        self._rng = np.random.default_rng([source.target.rotation_seed or 0, worker_index])
        self._order: list[int] = self._rng.permutation(source.size).tolist() if self._random else list(range(source.size))
        self._cursor = int((worker_index * _PHI) % 1.0 * source.size)
        #: where this process's cursor started (the native engine's shared cursor starts there too)
        self.start_cursor = self._cursor
        self._by_sample: dict[int, int] | None = None

    @property
    def size(self) -> int:
        return len(self._requests)

    def next(self) -> tuple[int, T]:
        """(request index, encoded request) of the next call; each pass visits every request once."""
        position = self._cursor
        if position >= len(self._order):
            position = 0
            if self._random:  # a new order each pass
                self._order = self._rng.permutation(len(self._order)).tolist()
        self._cursor = position + 1
        index = self._order[position]
        return index, self._requests[index]

    @property
    def encoded_requests(self) -> list[T]:
        """Every distinct request as encoded, by request index (what the native engine is given)."""
        return self._requests

    def encoded(self, index: int) -> T:
        """Request ``index`` as encoded (without moving the cursor)."""
        return self._requests[index]

    def samples(self, index: int) -> tuple[int, ...]:
        """The data-set sample indices request ``index`` carries (for checks of the answer)."""
        return self.source.samples(index)

    def index_of_sample(self, sample: int) -> int:
        """The request that starts from data-set sample ``sample`` (a replay file's `sample`), or, with
        a batch that never starts there, the first that carries it; without a data set, request 0.
        IndexError for a sample the data set does not have (the scenario's check refuses it first)."""
        if self._by_sample is None:
            by_sample: dict[int, int] = {}
            for index in range(self.size):
                for position, carried in enumerate(self.source.samples(index)):
                    known = by_sample.get(carried)
                    if known is None or (position == 0 and self.source.samples(known)[0] != carried):
                        by_sample[carried] = index
            self._by_sample = by_sample
        if not self._by_sample:
            return 0
        if sample not in self._by_sample:
            raise IndexError(f"sample {sample}: the data set has samples 0 to {max(self._by_sample)}")
        return self._by_sample[sample]

    def sample_label(self, sample: int) -> str:
        return self.source.sample_label(sample)

    def data(self, index: int) -> RequestData:
        return self.source.data(index)
