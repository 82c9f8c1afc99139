"""Bounded inputs: what `inferload validate` used to accept although it hangs or exhausts a run.

Each case is refused with one `file: key.path: message` line that says what is allowed
(docs/scenarios.md lists the same bounds); files that would block or never end are refused before
they are read, in a subprocess with a timeout as a user would run `inferload validate`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inferload.errors import ScenarioError
from inferload.scenario.limits import MAX_FILE_BYTES, MAX_PROBLEMS
from inferload.scenario.loader import load_scenario
from tests.support.system_tools import REPO

BASE = {
    "name": "bounds",
    "duration": "60s",
    "targets": [
        {
            "name": "t",
            "kind": "triton-grpc",
            "address": "127.0.0.1:8001",
            "model": "m",
            "inputs": [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}],
        }
    ],
    "shape": {"kind": "steady", "users": 8},
}

TWENTY_BIG_INPUTS = "[" + ", ".join(f"{{name: I{i}, shape: [16000000], dtype: FP32}}" for i in range(20)) + "]"


def write(tmp_path: Path, override: str) -> Path:
    """BASE with its top-level keys replaced by ``override`` (YAML text, written as a user would)."""
    replaced = yaml.safe_load(override)
    kept = {key: value for key, value in BASE.items() if key not in replaced}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(kept, sort_keys=False) + override + "\n")
    return path


def problems(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return [(p.key_path, p.message) for p in caught.value.problems]


def run_validate(path: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferload.cli", "validate", path], cwd=REPO, capture_output=True, text=True, timeout=timeout_s
    )


BOUNDS = [
    # users per shape, and how fast they are started
    pytest.param("shape: {kind: steady, users: 1000000000}", "shape.users", "must be at most 100000; got 1000000000", id="users"),
    pytest.param(
        "shape: {kind: ramp, from_users: 1, to_users: 200000, over: 10s}",
        "shape.to_users",
        "must be at most 100000",
        id="ramp-users",
    ),
    pytest.param(
        "shape: {kind: burst, base_users: 1, burst_users: 200000, burst_length: 1s, period: 10s}",
        "shape.burst_users",
        "must be at most 100000",
        id="burst-users",
    ),
    pytest.param(
        "shape: {kind: stages, stages: [{duration: 10s, users: 200000}]}",
        "shape.stages[0].users",
        "must be at most 100000",
        id="stage-users",
    ),
    pytest.param(
        "shape: {kind: steady, users: 10, spawn_rate: 1000000000}", "shape.spawn_rate", "must be at most 100000", id="spawn-rate"
    ),
    # request rates
    pytest.param("shape: {kind: poisson, rate: 10000000}", "shape.rate", "must be at most 1000000; got 10000000", id="rate"),
    pytest.param("shape: {kind: constant-rate, rate: 10000000}", "shape.rate", "must be at most 1000000", id="constant-rate"),
    pytest.param(
        "shape: {kind: ramping-rate, from_rate: 1, to_rate: 10000000, over: 10s}",
        "shape.to_rate",
        "must be at most 1000000",
        id="ramping-rate",
    ),
    pytest.param(
        "shape: {kind: rate-bursts, base_rate: 1, burst_rate: 10000000, burst_length: 1s, period: 10s}",
        "shape.burst_rate",
        "must be at most 1000000",
        id="burst-rate",
    ),
    # steps (a ramping-rate builds every step before the run starts)
    pytest.param(
        "shape: {kind: ramping-rate, from_rate: 1, to_rate: 10, over: 10s, steps: 1000000000}",
        "shape.steps",
        "must be at most 1000; got 1000000000",
        id="rate-steps",
    ),
    pytest.param(
        "shape: {kind: ramp, from_users: 1, to_users: 10, over: 10s, steps: 1000000000}",
        "shape.steps",
        "must be at most 1000",
        id="ramp-steps",
    ),
    pytest.param(
        "shape: {kind: rate-bursts, base_rate: 1, burst_rate: 10, burst_length: 1ms, period: 2ms}",
        "shape.period",
        "gives 30,000 bursts in a 1m run; at most 1,000 are allowed (a period of at least 60ms)",
        id="rate-bursts-count",
    ),
    # payload: the sum over inputs, not only each input
    pytest.param(
        f"targets: [{{name: t, kind: triton-grpc, address: '127.0.0.1:8001', model: m, inputs: {TWENTY_BIG_INPUTS}}}]",
        "targets[0].inputs",
        "the 20 inputs add up to 1,280,000,000 bytes per request (batch_size 1); at most 67,108,864 (64 MiB) are allowed in all",
        id="total-payload",
    ),
    # the shortest run and window
    pytest.param("duration: 1ms", "duration", "must be at least 1s; got 1ms", id="duration-1ms"),
    pytest.param("window: 0.000001", "window", "must be at least 100ms; got 1e-06s", id="window-1us"),
    pytest.param(
        "duration: 2s\nwindow: 3s", "window", "must not be longer than duration (2s); got 3s", id="window-over-duration"
    ),
    # YAML 1.1 reads 1e10 as text
    pytest.param(
        "shape: {kind: poisson, rate: 1e10}",
        "shape.rate",
        "a number written as 1e10 needs a decimal point and a signed exponent in YAML (1.0e+10)",
        id="1e10-rate",
    ),
    pytest.param(
        "shape: {kind: steady, users: 1e3}",
        "shape.users",
        "expected an integer; YAML reads 1e3 as text: write it out (1000)",
        id="1e3-users",
    ),
    pytest.param(
        "duration: 1.5e3", "duration", "needs a decimal point and a signed exponent in YAML (1.5e+3)", id="1.5e3-duration"
    ),
]


@pytest.mark.parametrize(("override", "key_path", "message"), BOUNDS)
def test_an_input_that_would_hang_or_exhaust_the_run_is_refused(
    tmp_path: Path, override: str, key_path: str, message: str
) -> None:
    found = problems(write(tmp_path, override))
    assert [(where, message in text) for where, text in found] == [(key_path, True)], found


@pytest.mark.parametrize(
    "override",
    [
        "shape: {kind: poisson, rate: 1.0e+6}",
        "shape: {kind: steady, users: 100000, spawn_rate: 100000}",
        "shape: {kind: ramping-rate, from_rate: 0, to_rate: 1000000, over: 60s, steps: 1000}",
        "shape: {kind: rate-bursts, base_rate: 1, burst_rate: 10, burst_length: 30ms, period: 60ms}",
        "duration: 1s\nwindow: 100ms",
    ],
    ids=["rate-1.0e+6", "most-users", "most-steps", "most-bursts", "shortest-run"],
)
def test_inputs_at_the_bounds_are_accepted(tmp_path: Path, override: str) -> None:
    load_scenario(write(tmp_path, override))


# --- files that are not scenario files ----------------------------------------------------------


def test_validate_refuses_dev_zero_at_once() -> None:
    started = time.monotonic()
    done = run_validate("/dev/zero")
    assert done.returncode == 2, done
    assert done.stderr.strip() == "/dev/zero: is a character device; expected a regular scenario YAML file"
    assert time.monotonic() - started < 15


def test_validate_refuses_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    done = run_validate(str(fifo))
    assert done.returncode == 2, done
    assert done.stderr.strip() == f"{fifo}: is a named pipe (FIFO); expected a regular scenario YAML file"


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    assert problems(path) == [("", "the file is larger than 1 MiB; a scenario file is a few kilobytes of YAML")]


def test_an_alias_bomb_is_refused_before_validation(tmp_path: Path) -> None:
    text = "name: bomb\nduration: 60s\nshape: {kind: steady, users: 1}\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
    previous = "a"
    for name in "bcdefgh":  # 10^8 values once every alias is expanded
        text += f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]\n"
        previous = name
    path = tmp_path / "scenario.yaml"
    path.write_text(text + f"targets: [*{previous}]\n")
    started = time.monotonic()
    found = problems(path)
    assert time.monotonic() - started < 10
    assert found == [
        ("", "the document holds more than 100,000 values (counting every use of an alias); a scenario needs far fewer")
    ]


def test_twenty_five_thousand_problems_take_seconds_and_print_a_hundred(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    # each target: its kind, an unknown key and four missing ones (name, address, model, inputs): 25,000 problems
    path.write_text(
        "name: many\nduration: 60s\nshape: {kind: steady, users: 1}\ntargets:\n" + "  - {kind: triton-grpc, zzz: 1}\n" * 5_000
    )
    started = time.monotonic()
    found = problems(path)
    elapsed = time.monotonic() - started
    assert len(found) == MAX_PROBLEMS + 1
    assert found[0] == ("targets[0].name", "required key is missing")
    assert found[-1] == ("", f"... and {25_000 - MAX_PROBLEMS:,} more problems")
    assert elapsed < 30, f"{elapsed:.1f} s"  # de-duplication was quadratic: minutes
