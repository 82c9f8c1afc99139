"""Data sets read as samples (folder, .npy, .npz, JSON lines, text lines), the rotation plan, and the
per-process pool of pre-encoded requests its users pick from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferload.scenario.datasets import DatasetError, pool_nbytes, read_dataset, request_plan
from inferload.scenario.inputs import InputSpec
from inferload.scenario.targets import Target
from inferload.scenario.tensors import numpy_dtype
from inferload.users import request_pool
from inferload.users.payload import make_input_array
from inferload.users.request_pool import RequestData, RequestPool, RequestSource

ALL_DTYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16")


def spec(dtype: str, shape: list[int], data: dict[str, Any], name: str = "x") -> InputSpec:
    return InputSpec.model_validate({"name": name, "shape": shape, "dtype": dtype, "data": data})


def target(inputs: list[dict[str, Any]], **extra: Any) -> Target:
    return Target.model_validate(
        {"name": "t", "kind": "triton-grpc", "address": "127.0.0.1:8001", "model": "m", "inputs": inputs, **extra}
    )


# --- readers -----------------------------------------------------------------------------------


def test_a_folder_of_files_gives_one_sample_per_file_sorted_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "b.jpg").write_bytes(b"\xff\xd8second")
    (folder / "a.jpg").write_bytes(b"\xff\xd8a")
    (folder / ".hidden").write_bytes(b"no")
    (folder / "notes.txt").write_bytes(b"skipped by the pattern")

    uint8 = read_dataset(spec("UINT8", [-1], {"dataset": "images", "pattern": "*.jpg"}), tmp_path)
    as_bytes = read_dataset(spec("BYTES", [1], {"dataset": "images", "pattern": "*.jpg"}), tmp_path)

    assert uint8.names == ("a.jpg", "b.jpg")
    assert [s.tobytes() for s in uint8.samples] == [b"\xff\xd8a", b"\xff\xd8second"]
    assert all(s.dtype == np.uint8 for s in uint8.samples)
    assert [s.tolist() for s in as_bytes.samples] == [[b"\xff\xd8a"], [b"\xff\xd8second"]]
    assert as_bytes.nbytes == (4 + 3) + (4 + 8)


def test_npy_has_a_leading_sample_axis(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.arange(24, dtype=np.float32).reshape(4, 2, 3))
    dataset = read_dataset(spec("FP32", [2, 3], {"dataset": "s.npy"}), tmp_path)
    assert len(dataset.samples) == 4
    assert np.array_equal(dataset.samples[3], np.arange(18, 24, dtype=np.float32).reshape(2, 3))


def test_npz_takes_the_array_named_by_key_or_after_the_input(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", x=np.zeros((3, 2), np.int16), other=np.ones((5, 2), np.int16))
    by_name = read_dataset(spec("INT16", [2], {"dataset": "s.npz"}), tmp_path)
    by_key = read_dataset(spec("INT16", [2], {"dataset": "s.npz", "key": "other"}), tmp_path)
    assert (len(by_name.samples), len(by_key.samples)) == (3, 5)
    with pytest.raises(DatasetError, match=r"s.npz has no array 'y'; it holds 'x', 'other'"):
        read_dataset(spec("INT16", [2], {"dataset": "s.npz", "key": "y"}), tmp_path)


def test_npy_of_strings_feeds_a_bytes_input(tmp_path: Path) -> None:
    np.save(tmp_path / "words.npy", np.array([["ab"], ["cde"]]))
    dataset = read_dataset(spec("BYTES", [1], {"dataset": "words.npy"}), tmp_path)
    assert [s.tolist() for s in dataset.samples] == [[b"ab"], [b"cde"]]


def test_a_1d_npy_gives_samples_of_one_element_to_an_input_of_shape_1(tmp_path: Path) -> None:
    np.save(tmp_path / "words.npy", np.array([b"hello", b"good morning"]))
    np.save(tmp_path / "numbers.npy", np.array([1.5, 2.5], dtype=np.float32))
    words = read_dataset(spec("BYTES", [1], {"dataset": "words.npy"}), tmp_path)
    numbers = read_dataset(spec("FP32", [1], {"dataset": "numbers.npy"}), tmp_path)
    assert [s.tolist() for s in words.samples] == [[b"hello"], [b"good morning"]]
    assert [s.tolist() for s in numbers.samples] == [[1.5], [2.5]]
    with pytest.raises(DatasetError, match=r"numbers.npy has shape \[2\]: 2 single values.*save the samples as \(N, 4\)"):
        read_dataset(spec("FP32", [4], {"dataset": "numbers.npy"}), tmp_path)


def test_an_array_of_python_objects_is_refused_with_how_to_save_it(tmp_path: Path) -> None:
    objects = np.array([b"hello", b"good morning"], dtype=object)
    np.save(tmp_path / "objects.npy", objects, allow_pickle=True)
    np.savez(tmp_path / "objects.npz", x=objects)
    for name in ("objects.npy", "objects.npz"):
        with pytest.raises(DatasetError, match=r"holds Python objects \(dtype object.*np.array\(values, dtype=np.bytes_\)"):
            read_dataset(spec("BYTES", [1], {"dataset": name}), tmp_path)


def test_json_lines_hold_nested_lists_or_objects_keyed_by_input(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("[[1, 2], [3, 4]]\n\n[[5, 6], [7, 8]]\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"x": [1.5], "text": "hello"}) + "\n" + json.dumps({"x": [2.5], "text": "hi"}))
    lists = read_dataset(spec("INT8", [2, 2], {"dataset": "a.jsonl"}), tmp_path)
    floats = read_dataset(spec("FP64", [1], {"dataset": "b.jsonl"}), tmp_path)
    texts = read_dataset(spec("BYTES", [1], {"dataset": "b.jsonl", "key": "text"}, name="t"), tmp_path)
    assert lists.names == ("line 1", "line 3")
    assert lists.samples[1].dtype == np.int8 and lists.samples[1].tolist() == [[5, 6], [7, 8]]
    assert [s.tolist() for s in floats.samples] == [[1.5], [2.5]]
    assert [s.tolist() for s in texts.samples] == [[b"hello"], [b"hi"]]


@pytest.mark.parametrize("dtype", ["INT32", "BOOL", "FP32"])
def test_a_sample_of_no_elements_is_an_empty_array_of_the_inputs_type(tmp_path: Path, dtype: str) -> None:
    """Triton's repeat_int32 answers an empty IN with no responses: ``{"IN": []}`` is a sample, not a type error."""
    (tmp_path / "a.jsonl").write_text('{"IN": []}\n{"IN": [1, 0]}\n')
    data = read_dataset(spec(dtype, [-1], {"dataset": "a.jsonl"}, name="IN"), tmp_path)
    assert data.samples[0].shape == (0,) and data.samples[0].dtype == numpy_dtype(dtype)
    assert data.samples[1].tolist() == ([True, False] if dtype == "BOOL" else [1, 0])


