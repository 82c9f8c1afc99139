"""``inferload validate`` on the TorchServe body keys: ``content_type`` (raw, text), ``body_template``
and ``media_type``, each bad value reported at its own key as ``file: key.path: message``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import TorchServeTarget
from inferload.users.request_pool import RequestPool, RequestSource
from inferload.users.torchserve import TorchServeRestUser, content_type_header
from tests.support.scenario_factory import key_problems, steady_one_user, targets_of, write_scenario


def ts_target(**keys: Any) -> dict[str, Any]:
    target: dict[str, Any] = {
        "name": "ts",
        "kind": "torchserve-rest",
        "address": "http://127.0.0.1:8080",
        "model": "m",
        "inputs": [{"name": "body", "shape": [4], "dtype": "FP32"}],
    }
    target.update(keys)
    return target


def folder_input(dtype: str = "UINT8", **data: Any) -> list[dict[str, Any]]:
    return [{"name": "image", "shape": [-1] if dtype == "UINT8" else [1], "dtype": dtype, "data": {"dataset": "digits", **data}}]


def lines_input(path: str = "texts.txt", dtype: str = "BYTES") -> list[dict[str, Any]]:
    return [{"name": "text", "shape": [1], "dtype": dtype, "data": {"dataset": path, "format": "lines"}}]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    digits = tmp_path / "digits"
    digits.mkdir()
    (digits / "0.png").write_bytes(b"\x89PNG\r\n\x1a\n0")
    (digits / "1.png").write_bytes(b"\x89PNG\r\n\x1a\n1")
    (tmp_path / "texts.txt").write_text("the first line\nthe second\n")
    (tmp_path / "binary.txt").write_bytes(b"fine\nnot \xff text\n")
    return tmp_path


def load(folder: Path, *targets: dict[str, Any]) -> Scenario:
    return load_scenario(write_scenario(folder, steady_one_user(*targets, name="bodies", duration="5s")))


def problems(folder: Path, target: dict[str, Any]) -> list[tuple[str, str]]:
    return key_problems(folder, steady_one_user(target, name="bodies", duration="5s"))


def test_the_new_keys_load_with_their_values(folder: Path) -> None:
    scenario = load(
        folder,
        ts_target(name="raw", content_type="raw", inputs=folder_input()),
        ts_target(name="raw-bytes", content_type="raw", media_type="image/png", inputs=folder_input("BYTES")),
        ts_target(name="text", content_type="text", inputs=lines_input()),
        ts_target(name="kserve", content_type="json", body_template='{"instances": $data}'),
    )
    raw, raw_bytes, text, kserve = targets_of(TorchServeTarget, scenario)
    assert (raw.content_type, raw.media_type) == ("raw", None)
    assert (raw_bytes.content_type, raw_bytes.media_type) == ("raw", "image/png")
    assert text.content_type == "text"
    assert (kserve.content_type, kserve.body_template) == ("json", '{"instances": $data}')


def test_the_keys_are_optional_and_default_to_none(folder: Path) -> None:
    (target,) = targets_of(TorchServeTarget, load(folder, ts_target()))
    assert (target.content_type, target.body_template, target.media_type) == ("octet-stream", None, None)


@pytest.mark.parametrize(
    ("keys", "key_path", "message"),
    [
        (
            {"content_type": "protobuf"},
            "targets[0].content_type",
            "expected one of octet-stream, npy, json, raw, text; got 'protobuf'",
        ),
        # body_template
        (
            {"content_type": "json", "body_template": '{"instances": []}'},
            "targets[0].body_template",
            "must hold $data where the request's data goes",
        ),
        (
            {"content_type": "json", "body_template": '{"instances": "$data"}'},
            "targets[0].body_template",
            "is not JSON once $data is replaced by a value",
        ),
        (
            {"content_type": "json", "body_template": "{instances: $data}"},
            "targets[0].body_template",
            "is not JSON once $data is replaced by a value (Expecting property name enclosed in double quotes",
        ),
        (
            {"body_template": '{"instances": $data}'},
            "targets[0].body_template",
            "only applies to content_type json; this target's is octet-stream",
        ),
        ({"content_type": "json", "body_template": 5}, "targets[0].body_template", "expected a string; got 5"),
        (
            {"content_type": "json", "body_template": "[" * 100_000 + "$data" + "]" * 100_000},
            "targets[0].body_template",
            "is nested too deep for a JSON reader",
        ),
        # media_type
        (
            {"media_type": "png"},
            "targets[0].media_type",
            "expected a media type like image/png or text/plain; charset=utf-8; got 'png'",
        ),
        # raw
        (
            {"content_type": "raw"},
            "targets[0].inputs[0].data",
            "a raw body is a file's bytes: feed this input from a folder data set; it uses generator random",
        ),
        (
            {"content_type": "raw", "inputs": lines_input()},
            "targets[0].inputs[0].data.dataset",
            "a raw body is a file's bytes: give a folder of files; this data set is lines",
        ),
        (
            {"content_type": "raw", "batch_size": 2, "inputs": folder_input()},
            "targets[0].content_type",
            "raw bodies carry one file each: batch_size must be 1; got 2",
        ),
        (
            {"content_type": "raw", "inputs": [*folder_input(), {"name": "b", "shape": [1], "dtype": "FP32"}]},
            "targets[0].content_type",
            "raw bodies carry one input; this target has 2 (use octet-stream)",
        ),
        # text
        (
            {"content_type": "text"},
            "targets[0].inputs[0].dtype",
            "a text body sends UTF-8 text: the input must be BYTES; got FP32",
        ),
        (
            {"content_type": "text", "inputs": lines_input("binary.txt")},
            "targets[0].inputs[0].data.dataset",
            "binary.txt: line 2 is not UTF-8 text (byte 4); a text body sends each sample as text",
        ),
    ],
)
def test_a_bad_body_key_is_reported_at_its_key(folder: Path, keys: dict[str, Any], key_path: str, message: str) -> None:
    found = problems(folder, ts_target(**keys))
    assert [(path, message in text) for path, text in found] == [(key_path, True)], found


def test_the_body_keys_only_apply_to_torchserve(folder: Path) -> None:
    triton = {
        "name": "tr",
        "kind": "triton-http",
        "address": "127.0.0.1:8000",
        "model": "m",
        "inputs": [{"name": "x", "shape": [4], "dtype": "FP32"}],
        "media_type": "image/png",
    }
    assert problems(folder, triton) == [
        ("targets[0].media_type", "only applies to torchserve-rest targets; this target is triton-http")
    ]
    triton.pop("media_type")
    triton["body_template"] = '{"instances": $data}'
    assert problems(folder, triton) == [
        ("targets[0].body_template", "only applies to torchserve-rest targets; this target is triton-http")
    ]


# --- what a TorchServe user sends for these keys (no server: the request pool and the header only) ---


def test_a_raw_target_sends_each_file_as_is_with_the_type_of_its_suffix(folder: Path) -> None:
    scenario = load(folder, ts_target(name="raw", content_type="raw", inputs=folder_input()))
    (target,) = targets_of(TorchServeTarget, scenario)
    assert content_type_header(target, folder) == "image/png"
    mixed = folder / "mixed"  # a folder is listed once per process: the same files and one more, elsewhere
    shutil.copytree(folder / "digits", mixed / "digits")
    (mixed / "digits" / "extra.bin").write_bytes(b"\x00")
    (mixed_target,) = targets_of(TorchServeTarget, load(mixed, ts_target(name="raw", content_type="raw", inputs=folder_input())))
    assert content_type_header(mixed_target, mixed) == "application/octet-stream"  # the suffixes disagree
    with_type = target.model_copy(update={"media_type": "image/x-digit"})
    assert content_type_header(with_type, folder) == "image/x-digit"

    class RawUser(TorchServeRestUser):
        pass

    RawUser.target = mixed_target
    pool = RequestPool(RequestSource(mixed_target, mixed), RawUser.encode_request)
    bodies = {pool.next()[1] for _ in range(pool.size)}
    assert bodies == {b"\x89PNG\r\n\x1a\n0", b"\x89PNG\r\n\x1a\n1", b"\x00"}  # every file, as it is


def test_a_template_target_sends_each_line_in_the_template(folder: Path) -> None:
    (folder / "rows.jsonl").write_text("[1, 2]\n[3, 4]\n")
    inputs = [{"name": "x", "shape": [2], "dtype": "INT64", "data": {"dataset": "rows.jsonl"}}]
    (target,) = targets_of(
        TorchServeTarget, load(folder, ts_target(content_type="json", body_template='{"instances": $data}', inputs=inputs))
    )
    assert content_type_header(target, folder) == "application/json"

    class JsonUser(TorchServeRestUser):
        pass

    JsonUser.target = target
    pool = RequestPool(RequestSource(target, folder), JsonUser.encode_request)
    assert [pool.next()[1] for _ in range(3)] == [b'{"instances": [[1,2]]}', b'{"instances": [[3,4]]}', b'{"instances": [[1,2]]}']
