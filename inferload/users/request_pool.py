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
from inferload.scenario.inputs import InputSpec
from inferload.scenario.messages import format_key_path
from inferload.scenario.targets import Target
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
        else:  # one request, or a generative target's drawn lengths (a request each)
            self._plan = np.zeros((drawn_count(target), 0), dtype=np.int64)

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

    @property
    def has_samples(self) -> bool:
        """Some input is fed by a data set."""
        return bool(self._samples)

    def batch_data(self, index: int, start: int, batch: int) -> RequestData:
        """A request of ``batch`` rows (a replay row's batch size): data-set samples ``start``,
        ``start + 1``, ... (wrapping at the data set's end); a generated input's rows are the
        target's own request's, repeated as far as needed."""
        count = len(next(iter(self._samples.values()))) if self._samples else 0
        samples = tuple((start + k) % count for k in range(batch)) if count else ()
        arrays = []
        for spec in self.target.inputs:
            fed = self._samples.get(spec.name)
            if fed is None:
                own = self._generated[spec.name]
                arrays.append((spec, own[np.arange(batch) % own.shape[0]]))
            else:
                arrays.append((spec, _stack([fed[i] for i in samples])))
        return RequestData(index=index, samples=samples, arrays=tuple(arrays))

    def data(self, index: int) -> RequestData:
        """Request ``index``'s arrays (stacked from its samples; not for the hot path)."""
        plan = self._plan[index]
        arrays = []
        for spec in self.target.inputs:
            samples = self._samples.get(spec.name)
            array = self._generated[spec.name] if samples is None else _stack([samples[i] for i in plan])
            arrays.append((spec, array if self.model_batches else array[0]))
        return RequestData(index=index, samples=self.samples(index), arrays=tuple(arrays))


def drawn_count(target: Target) -> int:
    """The distinct requests a target without a data set of inputs has: its ``generation.lengths``'
    or ``generation.dataset``'s (1 without)."""
    generation = getattr(target, "generation", None)
    drawn = None if generation is None else generation.distinct_requests()
    return 1 if drawn is None else len(drawn)


def _stack(samples: list[np.ndarray]) -> np.ndarray:
    if samples[0].dtype != object:
        return np.stack(samples)
    stacked = np.empty((len(samples), *samples[0].shape), dtype=object)
    for row, sample in enumerate(samples):
        stacked[row] = sample
    return stacked


#: the bytes of input a pool keeps of the requests it made for a replay's batch sizes (the oldest go first)
MAX_BATCHED_BYTES = 256 * 2**20


@dataclass(frozen=True)
class BatchedRequest(Generic[T]):
    """A request made for a replay row's batch size: encoded, its samples, its batch, its input bytes."""

    encoded: T
    samples: tuple[int, ...]
    batch: int
    nbytes: int


class RequestPool(Generic[T]):
    """Every distinct request of a target, encoded by ``encode`` when the pool is made; ``next()`` picks.

    A replay row with a batch size other than the target's gets a request made for it on first use
    (``index_for``), kept for the next row that asks for the same (start sample, batch); those
    requests' indices follow the pool's own and are never reused."""

    def __init__(self, source: RequestSource, encode: Callable[[RequestData], T], *, worker_index: int = 0) -> None:
        self.source = source
        self._encode = encode
        self._requests: list[T] = [encode(source.data(index)) for index in range(source.size)]
        self._batched: dict[int, BatchedRequest[T]] = {}
        self._batched_index: dict[tuple[int, int], int] = {}
        self._batched_bytes = 0
        self._next_batched = len(self._requests)
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
        if index >= len(self._requests):
            return self._batched[index].encoded
        return self._requests[index]

    def samples(self, index: int) -> tuple[int, ...]:
        """The data-set sample indices request ``index`` carries (for checks of the answer)."""
        if index >= len(self._requests):
            return self._batched[index].samples
        return self.source.samples(index)

    def batch_of(self, index: int) -> int:
        """How many rows request ``index`` carries (what its answer's batch dimension must be)."""
        if index >= len(self._requests):
            return self._batched[index].batch
        return self.source.target.batch_size

    def index_for(self, sample: int | None, batch: int | None) -> int | None:
        """The request of a replay row: the one starting at ``sample`` with ``batch`` rows (None:
        the target's batch size; a model that does not batch takes its own request). Without a
        sample it starts where the rotation's next request does. None: the next in turn."""
        if batch is None or batch == self.source.target.batch_size or not self.source.model_batches:
            return None if sample is None else self.index_of_sample(sample)
        start = 0
        if self.source.has_samples:
            start = sample if sample is not None else self.samples(self.next()[0])[0]
        known = self._batched_index.get((start, batch))
        if known is not None:
            return known
        index = self._next_batched
        self._next_batched += 1
        data = self.source.batch_data(index, start, batch)
        nbytes = sum(int(array.nbytes) for _, array in data.arrays)
        self._batched[index] = BatchedRequest(self._encode(data), data.samples, batch, nbytes)
        self._batched_index[(start, batch)] = index
        self._batched_bytes += nbytes
        while self._batched_bytes > MAX_BATCHED_BYTES and len(self._batched) > 1:  # the oldest go
            oldest = next(iter(self._batched))
            gone = self._batched.pop(oldest)
            self._batched_bytes -= gone.nbytes
            del self._batched_index[(gone.samples[0] if gone.samples else 0, gone.batch)]
        return index

    def index_of_sample(self, sample: int) -> int:
        """The request that starts from data-set sample ``sample`` (a replay file's `sample`), or, with
        a batch that never starts there, the first that carries it; without a data set, a generative
        target's distinct request ``sample`` (its lengths', its data set's: trace-to-replay's lengths
        file), else request 0. IndexError for a sample there is not (the scenario's check refuses it first)."""
        if self._by_sample is None:
            by_sample: dict[int, int] = {}
            for index in range(self.size):
                for position, carried in enumerate(self.source.samples(index)):
                    known = by_sample.get(carried)
                    if known is None or (position == 0 and self.source.samples(known)[0] != carried):
                        by_sample[carried] = index
            self._by_sample = by_sample
        if not self._by_sample:  # no data set: a generative target's distinct requests are its samples
            if self.size > 1 and not self.source.has_samples:
                if not 0 <= sample < self.size:
                    raise IndexError(f"sample {sample}: the target has requests 0 to {self.size - 1}")
                return sample
            return 0
        if sample not in self._by_sample:
            raise IndexError(f"sample {sample}: the data set has samples 0 to {max(self._by_sample)}")
        return self._by_sample[sample]

    def sample_label(self, sample: int) -> str:
        return self.source.sample_label(sample)

    def data(self, index: int) -> RequestData:
        return self.source.data(index)
