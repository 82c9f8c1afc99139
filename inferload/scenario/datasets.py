"""Data sets: many real samples of one input, read from a folder, .npy/.npz, JSON lines or text lines.

An input whose ``data`` names a ``dataset`` is fed from it, one sample per item of a request
(``users.request_pool`` rotates them). Reading is pure and shared by validation (``scenario.targets``,
problems reported at the input's ``data.dataset`` key) and by the users' request pool. How each
format becomes N samples, each of the input's item shape (no batch dimension):

- ``folder``: every regular, non-hidden file (``pattern`` filters, default ``*``), sorted by name, is one
  sample: a UINT8 input gets the file's bytes as a vector (shape ``[-1]`` or ``[size]``), a BYTES input
  one element holding the bytes (shape ``[1]``).
- ``npy``: the array's first axis is the sample axis: ``(N, *shape)`` gives N samples (BF16: float32
  values, rounded, or an ``ml_dtypes.bfloat16`` array, which numpy saves as 2-byte voids). For an
  input of shape ``[1]`` a 1-D array ``(N,)`` is N samples of one element each (``np.array([b'a',
  b'bc'])`` for a BYTES ``[1]``). Arrays of Python objects (dtype ``object``, tritonclient's own form
  for BYTES) are refused with how to save them instead: loading them would unpickle, which runs code.
- ``npz``: as ``npy``, for the array named ``key`` (default: the input's name, or the only array).
- ``jsonl``: one sample per non-blank line: a nested list (a bare value is a list of one), or an object
  whose ``key`` (default: the input's name) holds it, so one file can feed several inputs.
- ``lines``: BYTES only: one element per non-blank line (UTF-8 text, line ending removed).
"""

from __future__ import annotations

import functools
import json
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

import numpy as np

from inferload.scenario.input_files import check_npz_members
from inferload.scenario.limits import MAX_DATASET_BYTES, MAX_DATASET_FILES, mib
from inferload.scenario.tensors import INTEGER_DTYPES, float_max, numpy_dtype, request_nbytes, shape_fits

if TYPE_CHECKING:
    from inferload.scenario.inputs import DataSpec, InputSpec

#: paths through which a data set's pattern may reach a file it reached already (a symlink loop repeats them)
MAX_DATASET_REPEATS = 1_000

FORMATS = ("folder", "npy", "npz", "jsonl", "lines")
_SUFFIX_FORMATS = {".npy": "npy", ".npz": "npz", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "lines"}

ProblemAt = tuple[tuple[str | int, ...], str]


class DatasetError(ValueError):
    """A data set that cannot feed its input; the message names the file."""


@dataclass(frozen=True)
class Dataset:
    """The samples of one input: ``samples[i]`` has the input's item shape and dtype."""

    path: Path
    samples: tuple[np.ndarray, ...]
    #: where each sample came from, for messages (a file name, ``line 3``, ``sample 5``)
    names: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        """Bytes all samples take on the wire (BYTES: each element's length plus 4)."""
        return sum(sample_nbytes(sample) for sample in self.samples)


def sample_nbytes(sample: np.ndarray) -> int:
    if sample.dtype == object:
        return sum(4 + len(item) for item in sample.reshape(-1))
    return int(sample.nbytes)


def dataset_path(data: DataSpec, base_dir: Path) -> Path:
    path = Path(data.dataset or "")
    return path if path.is_absolute() else base_dir / path


@functools.lru_cache(maxsize=64)
def dataset_file_names(data: DataSpec, base_dir: Path) -> tuple[str, ...]:
    """The names of a folder data set's files (its ``pattern``, hidden files left out), listed once per
    process for each (data set, folder): the media type of a raw body is read from their suffixes."""
    folder = dataset_path(data, base_dir)
    return tuple(sorted(p.name for p in folder.glob(data.pattern or "*") if p.is_file() and not p.name.startswith(".")))