def test_a_text_file_gives_one_bytes_element_per_non_blank_line(tmp_path: Path) -> None:
    (tmp_path / "prompts.txt").write_bytes(b"first line\r\n\nsecond\n")
    dataset = read_dataset(spec("BYTES", [1], {"dataset": "prompts.txt"}), tmp_path)
    assert [s.tolist() for s in dataset.samples] == [[b"first line"], [b"second"]]
    assert dataset.names == ("line 1", "line 3")


@pytest.mark.parametrize(
    ("files", "input_spec", "message"),
    [
        ({}, ("FP32", [2], {"dataset": "nothere.npy"}), "data set not found"),
        ({"e.txt": b"\n\n"}, ("BYTES", [1], {"dataset": "e.txt"}), "e.txt holds no samples"),
        ({"n.txt": b"a\n"}, ("FP32", [1], {"dataset": "n.txt"}), "a lines data set feeds BYTES inputs"),
        ({"s.npy": np.zeros((2, 3), np.float32)}, ("FP32", [2], {"dataset": "s.npy"}), "sample 0 has shape [3]"),
        ({"s.npy": np.zeros((2, 3), np.float64)}, ("FP32", [3], {"dataset": "s.npy"}), "holds float64 values; expected float32"),
        ({"r.jsonl": b"[[1], [2, 3]]\n"}, ("INT32", [-1, -1], {"dataset": "r.jsonl"}), "line 1: the nested lists are ragged"),
        ({"o.jsonl": b"[300]\n"}, ("INT8", [1], {"dataset": "o.jsonl"}), "outside INT8's range (-128..127)"),
        ({"f.jsonl": b"[1.5]\n"}, ("INT32", [1], {"dataset": "f.jsonl"}), "a INT32 input needs integers"),
        ({"k.jsonl": b'{"y": [1]}\n'}, ("INT32", [1], {"dataset": "k.jsonl"}), "line 1: the object has no key 'x'"),
        ({"bad.jsonl": b"[1,\n"}, ("INT32", [1], {"dataset": "bad.jsonl"}), "line 1: not JSON"),
        ({"d.bin": b"1"}, ("UINT8", [-1], {"dataset": "d.bin"}), "cannot tell the format of 'd.bin'"),
    ],
)
def test_a_data_set_that_does_not_fit_is_an_error_naming_the_file(
    tmp_path: Path, files: dict[str, Any], input_spec: tuple[str, list[int], dict[str, Any]], message: str
) -> None:
    for name, content in files.items():
        if isinstance(content, np.ndarray):
            np.save(tmp_path / name, content)
        else:
            (tmp_path / name).write_bytes(content)
    with pytest.raises(DatasetError) as caught:
        read_dataset(spec(*input_spec), tmp_path)
    assert message in str(caught.value)


