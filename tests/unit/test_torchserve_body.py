"""TorchServe request bodies (``inferload.users.torchserve``, ``inferload.scenario.bodies``): each
content_type's bytes and Content-Type, the ``body_template`` rule, and the media type guessed from
file names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferload.scenario.bodies import fill_template, guess_media_type, media_type_problem, template_problem
from inferload.users.torchserve import (
    BodyError,
    encode_body,
    encode_json_body,
    encode_raw,
    encode_text,
    header_media_type,
)


def bytes_array(*items: bytes, shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = list(items)
    return array.reshape(shape or (len(items),))


# --- raw -----------------------------------------------------------------------------------------


def test_a_raw_body_is_the_file_itself_from_a_uint8_vector_or_a_bytes_element() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    uint8_request = np.frombuffer(png, dtype=np.uint8).reshape(1, -1)  # batch_size 1, shape [-1]
    assert encode_raw(uint8_request) == png
    assert encode_raw(bytes_array(png, shape=(1, 1))) == png
    assert encode_body("raw", [uint8_request]) == png


def test_a_raw_body_refuses_more_than_one_bytes_element() -> None:
    with pytest.raises(BodyError, match="one sample's bytes; this request holds 2 elements"):
        encode_raw(bytes_array(b"a", b"b"))


# --- text ----------------------------------------------------------------------------------------


def test_a_text_body_joins_the_elements_by_newlines() -> None:
    assert encode_text(bytes_array("héllo wörld".encode(), shape=(1, 1))) == "héllo wörld".encode()
    assert encode_body("text", [bytes_array(b"one", b"two", shape=(2, 1))]) == b"one\ntwo"


def test_a_text_body_refuses_bytes_that_are_not_utf8_and_numbers() -> None:
    with pytest.raises(BodyError, match=r"element 1 is not UTF-8 text \(byte 1: b'\\xff"):
        encode_text(bytes_array(b"fine", b"a\xffb"))
    with pytest.raises(BodyError, match="takes BYTES elements; this input holds float32"):
        encode_text(np.zeros((1, 3), dtype=np.float32))


# --- json and its template -----------------------------------------------------------------------


def test_json_without_a_template_is_the_nested_list() -> None:
    array = np.array([[1.5, 2.0]], dtype=np.float32)
    assert json.loads(encode_body("json", [array])) == [[1.5, 2.0]]


def test_the_template_takes_the_request_data_at_every_placeholder() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=np.int64)
    body = encode_json_body(array, '{"instances": $data, "again": $data, "note": "cost: 5$"}')
    assert json.loads(body) == {"instances": [[1, 2], [3, 4]], "again": [[1, 2], [3, 4]], "note": "cost: 5$"}
    strings = bytes_array(b"good", b"day", shape=(2, 1))
    assert json.loads(encode_body("json", [strings], '{"inputs": $data}')) == {"inputs": [["good"], ["day"]]}


def test_fill_template_replaces_only_the_literal_placeholder() -> None:
    assert fill_template("[$data, $dat, $$data]", "7") == "[7, $dat, $7]"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ('{"instances": []}', "must hold $data where the request's data goes"),
        ('{"instances": "$data"}', "is not JSON once $data is replaced by a value"),
        ('{"instances": $data', "is not JSON once $data is replaced by a value (Expecting ',' delimiter"),
        ("instances=$data", "is not JSON once $data is replaced"),
        ('{"instances": $database}', "is not JSON once $data is replaced"),
    ],
)
def test_a_bad_template_says_why(template: str, problem: str) -> None:
    found = template_problem(template)
    assert found is not None and problem in found, found


@pytest.mark.parametrize("template", ['{"instances": $data}', "$data", '[{"x": $data}, 1]', '{"a": {"b": [$data]}}'])
def test_a_good_template_has_no_problem(template: str) -> None:
    assert template_problem(template) is None


# --- the other content types ---------------------------------------------------------------------


def test_octet_stream_and_npy_are_unchanged() -> None:
    array = np.arange(4, dtype=np.float32).reshape(1, 4)
    assert encode_body("octet-stream", [array, array]) == array.tobytes() * 2
    assert encode_body("npy", [array]).startswith(b"\x93NUMPY")
    with pytest.raises(BodyError, match="sends one input; this target has 2"):
        encode_body("npy", [array, array])
    with pytest.raises(BodyError, match="unknown content_type 'protobuf'"):
        encode_body("protobuf", [array])


# --- Content-Type --------------------------------------------------------------------------------


def test_the_header_is_media_type_else_guessed_for_raw_else_the_default() -> None:
    assert header_media_type("raw", None, ["0.png", "1.png"]) == "image/png"
    assert header_media_type("raw", None, ["a.png", "b.jpg"]) == "application/octet-stream"
    assert header_media_type("raw", None, ["noext"]) == "application/octet-stream"
    assert header_media_type("raw", None) == "application/octet-stream"
    assert header_media_type("raw", "image/x-digit", ["0.png"]) == "image/x-digit"
    assert header_media_type("text", None) == "text/plain; charset=utf-8"
    assert header_media_type("json", None) == "application/json"
    assert header_media_type("npy", None) == "application/x-npy"
    assert guess_media_type(["photo.JPG"]) == "image/jpeg"


@pytest.mark.parametrize("value", ["image/png", "application/json; charset=utf-8", 'text/plain;format="flowed"'])
def test_good_media_types(value: str) -> None:
    assert media_type_problem(value) is None


@pytest.mark.parametrize("value", ["png", "image/", "image/png; charset", "image png", "text/plain\r\nX: 1", ""])
def test_bad_media_types(value: str) -> None:
    problem = media_type_problem(value)
    assert problem is not None and problem.startswith("expected a media type like image/png"), problem
