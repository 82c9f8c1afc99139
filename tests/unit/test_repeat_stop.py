"""`inferload run --repeat N` stopped by a signal between two repetitions (held while the next one
started: `inferload.run.early_signals`): the repetitions run are kept in repeat.json and the exit
code is the signal's. The repetitions themselves: tests/integration/test_repeat_gate.py."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path
from typing import Any

from inferload.errors import StoppedBeforeStart
from inferload.tune.tune_cli import cmd_run_repeated
from tests.support.scenario_factory import tiny_target, write_scenario


def test_a_signal_between_repetitions_keeps_the_ones_run_and_exits_130(tmp_path: Path) -> None:
    target = tiny_target("t", "triton-grpc", "127.0.0.1:8001")
    path = write_scenario(tmp_path, {"name": "s", "duration": "2s", "targets": [target], "shape": {"kind": "steady", "users": 1}})
    args = argparse.Namespace(repeat=3, headless=True, run_id="r", out=tmp_path / "out", scenario=str(path))
    ran: list[Path] = []

    def run_once(repetition: argparse.Namespace, _scenario: Any) -> int:
        if ran:
            raise StoppedBeforeStart(signal.SIGINT)
        repetition.out.mkdir(parents=True)
        ran.append(repetition.out)
        return 0

    assert cmd_run_repeated(args, "s", run_once) == 130
    document = json.loads((tmp_path / "out" / "repeat.json").read_text())
    assert document["repeats"] == ["repeat-01"] and ran == [tmp_path / "out" / "repeat-01"]
