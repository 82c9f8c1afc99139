"""The collector's Triton trace-file source: complete records only, once each, across files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from inferload.observe.points import TRACE_MEASUREMENT, trace_from_row
from inferload.observe.sources.triton_trace_file import TritonTraceFileSource, trace_file_names
from inferload.servermetrics.triton_trace import json_entries, parse_traces

STAMPS = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END", "GRPC_SEND_END")


def entries(first_id: int, count: int, model: str = "m") -> list[dict[str, Any]]:
    """Triton 2.51's layout: a header entry, then one entry per timestamp."""
    out: list[dict[str, Any]] = []
    for trace_id in range(first_id, first_id + count):
        out.append({"id": trace_id, "model_name": model, "model_version": 1, "request_id": f"r-{trace_id}"})
        for k, name in enumerate(STAMPS):
            out.append({"id": trace_id, "timestamps": [{"name": name, "ns": 1_000_000 * trace_id + k}]})
    return out


def array(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=False)


def request_ids(points: list[Any]) -> list[str]:
    return [p.fields["request_id"] for p in points]


def started(tmp_path: Path) -> tuple[Path, TritonTraceFileSource]:
    path = tmp_path / "trace.json"
    source = TritonTraceFileSource(path)
    assert source.scrape(1.0) == []  # the baseline
    return path, source


def test_a_file_written_in_chunks_ships_each_record_once_when_its_array_closes(tmp_path: Path) -> None:
    path, source = started(tmp_path)
    text = array(entries(1, 5))
    target = tmp_path / "trace.json.0"
    chunks = [text[:1], text[1:37], text[37:400], text[400:-1], text[-1:]]
    shipped: list[Any] = []
    for n, chunk in enumerate(chunks):
        with target.open("a") as handle:
            handle.write(chunk)
        got = source.scrape(10.0 + n)
        if n < len(chunks) - 1:
            assert got == [], f"chunk {n}: a file still being written ships nothing"
        shipped.extend(got)
    assert request_ids(shipped) == [f"r-{i}" for i in range(1, 6)]
    assert source.scrape(20.0) == [] and source.scrape(21.0) == []  # never twice
    point = shipped[0]
    assert point.measurement == TRACE_MEASUREMENT and point.tags == {"model": "m", "trace_file": str(path)}
    assert point.fields["trace_id"] == 1 and point.fields["REQUEST_START"] == 1_000_000
    assert len({p.time_ns for p in shipped}) == 5  # one point each, none overwrites another


def test_a_half_written_last_record_is_kept_for_the_next_read_not_parsed(tmp_path: Path) -> None:
    _, source = started(tmp_path)
    target = tmp_path / "trace.json.0"
    text = array([*entries(1, 2), {"id": 3, "model_name": "m", "request_id": "r-é"}])
    cut = text.index('"r-é"') + 3  # inside the last entry, between the two bytes of "é"
    data = text.encode()
    cut_bytes = len(text[:cut].encode()) + 1
    target.write_bytes(data[:cut_bytes])
    assert source.scrape(2.0) == []
    with target.open("ab") as handle:
        handle.write(data[cut_bytes:])
    got = source.scrape(3.0)
    assert request_ids(got) == ["r-1", "r-2", "r-é"]
    assert got[2].fields == {"trace_id": 3, "request_id": "r-é"}  # no timestamps: the record as Triton wrote it


def test_rotation_to_new_files_and_a_rewrite_after_a_restart(tmp_path: Path) -> None:
    (tmp_path / "trace.json.0").write_text(array(entries(1, 3)))  # an earlier run's
    (tmp_path / "trace.json.bak").write_text(array(entries(90, 1)))  # not Triton's
    path, source = started(tmp_path)
    assert trace_file_names(path) == [tmp_path / "trace.json.0"]
    (tmp_path / "trace.json.1").write_text(array(entries(4, 2)))
    (tmp_path / "trace.json.2").write_text(array(entries(6, 1))[:-1])  # still being written
    assert request_ids(source.scrape(2.0)) == ["r-4", "r-5"]
    (tmp_path / "trace.json.2").write_text(array(entries(6, 1)))
    (tmp_path / "trace.json.10").write_text(array(entries(7, 1)))
    assert request_ids(source.scrape(3.0)) == ["r-6", "r-7"]
    # Triton restarted: it writes trace.json.0 again, with ids from 1 again
    old = tmp_path / "trace.json.0"
    old.unlink()
    old.write_text(array(entries(1, 1, model="other")))
    os.utime(old, ns=(old.stat().st_atime_ns, old.stat().st_mtime_ns + 1_000_000_000))
    again = source.scrape(4.0)
    assert request_ids(again) == ["r-1"] and again[0].tags["model"] == "other"
    assert source.scrape(5.0) == []


def test_trailing_bytes_after_a_closed_array_do_not_ship_it_again(tmp_path: Path) -> None:
    _, source = started(tmp_path)
    target = tmp_path / "trace.json.0"
    target.write_text(array(entries(1, 2)))
    assert len(source.scrape(2.0)) == 2
    with target.open("a") as handle:
        handle.write("\n")
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 1_000_000_000))
    assert source.scrape(3.0) == []


def test_a_point_read_back_is_the_record_the_file_join_reads(tmp_path: Path) -> None:
    _, source = started(tmp_path)
    text = array(entries(1, 3))
    (tmp_path / "trace.json.0").write_text(text)
    points = source.scrape(2.0)
    rows = [{"time": p.time_ns, "run_id": "r", **p.tags, **p.fields} for p in points]
    rows[0]["QUEUE_START"] = None  # a column another point has and this one lacks
    from_file = parse_traces(json_entries(text))
    back = [trace_from_row(row) for row in rows]
    assert back[1:] == from_file[1:]
    assert back[0].timestamps == {k: v for k, v in from_file[0].timestamps.items() if k != "QUEUE_START"}


def test_a_file_written_after_the_source_was_made_but_before_its_first_scrape_is_shipped(tmp_path: Path) -> None:
    (tmp_path / "trace.json.0").write_text(array(entries(1, 1)))  # before: an earlier run's
    old = tmp_path / "trace.json.0"
    os.utime(old, ns=(old.stat().st_atime_ns, old.stat().st_mtime_ns - 1_000_000_000))
    source = TritonTraceFileSource(tmp_path / "trace.json")
    (tmp_path / "trace.json.1").write_text(array(entries(2, 1)))  # after: this run's
    assert source.scrape(1.0) == []
    assert request_ids(source.scrape(2.0)) == ["r-2"]