def dataset_format(data: DataSpec, path: Path) -> str:
    """``data.format``, or the format the path's name says (a folder, .npy, .npz, .jsonl/.ndjson, .txt)."""
    if data.format is not None:
        return data.format
    if path.is_dir():
        return "folder"
    if path.suffix.lower() in _SUFFIX_FORMATS:
        return _SUFFIX_FORMATS[path.suffix.lower()]
    raise DatasetError(f"cannot tell the format of {path.name!r} from its name; set format: ({', '.join(FORMATS)})")


def read_dataset(spec: InputSpec, base_dir: Path, max_bytes: int = MAX_DATASET_BYTES) -> Dataset:
    """Every sample of ``spec``'s data set, checked against its dtype and shape."""
    path = dataset_path(spec.data, base_dir)
    if not path.exists():
        raise DatasetError(f"data set not found: {str(path)!r}")
    kind = dataset_format(spec.data, path)
    if kind == "folder":
        samples, names = _read_folder(spec, path, max_bytes)
    elif kind in ("npy", "npz"):
        samples, names = _read_array(spec, path, kind, max_bytes)
    else:
        if not path.is_file():
            raise DatasetError(f"{str(path)!r} is not a file (format {kind})")
        if path.stat().st_size > max_bytes:
            raise DatasetError(f"{path.name} is {path.stat().st_size:,} bytes; at most {mib(max_bytes)} per target")
        samples, names = _read_jsonl(spec, path) if kind == "jsonl" else _read_lines(spec, path)
    if not samples:
        raise DatasetError(f"{path.name} holds no samples")
    for sample, name in zip(samples, names, strict=True):
        if not shape_fits(sample.shape, spec.shape):
            raise DatasetError(
                f"{path.name}: {name} has shape {list(sample.shape)}; input {spec.name!r} has shape {list(spec.shape)}"
            )
    return Dataset(path=path, samples=tuple(samples), names=tuple(names))


def _read_folder(spec: InputSpec, path: Path, max_bytes: int) -> tuple[list[np.ndarray], list[str]]:
    if not path.is_dir():
        raise DatasetError(f"{str(path)!r} is not a folder")
    if spec.dtype not in ("UINT8", "BYTES"):
        raise DatasetError(
            f"a folder data set feeds UINT8 inputs (each file's bytes) or BYTES inputs (one element per file);"
            f" input {spec.name!r} is {spec.dtype}"
        )
    files = sorted(p for p in _bounded_glob(path, spec.data.pattern or "*") if p.is_file() and not p.name.startswith("."))
    total = sum(p.stat().st_size for p in files)
    if total > max_bytes:
        raise DatasetError(f"{path.name}/ holds {total:,} bytes in {len(files):,} files; at most {mib(max_bytes)} per target")
    samples = []
    for file in files:
        content = file.read_bytes()
        if spec.dtype == "UINT8":
            samples.append(np.frombuffer(content, dtype=np.uint8))
        else:
            sample = np.empty(1, dtype=object)
            sample[0] = content
            samples.append(sample)
    return samples, [file.name for file in files]


def _bounded_glob(folder: Path, pattern: str) -> list[Path]:
    """The paths `pattern` matches under `folder`, stopping at `MAX_DATASET_FILES`, or as soon as one file is
    reached by many paths (a symlink loop: the paths double with each level of a pattern and never end)."""
    matched: list[Path] = []
    seen: set[tuple[int, int]] = set()
    repeats = 0
    for found in folder.glob(pattern):
        matched.append(found)
        if len(matched) > MAX_DATASET_FILES:
            raise DatasetError(f"{folder.name}/ matches more than {MAX_DATASET_FILES:,} paths; use a narrower pattern")
        try:
            identity = found.stat()
        except OSError:
            continue
        key = (identity.st_dev, identity.st_ino)
        repeats += key in seen
        seen.add(key)
        if repeats > MAX_DATASET_REPEATS:
            raise DatasetError(
                f"{folder.name}/ reaches the same files by more than {MAX_DATASET_REPEATS:,} paths through {pattern!r}:"
                " a symlink loop; remove it or use a pattern that does not go through it"
            )
    return matched