def test_a_folder_feeds_only_uint8_or_bytes_inputs(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a").write_bytes(b"1234")
    with pytest.raises(DatasetError, match="a folder data set feeds UINT8 inputs"):
        read_dataset(spec("FP32", [1], {"dataset": "f"}), tmp_path)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_numeric_dtype_reads_from_json_lines_and_npy(tmp_path: Path, dtype: str) -> None:
    (tmp_path / "s.jsonl").write_text("[1, 0]\n[0, 1]\n" if dtype == "BOOL" else "[1, 2]\n[3, 4]\n")
    values = np.array([[1, 0], [0, 1]] if dtype == "BOOL" else [[1, 2], [3, 4]]).astype(numpy_dtype(dtype))
    np.save(tmp_path / "s.npy", values)
    from_json = read_dataset(spec(dtype, [2], {"dataset": "s.jsonl"}), tmp_path)
    from_npy = read_dataset(spec(dtype, [2], {"dataset": "s.npy"}), tmp_path)
    for samples in (from_json.samples, from_npy.samples):
        assert samples[1].dtype == numpy_dtype(dtype)
        assert np.array_equal(np.stack(samples).astype(np.float64), values.astype(np.float64))


# --- the rotation plan -------------------------------------------------------------------------


def test_round_robin_takes_batch_size_samples_at_a_time_until_the_sequence_repeats() -> None:
    assert request_plan(5, 1, "round-robin", 0).tolist() == [[0], [1], [2], [3], [4]]
    assert request_plan(4, 2, "round-robin", 0).tolist() == [[0, 1], [2, 3]]
    plan = request_plan(5, 2, "round-robin", 0)  # 5 requests of 2 cover every sample twice
    assert plan.tolist() == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]


def test_random_is_a_seeded_shuffle_of_every_sample() -> None:
    first = request_plan(100, 1, "random", 7)
    assert sorted(first.ravel().tolist()) == list(range(100))
    assert first.tolist() == request_plan(100, 1, "random", 7).tolist()
    assert first.tolist() != request_plan(100, 1, "random", 8).tolist()
    assert first.ravel().tolist() != list(range(100))


def test_the_encoded_size_counts_every_request() -> None:
    inputs = [spec("UINT8", [4], {"dataset": "x.npy"}, name="a"), spec("FP32", [2], {"generator": "zeros"}, name="b")]
    fake = {"a": _FakeDataset(count=5, nbytes=20)}
    requests, size = pool_nbytes(inputs, fake, batch_size=2)  # type: ignore[arg-type]
    assert requests == 5
    assert size == 2 * 20 + 5 * (2 * 2 * 4)  # each sample sent twice per pass + 5 requests of the generated input


