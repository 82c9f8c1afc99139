"""summary.json through its one writer and one reader: same bytes on a round trip, the keys and
value types of what runs wrote before the model, and errors that name the file and the key path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferload.results.files import ResultsError, read_summary, summary_json, write_summary
from inferload.results.schema import RunSummary

#: an open-loop run's summary.json as inferload wrote it before the typed model (json.dumps, indent 2)
OPEN_LOOP_RUN = {
    "run_id": "poisson-20261130T133512Z",
    "scenario": "poisson",
    "started_at": "2026-11-30T13:35:12.274681+00:00",
    "duration_s": 32.065,
    "warmup_s": 2.0,
    "steady_s": 30.065,
    "workers": 1,
    "targets": {
        "triton": {
            "server": "triton",
            "protocol": "grpc",
            "kind": "triton-grpc",
            "model": "tiny",
            "requests": 7641,
            "failures": 0,
            "error_rate": 0.0,
            "throughput_rps": 254.148532405696,
            "latency_ms": {
                "mean": 3.097794876877448,
                "p50": 3.067,
                "p90": 3.799,
                "p95": 4.035,
                "p99": 4.691,
                "p999": 5.671,
                "max": 8.58,
            },
            "server_side": {
                "queue_ms_avg": 1.087868,
                "compute_ms_avg": 0.569014,
                "request_ms_avg": 1.660029,
                "avg_batch_size": 1.275626,
                "batch_size_histogram": {"1": 4622, "2": 1126, "3": 206},
            },
            "cold_start_s": None,
            "residual_ms": 1.437765876877448,
            "open_loop": {
                "configured_rps": 250.0,
                "arrivals": 7640,
                "unsent": 0,
                "achieved_rps": 254.66666666666666,
                "achieved_ratio": 1.0186666666666666,
                "send_lag_ms": {"p50": 0.647, "p99": 1.329, "max": 2.6421546936035156},
            },
        },
        "torchserve": {
            "server": "torchserve",
            "protocol": "http",
            "kind": "torchserve-rest",
            "model": "tiny",
            "requests": 120,
            "failures": 120,
            "error_rate": 1.0,
            "throughput_rps": 0.0,
            "latency_ms": {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "p999": None, "max": None},
            "server_side": None,
            "cold_start_s": 4.2,
            "residual_ms": None,
        },
    },
    "slo": {
        "passed": False,
        "checks": [
            {"target": "torchserve", "metric": "p99_ms", "limit": 50.0, "value": None, "passed": False},
            {"target": "triton", "metric": "max_unsent", "limit": 0.0, "value": 0, "passed": True},
        ],
    },
    "workers_lost": ["worker-b"],
    "streaming": {"points_written": 9, "points_dropped": 6, "points_pending": 0, "write_errors": 4, "last_error": "refused"},
}

#: the demo's combined summary adds its settings and phases (before "targets", as it always did)
DEMO_EXTRAS = {
    "model": "tiny",
    "users": 4,
    "cold_start_s": {"triton": 4.952, "torchserve": 4.208},
    "phases": {"triton": "demo0-triton"},
}


def written_before(data: dict[str, Any]) -> str:
    """What the writers wrote before the model: json.dumps of a dict, indent 2, a newline."""
    return json.dumps(data, indent=2) + "\n"


def summary_file(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "summary.json"
    path.write_text(text)
    return path


def test_written_read_and_written_again_is_the_same_bytes(tmp_path: Path) -> None:
    first = write_summary(tmp_path / "a", RunSummary.model_validate(OPEN_LOOP_RUN))
    second = write_summary(tmp_path / "b", read_summary(first))
    assert first.read_bytes() == second.read_bytes()
    assert summary_json(read_summary(second)) == second.read_text()


def test_a_summary_written_before_the_model_keeps_its_keys_order_and_value_types(tmp_path: Path) -> None:
    before = written_before(OPEN_LOOP_RUN)
    after = summary_json(read_summary(summary_file(tmp_path, before)))
    # the same text, plus the new key at the end
    assert after == written_before({**OPEN_LOOP_RUN, "interrupted": False})
    assert '"requests": 7641,' in after and '"configured_rps": 250.0,' in after and '"value": 0,' in after


def test_the_demo_summary_keeps_its_extra_keys_in_place(tmp_path: Path) -> None:
    top = list(OPEN_LOOP_RUN.items())
    demo = {**dict(top[:7]), **DEMO_EXTRAS, **dict(top[7:])}
    after = summary_json(read_summary(summary_file(tmp_path, written_before(demo))))
    assert after == written_before({**demo, "interrupted": False})


def test_nulls_that_runs_write_stay_and_keys_that_only_some_runs_have_stay_out() -> None:
    data = json.loads(summary_json(RunSummary.model_validate(OPEN_LOOP_RUN)))
    dead = data["targets"]["torchserve"]
    assert dead["server_side"] is None and dead["residual_ms"] is None and dead["latency_ms"]["p99"] is None
    assert "open_loop" not in dead and "open_loop" in data["targets"]["triton"]
    closed_loop = {k: v for k, v in OPEN_LOOP_RUN.items() if k not in ("workers_lost", "streaming")}
    data = json.loads(summary_json(RunSummary.model_validate(closed_loop)))
    assert set(data) == {
        "run_id",
        "scenario",
        "started_at",
        "duration_s",
        "warmup_s",
        "steady_s",
        "workers",
        "targets",
        "slo",
        "interrupted",
    }
    assert data["interrupted"] is False


def test_older_summaries_and_unknown_keys_are_read(tmp_path: Path) -> None:
    old = json.loads(json.dumps(OPEN_LOOP_RUN))
    del old["steady_s"]
    for target in old["targets"].values():
        del target["kind"], target["residual_ms"]
        target["added_later"] = {"anything": 1}
    summary = read_summary(summary_file(tmp_path, json.dumps(old)))
    assert summary.steady_s is None and summary.targets["triton"].kind is None
    assert summary.targets["triton"].latency_ms.p99 == 4.691


REMOVE = object()


def broken(**changes: Any) -> dict[str, Any]:
    """OPEN_LOOP_RUN with a value set at each key path (parts joined by '__'), or removed (REMOVE)."""
    data = json.loads(json.dumps(OPEN_LOOP_RUN))
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        holder = data
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        if value is REMOVE:
            del holder[key]
        else:
            holder[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (broken(targets__triton__server=REMOVE), "targets.triton.server: missing; expected a string"),
        (broken(slo=REMOVE), "slo: missing; expected an object"),
        (
            broken(targets__triton__latency_ms__p99="slow"),
            "targets.triton.latency_ms.p99: expected a number or null; got str 'slow'",
        ),
        (broken(targets__triton__requests=True), "targets.triton.requests: expected a number or null; got bool True"),
        (broken(targets__triton__failures=1.5), "targets.triton.failures: expected a whole number; got float 1.5"),
        (broken(workers="3"), "workers: expected a number; got str '3'"),
        (broken(slo__checks__1__passed=1), "slo.checks[1].passed: expected true or false; got int 1"),
        (broken(workers_lost="w1"), "workers_lost: expected a list of strings or null; got str 'w1'"),
        (broken(targets__torchserve__server_side=[]), "targets.torchserve.server_side: expected an object or null; got list"),
        # a wrong value is named before a missing key, wherever each is
        (
            broken(run_id=REMOVE, targets__triton__open_loop__unsent="none"),
            "targets.triton.open_loop.unsent: expected a number; got str 'none'",
        ),
    ],
)
def test_a_bad_summary_is_an_error_naming_the_file_and_the_key_path(tmp_path: Path, data: dict[str, Any], expected: str) -> None:
    path = summary_file(tmp_path, json.dumps(data))
    with pytest.raises(ResultsError) as caught:
        read_summary(tmp_path)
    assert str(caught.value) == f"{path}: {expected}"