def _read_array(spec: InputSpec, path: Path, kind: str, max_bytes: int) -> tuple[list[np.ndarray], list[str]]:
    if not path.is_file():
        raise DatasetError(f"{str(path)!r} is not a file (format {kind})")
    try:
        array = _load_npy(path, max_bytes) if kind == "npy" else _load_npz(spec, path, max_bytes)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        if isinstance(error, DatasetError):
            raise
        raise DatasetError(f"cannot read {path.name} as {kind}: {error}") from None
    if array.ndim < 1:
        raise DatasetError(f"{path.name} holds a single value; its first axis must be the samples (N, *shape)")
    if array.ndim == 1 and tuple(spec.shape) in ((1,), (-1,)):  # N single elements: N samples of shape [1]
        array = array.reshape(-1, 1)
    elif array.ndim == 1:
        raise DatasetError(
            f"{path.name} has shape {list(array.shape)}: {array.shape[0]:,} single values, since its first axis is the"
            f" samples; input {spec.name!r} has shape {list(spec.shape)}: save the samples as (N, {', '.join(map(str, spec.shape))})"
        )
    array = _convert_array(array, spec.dtype, path.name)
    return [array[i, ...] for i in range(array.shape[0])], [f"sample {i}" for i in range(array.shape[0])]


def _object_array_problem(name: str) -> DatasetError:
    """Why an array of Python objects is not read, and how to save the same data so that it is."""
    return DatasetError(
        f"{name} holds Python objects (dtype object, tritonclient's form for BYTES), which inferload does not load"
        " (it would unpickle them, which runs code): save the strings as a numpy bytes array,"
        " np.save(PATH, np.array(values, dtype=np.bytes_)), or one per line in a .txt (lines) or .jsonl data set"
    )


def _header_dtype(file: BinaryIO) -> np.dtype:
    """The dtype an .npy stream's header declares (the stream is left after the header)."""
    version = np.lib.format.read_magic(file)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    _, _, dtype = read_header(file)
    return np.dtype(dtype)


def _load_npy(path: Path, max_bytes: int) -> np.ndarray:
    with path.open("rb") as file:
        if _header_dtype(file).hasobject:
            raise _object_array_problem(path.name)
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.nbytes > max_bytes:
        raise DatasetError(f"{path.name} holds {array.nbytes:,} bytes; at most {mib(max_bytes)} per target")
    return np.array(array)


def _load_npz(spec: InputSpec, path: Path, max_bytes: int) -> np.ndarray:
    check_npz_members(path, max_bytes)  # a member whose header claims more than it holds is refused unread
    with np.load(path, allow_pickle=False) as archive:
        keys = list(archive.files)
        key = spec.data.key or (spec.name if spec.name in keys else (keys[0] if len(keys) == 1 else None))
        if key is None or key not in keys:
            wanted = repr(key) if key is not None else f"{spec.name!r} (the input's name; set key:)"
            raise DatasetError(f"{path.name} has no array {wanted}; it holds {', '.join(map(repr, keys)) or 'none'}")
        size = archive.zip.getinfo(f"{key}.npy").file_size
        if size > max_bytes:
            raise DatasetError(f"{path.name}[{key!r}] holds {size:,} bytes; at most {mib(max_bytes)} per target")
        with archive.zip.open(f"{key}.npy") as member:
            if _header_dtype(cast(BinaryIO, member)).hasobject:
                raise _object_array_problem(f"{path.name}[{key!r}]")
        return np.asarray(archive[key])