class _FakeDataset:
    def __init__(self, count: int, nbytes: int) -> None:
        self.samples = [None] * count
        self.nbytes = nbytes


# --- the per-process pool ----------------------------------------------------------------------


def _lines_target(tmp_path: Path, lines: int, **extra: Any) -> Target:
    (tmp_path / "p.txt").write_text("".join(f"sample {i}\n" for i in range(lines)))
    inputs = [
        {"name": "TEXT", "shape": [1], "dtype": "BYTES", "data": {"dataset": str(tmp_path / "p.txt")}},
        {"name": "FIXED", "shape": [2], "dtype": "FP32", "data": {"generator": "constant", "value": 1.5}},
    ]
    return target(inputs, **extra)


def test_the_pool_encodes_each_request_once_and_next_only_picks(tmp_path: Path) -> None:
    encoded: list[RequestData] = []

    def encode(data: RequestData) -> str:
        encoded.append(data)
        return f"request {data.index}"

    pool = RequestPool(RequestSource(_lines_target(tmp_path, 3), tmp_path), encode)
    picks = [pool.next() for _ in range(7)]

    assert [data.index for data in encoded] == [0, 1, 2]
    assert [index for index, _ in picks] == [0, 1, 2, 0, 1, 2, 0]
    assert picks[1][1] == "request 1"
    second = encoded[1]
    assert second.samples == (1,)
    assert [spec.name for spec, _ in second.arrays] == ["TEXT", "FIXED"]
    assert second.arrays[0][1].tolist() == [[b"sample 1"]]
    assert second.arrays[1][1].tolist() == [[1.5, 1.5]]


def test_random_rotation_visits_every_request_once_per_pass(tmp_path: Path) -> None:
    pool = RequestPool(
        RequestSource(_lines_target(tmp_path, 20, rotation="random", rotation_seed=3), tmp_path), lambda d: d.index
    )
    first_pass = [pool.next()[0] for _ in range(20)]
    second_pass = [pool.next()[0] for _ in range(20)]
    assert sorted(first_pass) == sorted(second_pass) == list(range(20))
    assert first_pass != list(range(20)) and first_pass != second_pass


def test_workers_start_at_different_places(tmp_path: Path) -> None:
    source = RequestSource(_lines_target(tmp_path, 100), tmp_path)
    starts = [RequestPool(source, lambda d: d.index, worker_index=w).next()[0] for w in range(4)]
    assert len(set(starts)) == 4


