"""The reference server's Python side without the server: its configuration (errors naming the
file and key path), the packed records' reader, and the launcher's exit code on a bad file.
The server itself is tested in tests/integration/test_reference_server.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferload.errors import ConfigFileError, ServerError
from inferload.local.reference_server import (
    RECORDS_MAGIC,
    FixedDelay,
    ReferenceConfig,
    TailDelay,
    load_reference_config,
    main,
    parse_records,
    reference_config_from_dict,
)


def problems(data: object) -> list[tuple[str, str]]:
    with pytest.raises(ConfigFileError) as caught:
        reference_config_from_dict(data, "ref.yaml")
    for problem in caught.value.problems:
        assert str(problem).startswith("ref.yaml: ")
    return [(p.key_path, p.message) for p in caught.value.problems]


def test_every_key_has_a_default_and_the_json_has_every_key() -> None:
    config = reference_config_from_dict({})
    assert config == ReferenceConfig()
    keys = json.loads(config.to_json())
    assert keys["delay"] == {"law": "none"} and keys["concurrency"] is None and keys["record_capacity"] == 2_000_000
    assert keys["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "dims": [16]}]


def test_the_laws_read_as_yaml_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "reference.yaml"
    path.write_text("delay:\n  law: tail\n  base: {law: fixed, ms: 2}\n  slow_ms: 40\nconcurrency: 4\n")
    config = load_reference_config(path)
    assert config.delay == TailDelay(base=FixedDelay(ms=2), p=0.01, slow_ms=40)
    assert config.concurrency == 4


def test_errors_name_the_key_path_without_the_law_union() -> None:
    found = problems({"delay": {"law": "fixed", "ms": -1}, "concurrency": 0, "outputs": [{"name": "A", "datatype": "FP8"}]})
    assert sorted(path for path, _ in found) == ["concurrency", "delay.ms", "outputs[0].datatype"]
    messages = dict(found)
    assert "got -1" in messages["delay.ms"] and "got 'FP8'" in messages["outputs[0].datatype"]


def test_an_unknown_key_and_an_unknown_law_are_named() -> None:
    assert problems({"thread": 2}) == [("thread", "unknown key")]
    [(path, message)] = problems({"delay": {"law": "gamma"}})
    assert path == "delay" and "gamma" in message
    [(path, _)] = problems(
        {"delay": {"law": "tail", "base": {"law": "bimodal", "p_slow": 2, "fast_ms": 1, "slow_ms": 2}, "slow_ms": 3}}
    )
    assert path == "delay.base.p_slow"


def test_a_file_that_is_not_a_mapping_or_not_yaml_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "reference.yaml"
    path.write_text("- a list\n")
    with pytest.raises(ConfigFileError, match=r"reference\.yaml: expected a mapping"):
        load_reference_config(path)
    path.write_text("delay: [unclosed\n")
    with pytest.raises(ConfigFileError, match=r"reference\.yaml: invalid YAML"):
        load_reference_config(path)
    with pytest.raises(ConfigFileError, match="cannot read it"):
        load_reference_config(tmp_path / "missing.yaml")


def test_the_launcher_exits_2_on_a_bad_file_before_starting_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "reference.yaml"
    path.write_text("threads: 0\n")
    assert main(["--config", str(path)]) == 2
    assert f"{path}: threads: Input should be greater than or equal to 1; got 0" in capsys.readouterr().err


def packed(columns: dict[str, np.ndarray], header_extra: dict[str, object]) -> bytes:
    """Records packed as the server packs them (docs/reference-server.md)."""
    described, data, offset = [], b"", 0
    for name, values in columns.items():
        raw = values.tobytes()
        described.append({"name": name, "dtype": values.dtype.str, "offset": offset, "count": int(values.size)})
        raw += b"\0" * (-len(raw) % 8)
        data += raw
        offset += len(raw)
    header = json.dumps({**header_extra, "columns": described}).encode()
    header += b" " * (-len(header) % 8)
    return RECORDS_MAGIC + len(header).to_bytes(8, "little") + header + data


def test_packed_records_read_back_as_arrays_and_ids() -> None:
    n = 3
    columns = {
        "seq": np.arange(n, dtype="<u8"),
        "received_ns": np.array([100, 200, 300], "<u8"),
        "start_ns": np.array([110, 205, 300], "<u8"),
        "end_ns": np.array([150, 260, 300], "<u8"),
        "answered_ns": np.array([160, 270, 301], "<u8"),
        "first_event_ns": np.array([130, 0, 0], "<u8"),
        "last_event_ns": np.array([150, 0, 0], "<u8"),
        "hold_ns": np.array([40, 40, 0], "<u8"),
        "batch": np.array([1, 2, 1], "<u4"),
        "protocol": np.array([0, 2, 3], "|u1"),
        "status": np.array([0, 0, 1], "|u1"),
        "id_offsets": np.array([0, 2, 2, 5], "<u4"),
        "id_bytes": np.frombuffer(b"a1xyz", "|u1"),
    }
    extra = {
        "count": n,
        "after": 0,
        "next": 3,
        "total": 3,
        "dropped": 4,
        "protocols": ["grpc", "grpc-stream", "http", "rest", "v1"],
        "statuses": ["ok", "failed", "cancelled"],
    }
    records = parse_records(packed(columns, extra))
    assert len(records) == 3 and records.dropped == 4 and records.next == 3
    assert records.ids == ("a1", "", "xyz")
    assert records.queue_ns.tolist() == [10, 5, 0] and records.service_ns.tolist() == [40, 55, 0]
    assert records.with_status("failed").tolist() == [False, False, True]
    assert records.with_protocol("http").tolist() == [False, True, False]
    assert records.most_in_service() == 1  # [110, 150) and [205, 260) do not overlap
    assert records.first_event_ns.tolist() == [130, 0, 0] and records.last_event_ns.tolist() == [150, 0, 0]


def test_most_in_service_counts_overlaps_and_frees_a_slot_before_it_is_taken_again() -> None:
    start = np.array([0, 5, 10, 10], "<u8")
    end = np.array([10, 20, 30, 12], "<u8")
    n = start.size
    zeros = np.zeros(n, "<u8")
    columns = {
        "seq": np.arange(n, dtype="<u8"),
        "received_ns": zeros,
        "start_ns": start,
        "end_ns": end,
        "answered_ns": end,
        "first_event_ns": zeros,
        "last_event_ns": zeros,
        "hold_ns": zeros,
        "batch": np.ones(n, "<u4"),
        "protocol": np.zeros(n, "|u1"),
        "status": np.zeros(n, "|u1"),
        "id_offsets": np.zeros(n + 1, "<u4"),
        "id_bytes": np.zeros(0, "|u1"),
    }
    extra = {"count": n, "after": 0, "next": n, "total": n, "dropped": 0, "protocols": ["grpc"], "statuses": ["ok"]}
    assert parse_records(packed(columns, extra)).most_in_service() == 3  # at 10: one ends, two start


def test_an_answer_that_is_not_records_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="IFLREC01"):
        parse_records(b'{"error": "Not Found"}')