def _convert_array(array: np.ndarray, dtype: str, where: str) -> np.ndarray:
    """A file's array as ``dtype``: the same dtype, or (BYTES) fixed-width strings turned into bytes elements."""
    if dtype == "BYTES":
        if array.dtype.kind not in "SU":
            raise DatasetError(f"{where} holds {array.dtype} values; a BYTES input needs strings (numpy S or U)")
        encoded = [item.encode() if isinstance(item, str) else bytes(item) for item in array.reshape(-1).tolist()]
        out = np.empty(array.shape, dtype=object)
        out.reshape(-1)[:] = encoded
        return out
    expected = numpy_dtype(dtype)
    if dtype == "BF16" and array.dtype == np.dtype("V2"):  # numpy saves ml_dtypes.bfloat16 arrays as 2-byte voids
        return array.view(expected)
    if dtype == "BF16" and array.dtype == np.float32:  # numpy has no bfloat16 of its own: float32, rounded
        return array.astype(expected)
    if array.dtype != expected:
        raise DatasetError(f"{where} holds {array.dtype} values; expected {expected} for {dtype}")
    return array


def _read_jsonl(spec: InputSpec, path: Path) -> tuple[list[np.ndarray], list[str]]:
    key = spec.data.key or spec.name
    samples, names = [], []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            where = f"{path.name}: line {number}"
            try:
                value = json.loads(raw)
            except ValueError as error:
                raise DatasetError(f"{where}: not JSON ({error})") from None
            except RecursionError:
                raise DatasetError(f"{where}: nested too deeply") from None
            if isinstance(value, dict):
                if key not in value:
                    raise DatasetError(f"{where}: the object has no key {key!r} (set key: to choose one)")
                value = value[key]
            samples.append(json_sample(value, spec.dtype, where))
            names.append(f"line {number}")
    return samples, names


def json_sample(value: object, dtype: str, where: str) -> np.ndarray:
    """A JSON value (nested list; a bare value is a list of one) as an array of ``dtype``."""
    if not isinstance(value, list):
        value = [value]
    try:
        array = np.array(value, dtype=object if dtype == "BYTES" else None)
    except ValueError:
        raise DatasetError(f"{where}: the nested lists are ragged (every row must have the same length)") from None
    if dtype == "BYTES":
        flat = array.reshape(-1)
        if not all(isinstance(item, str) for item in flat):
            raise DatasetError(f"{where}: a BYTES input needs strings")
        flat[:] = [item.encode() for item in flat]
        return array
    return _numbers(array, dtype, where)


def _numbers(array: np.ndarray, dtype: str, where: str) -> np.ndarray:
    if array.size == 0:  # a sample of 0 elements ([]) is of any type: numpy only guesses float for it
        return array.astype(bool if dtype == "BOOL" else numpy_dtype(dtype))
    kind = array.dtype.kind
    if dtype == "BOOL":
        if kind == "b" or (kind in "iu" and set(np.unique(array).tolist()) <= {0, 1}):
            return array.astype(bool)
        raise DatasetError(f"{where}: a BOOL input needs true/false (or 0/1) values")
    if kind not in ("iu" if dtype in INTEGER_DTYPES else "iuf"):
        wanted = "integers" if dtype in INTEGER_DTYPES else "numbers"
        raise DatasetError(f"{where}: a {dtype} input needs {wanted}")
    if dtype in INTEGER_DTYPES:
        info = np.iinfo(numpy_dtype(dtype))
        if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
            raise DatasetError(f"{where}: a value is outside {dtype}'s range ({info.min}..{info.max})")
    elif array.size and float(np.abs(array).max()) > float_max(dtype):
        raise DatasetError(f"{where}: a value is outside {dtype}'s range (±{float_max(dtype):g})")
    return array.astype(numpy_dtype(dtype))


def _read_lines(spec: InputSpec, path: Path) -> tuple[list[np.ndarray], list[str]]:
    if spec.dtype != "BYTES":
        raise DatasetError(f"a lines data set feeds BYTES inputs (one element per line); input {spec.name!r} is {spec.dtype}")
    samples, names = [], []
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        line = line.removesuffix(b"\r")
        if not line.strip():
            continue
        sample = np.empty(1, dtype=object)
        sample[0] = line
        samples.append(sample)
        names.append(f"line {number}")
    return samples, names