def test_a_batch_stacks_its_samples_and_a_model_that_does_not_batch_gets_the_sample_itself(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
    inputs = [{"name": "x", "shape": [2], "dtype": "FP32", "data": {"dataset": str(tmp_path / "s.npy")}}]
    batched = RequestSource(target(inputs, batch_size=2), tmp_path)
    unbatched = RequestSource(target(inputs), tmp_path, model_batches=False)
    assert batched.size == 3
    assert batched.data(1).samples == (2, 0)
    assert batched.data(1).arrays[0][1].tolist() == [[4.0, 5.0], [0.0, 1.0]]
    assert unbatched.data(2).arrays[0][1].tolist() == [4.0, 5.0]


def test_without_a_data_set_the_pool_holds_the_one_generated_request(tmp_path: Path) -> None:
    source = RequestSource(
        target([{"name": "x", "shape": [3], "dtype": "BF16", "data": {"generator": "random", "seed": 4}}]), tmp_path
    )
    pool = RequestPool(source, lambda d: d)
    index, data = pool.next()
    assert (pool.size, index, data.samples) == (1, 0, ())
    array = data.arrays[0][1]
    assert array.dtype == np.dtype(ml_dtypes.bfloat16) and array.shape == (1, 3)
    assert np.array_equal(array, make_input_array(source.target.inputs[0], 1, tmp_path))


def test_the_source_reports_a_data_set_problem_with_the_target_and_key(tmp_path: Path) -> None:
    inputs = [{"name": "x", "shape": [2], "dtype": "FP32", "data": {"dataset": str(tmp_path / "gone.npy")}}]
    with pytest.raises(DatasetError, match=r"target 't': inputs\[0\]\.data\.dataset: data set not found"):
        RequestSource(target(inputs), tmp_path)


def test_a_replayed_sample_picks_the_request_that_starts_from_it_or_carries_it(tmp_path: Path) -> None:
    """A replay file's `sample` column (docs/scenarios.md): batch 1, each sample's own request, whatever
    the rotation; batch 2 over 4 samples (requests [0, 1] and [2, 3]), the request that carries it."""
    shuffled = RequestPool(
        RequestSource(_lines_target(tmp_path, 5, rotation="random", rotation_seed=7), tmp_path), lambda d: d.samples
    )
    assert all(shuffled.encoded(shuffled.index_of_sample(s)) == (s,) for s in range(5))
    pairs = RequestPool(RequestSource(_lines_target(tmp_path, 4, batch_size=2), tmp_path), lambda d: d.samples)
    assert [pairs.encoded(pairs.index_of_sample(s)) for s in range(4)] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    with pytest.raises(IndexError, match="sample 9: the data set has samples 0 to 3"):
        pairs.index_of_sample(9)


def test_a_replayed_batch_gets_a_request_of_that_many_rows_made_once(tmp_path: Path) -> None:
    """A replay file's `batch` column: a request of `batch` rows from the row's sample on (wrapping at
    the data set's end), the generated input's rows repeated; made on first use, then picked again."""
    encoded: list[RequestData] = []

    def encode(data: RequestData) -> RequestData:
        encoded.append(data)
        return data

    pool = RequestPool(RequestSource(_lines_target(tmp_path, 5), tmp_path), encode)
    assert pool.index_for(None, None) is None and pool.index_for(3, 1) == pool.index_of_sample(3)  # the target's own
    index = pool.index_for(3, 4)
    assert index is not None and index >= pool.size
    made = pool.encoded(index)
    assert made.samples == (3, 4, 0, 1) and pool.samples(index) == (3, 4, 0, 1) and pool.batch_of(index) == 4
    assert made.arrays[0][1].tolist() == [[b"sample 3"], [b"sample 4"], [b"sample 0"], [b"sample 1"]]
    assert made.arrays[1][1].tolist() == [[1.5, 1.5]] * 4
    made_before = len(encoded)
    assert pool.index_for(3, 4) == index and len(encoded) == made_before  # kept, not made again
    assert pool.index_for(3, 2) != index and pool.batch_of(0) == 1
    # without a sample it starts where the rotation's next request does
    following = pool.index_for(None, 2)
    assert following is not None and pool.samples(following)[1] == (pool.samples(following)[0] + 1) % 5


def test_the_requests_made_for_batches_are_bounded_and_the_oldest_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []

    def encode(data: RequestData) -> tuple[int, ...]:
        sizes.append(sum(array.nbytes for _, array in data.arrays))
        return data.samples

    pool = RequestPool(RequestSource(_lines_target(tmp_path, 8), tmp_path), encode)
    one = pool.index_for(0, 2)
    assert one is not None
    monkeypatch.setattr(request_pool, "MAX_BATCHED_BYTES", sizes[-1] * 2)  # room for two of them
    two, three = pool.index_for(1, 2), pool.index_for(2, 2)
    assert two is not None and three is not None and len({one, two, three}) == 3
    with pytest.raises(KeyError):
        pool.encoded(one)  # the oldest went
    assert pool.encoded(three) == (2, 3) and pool.index_for(0, 2) not in (one, two, three)  # made anew, a new index


def test_a_model_that_does_not_batch_takes_its_own_request_whatever_the_row_says(tmp_path: Path) -> None:
    pool = RequestPool(RequestSource(_lines_target(tmp_path, 3), tmp_path, model_batches=False), lambda d: d.samples)
    assert pool.index_for(2, 4) == pool.index_of_sample(2) and pool.index_for(None, 4) is None
