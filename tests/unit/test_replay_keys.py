"""The gamma and replay shapes' keys, validated like every key: ``file: key.path: message``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.schema import targets_given_batches
from inferload.scenario.shapes import GammaShape, ReplayShape
from tests.support.scenario_factory import bare_target, key_problems, write_scenario


def scenario_data(shape: dict[str, Any], *targets: dict[str, Any]) -> dict[str, Any]:
    chosen = list(targets) or [bare_target("a", "triton-grpc", "127.0.0.1:8001")]
    return {"name": "k", "duration": "10s", "targets": chosen, "shape": shape}


def replay(folder: Path, text: str, name: str = "trace.csv", **keys: Any) -> dict[str, Any]:
    (folder / name).write_text(text)
    return {"kind": "replay", "file": name, **keys}


def test_gamma_takes_a_rate_and_a_cv(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path, scenario_data({"kind": "gamma", "rate": 100, "cv": 3})))
    assert isinstance(scenario.shape, GammaShape) and scenario.shape.cv == 3.0
    assert key_problems(tmp_path, scenario_data({"kind": "gamma", "rate": 100})) == [("shape.cv", "required key is missing")]
    assert key_problems(tmp_path, scenario_data({"kind": "gamma", "rate": 100, "cv": 0})) == [
        ("shape.cv", "must be greater than 0; got 0")
    ]
    assert key_problems(tmp_path, scenario_data({"kind": "gamma", "rate": 100, "cv": 11})) == [
        ("shape.cv", "must be at most 10; got 11")
    ]


def test_a_replay_file_is_made_absolute_and_round_trips(tmp_path: Path) -> None:
    data = scenario_data(replay(tmp_path, "t_s\n0\n0.5\n1\n", speed=2, start="0.5s", loop=True))
    scenario = load_scenario(write_scenario(tmp_path, data))
    shape = scenario.shape
    assert isinstance(shape, ReplayShape)
    assert shape.file == str((tmp_path / "trace.csv").resolve()) and shape.time_scale == 0.5 and shape.loop
    again = scenario_from_dict(scenario_to_dict(scenario), source_path=Path("/elsewhere/s.yaml"))
    assert again.shape == shape  # an absolute path stays absolute (workers read the same file)


@pytest.mark.parametrize(
    ("keys", "text", "expected"),
    [
        ({"speed": 2, "rate": 5}, "t_s\n0\n1\n", [("shape.rate", "give speed (a time scale) or rate (a mean rate), not both")]),
        ({"speed": 0}, "t_s\n0\n1\n", [("shape.speed", "must be greater than 0; got 0")]),
        ({"loop": "yes"}, "t_s\n0\n1\n", [("shape.loop", "expected a valid boolean; got 'yes'")]),
        ({"start": -1}, "t_s\n0\n1\n", [("shape.start", "must not be negative; got -1s")]),
        (
            {"start": "5s"},
            "t_s\n0\n1\n",
            [("shape.start", "must not be after the trace's last arrival; the trace's arrivals lie from 0s to 1s; got 5s")],
        ),
        (
            {"start": "0.2s", "duration": "0.5s"},
            "t_s\n0\n1\n",
            [("shape.duration", "the window from 200ms to 700ms holds no arrival; the trace's arrivals lie from 0s to 1s")],
        ),
        (
            {"rate": 10},
            "t_s\n0.5\n",
            [("shape.rate", "needs a window of at least two arrivals, or shape.duration (the window's length)")],
        ),
        (
            {"speed": 1000000},
            "t_s\n0\n0.001\n",
            [("shape.speed", "plays the window's 1,000.0 req/s at 1,000,000,000 req/s; at most 1,000,000 are allowed")],
        ),
        (
            {},
            "t_s\n0\n0.5\n0.4\n",
            [
                (
                    "shape.file",
                    "trace.csv line 4: t_s goes back in time (0.4s after the start; line 3 was at 0.5s); expected the rows in time order",
                )
            ],
        ),
        ({}, "t_s\n-0.5\n", [("shape.file", "trace.csv line 2: t_s: expected seconds >= 0; got -0.5")]),
        (
            {},
            "t_s,target\n0,a\n0.1,b\n0.2,c\n",
            [
                (
                    "shape.file",
                    "trace.csv: names targets the scenario does not have: 'b' (line 3), 'c' (line 4); its targets are a",
                )
            ],
        ),
        (
            {},
            "t_s,sample\n0,1\n",
            [
                (
                    "shape.file",
                    "trace.csv line 2: sample 1: target 'a' has no data set (a sample column needs inputs fed by data: {dataset: ...}, or a generative target's"
                    " generation.lengths or generation.dataset)",
                )
            ],
        ),
    ],
)
def test_every_replay_problem_is_one_line_at_its_key(
    tmp_path: Path, keys: dict[str, Any], text: str, expected: list[tuple[str, str]]
) -> None:
    assert key_problems(tmp_path, scenario_data(replay(tmp_path, text, **keys))) == expected


def test_a_missing_or_misnamed_replay_file(tmp_path: Path) -> None:
    missing = str((tmp_path / "gone.csv").resolve())
    assert key_problems(tmp_path, scenario_data({"kind": "replay", "file": "gone.csv"})) == [
        ("shape.file", f"replay file not found: {missing!r}")
    ]
    assert key_problems(tmp_path, scenario_data({"kind": "replay", "file": "trace.txt"})) == [
        ("shape.file", "expected a replay file named *.csv, *.jsonl or *.ndjson; got 'trace.txt'")
    ]


def test_a_sample_out_of_range_names_the_data_set_size(tmp_path: Path) -> None:
    np.save(tmp_path / "rows.npy", np.zeros((5, 4), dtype=np.float32))
    target = bare_target("a", "triton-grpc", "127.0.0.1:8001")
    target["inputs"][0]["data"] = {"dataset": "rows.npy"}
    other = bare_target("b", "triton-grpc", "127.0.0.1:8001")
    shape = replay(tmp_path, "t_s,target,sample\n0,a,4\n0.1,a,5\n0.2,,1\n")
    assert key_problems(tmp_path, scenario_data(shape, target, other)) == [
        ("shape.file", "trace.csv line 3: sample 5 is out of range: target 'a''s data set has 5 samples (0 to 4)"),
        # a row without a target may go to either target: b has no data set
        (
            "shape.file",
            "trace.csv line 4: sample 1: target 'b' has no data set (a sample column needs inputs fed by data: {dataset: ...}, or a generative target's"
            " generation.lengths or generation.dataset)",
        ),
    ]
    fine = replay(tmp_path, "t_s,target,sample\n0,a,4\n0.1,b,\n")
    assert isinstance(load_scenario(write_scenario(tmp_path, scenario_data(fine, target, other))).shape, ReplayShape)


def test_a_batch_over_the_request_bound(tmp_path: Path) -> None:
    target = bare_target("a", "triton-grpc", "127.0.0.1:8001", shape=(1024, 1024))  # 4 MiB per item
    shape = replay(tmp_path, "t_s,batch\n0,2\n0.1,17\n")
    [(key, message)] = key_problems(tmp_path, scenario_data(shape, target))
    assert key == "shape.file" and message.startswith("trace.csv line 3: batch 17 makes target 'a''s requests 71,303,168 bytes")


def test_the_targets_a_replay_gives_batches_of_their_own_are_known_before_the_run(tmp_path: Path) -> None:
    """Rows naming a target give it their batches; rows without one give every target theirs; a
    batch equal to the target's own batch_size is no batch of its own."""
    a, b = bare_target("a", "triton-grpc", "127.0.0.1:8001"), bare_target("b", "triton-grpc", "127.0.0.1:8001")
    b["batch_size"] = 2

    files = iter(range(100))

    def given(text: str) -> list[str]:
        shape = replay(tmp_path, text, name=f"trace{next(files)}.csv")
        scenario = load_scenario(write_scenario(tmp_path, scenario_data(shape, a, b)))
        assert isinstance(scenario.shape, ReplayShape)
        return sorted(t.name for t in targets_given_batches(scenario.shape, scenario.targets))

    assert given("t_s,target\n0,a\n0.5,b\n") == []
    assert given("t_s,target,batch\n0,a,1\n0.5,b,2\n") == []
    assert given("t_s,target,batch\n0,a,1\n0.5,b,1\n") == ["b"]
    assert given("t_s,target,batch\n0,a,4\n0.5,b,2\n") == ["a"]
    assert given("t_s,batch\n0,2\n0.5,2\n") == ["a"]
    assert given("t_s,batch\n0,1\n0.5,2\n") == ["a", "b"]


def test_a_recorded_traces_sample_picks_a_generative_targets_request_of_its_lengths_file(tmp_path: Path) -> None:
    (tmp_path / "trace.lengths.jsonl").write_text('{"input_tokens": 8, "output_tokens": 4}\n{"output_tokens": 9}\n')
    chat = {
        "name": "chat",
        "kind": "openai-chat",
        "address": "127.0.0.1:8085",
        "model": "m",
        "generation": {"lengths": {"file": "trace.lengths.jsonl"}},
    }
    fine = replay(tmp_path, "t_s,sample\n0,1\n0.5,0\n")
    assert isinstance(load_scenario(write_scenario(tmp_path, scenario_data(fine, chat))).shape, ReplayShape)
    beyond = replay(tmp_path, "t_s,sample\n0,2\n")
    assert key_problems(tmp_path, scenario_data(beyond, chat)) == [
        (
            "shape.file",
            "trace.csv line 2: sample 2 is out of range: target 'chat''s data set has 2 samples (0 to 1)"
            " (is its generation.lengths.file the one trace-to-replay wrote?)",
        )
    ]