# --- a target's data sets together -------------------------------------------------------------


def request_plan(count: int, batch_size: int, rotation: str, seed: int) -> np.ndarray:
    """Sample indices of every distinct request, shape ``(requests, batch_size)``.

    The samples are taken in order (round-robin) or in a seeded shuffle (random), ``batch_size`` at a
    time, wrapping around, until the sequence repeats: ``count / gcd(count, batch_size)`` requests, in
    which every sample appears ``batch_size / gcd`` times.
    """
    requests = count // math.gcd(count, batch_size)
    order = np.arange(count) if rotation == "round-robin" else np.random.default_rng(seed).permutation(count)
    positions = (np.arange(requests)[:, None] * batch_size + np.arange(batch_size)[None, :]) % count
    return order[positions]


def pool_nbytes(inputs: Sequence[InputSpec], datasets: dict[str, Dataset], batch_size: int) -> tuple[int, int]:
    """(distinct requests, bytes of all of them encoded) for a target whose data sets are ``datasets``."""
    count = len(next(iter(datasets.values())).samples)
    repeats = batch_size // math.gcd(count, batch_size)
    requests = count // math.gcd(count, batch_size)
    fixed = sum(request_nbytes(spec, batch_size) for spec in inputs if spec.name not in datasets)
    return requests, repeats * sum(dataset.nbytes for dataset in datasets.values()) + requests * fixed


def read_target_datasets(
    inputs: Sequence[InputSpec], batch_size: int, base_dir: Path, target_name: str
) -> tuple[dict[str, Dataset], list[ProblemAt]]:
    """The data sets of a target's inputs (by input name), and the problems (paths relative to ``inputs``)."""
    datasets: dict[str, Dataset] = {}
    where: dict[str, int] = {}
    problems: list[ProblemAt] = []
    for index, spec in enumerate(inputs):
        if spec.data.dataset is None:
            continue
        try:
            dataset = read_dataset(spec, base_dir)
        except DatasetError as error:
            problems.append(((index, "data", "dataset"), str(error)))
            continue
        problems.extend(_dataset_fit(dataset, index, batch_size, datasets, where))
        datasets[spec.name] = dataset
        where[spec.name] = index
    if datasets and not problems:
        requests, size = pool_nbytes(inputs, datasets, batch_size)
        if size > MAX_DATASET_BYTES:
            count = len(next(iter(datasets.values())).samples)
            problems.append(
                (
                    (),
                    f"target {target_name!r}: its {requests:,} distinct requests ({count:,} samples, batch_size {batch_size})"
                    f" take {size:,} bytes ({mib(size)}) encoded; at most {MAX_DATASET_BYTES:,} ({mib(MAX_DATASET_BYTES)})"
                    " per target (each process keeps one copy)",
                )
            )
    return datasets, problems


def _dataset_fit(
    dataset: Dataset,
    index: int,
    batch_size: int,
    datasets: dict[str, Dataset],
    where: dict[str, int],
) -> list[ProblemAt]:
    at = (index, "data", "dataset")
    if datasets:
        first_name, first = next(iter(datasets.items()))
        if len(first.samples) != len(dataset.samples):
            return [
                (
                    at,
                    f"{dataset.path.name} has {len(dataset.samples):,} samples; inputs[{where[first_name]}] ({first_name!r})"
                    f" has {len(first.samples):,}: a target's data sets pair sample i with sample i, so they need as many",
                )
            ]
    if batch_size > 1:
        shape = dataset.samples[0].shape
        for sample, name in zip(dataset.samples, dataset.names, strict=True):
            if sample.shape != shape:
                return [
                    (
                        at,
                        f"{dataset.path.name}: {name} has shape {list(sample.shape)}, {dataset.names[0]} has {list(shape)}:"
                        f" a batch of {batch_size} is one tensor, so its samples need one shape (batch_size: 1 sends"
                        " each sample's own shape)",
                    )
                ]
    return []
