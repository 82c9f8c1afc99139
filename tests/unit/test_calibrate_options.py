"""`inferload calibrate`'s options, refused before anything starts (exit 2, one line naming the
option), and its stop signals: the case's run is stopped before the command exits."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from inferload.calibrate.command import stream_counts_of, usage_problem
from inferload.calibrate.runner import CalibrationStopped, run_watched
from inferload.cli import build_parser
from inferload.launch.child_processes import Child, ChildProcesses
from inferload.results.calibration import machine_user_key
from tests.support.cli import inferload

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def sleeper(children: ChildProcesses, log: Path) -> Callable[[], Child]:
    """How `run_case` starts a case's run, for a run that sleeps a minute."""

    def start() -> Child:
        with log.open("wb") as file:
            return children.start(SLEEPER, lead=True, log=file)

    return start


def options(*argv: str) -> argparse.Namespace:
    return build_parser(named=("calibrate",)).parse_args(["calibrate", *argv])


def test_an_out_that_is_a_file_or_under_proc_is_refused_naming_the_option(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    assert usage_problem(options(), file / "cal", {"INFERLOAD_HOME": str(tmp_path)}) == (
        f"--out: cannot write the certificate into {file / 'cal'}: {file} is a file, not a folder; "
        "expected a folder that can be written"
    )
    problem = usage_problem(options(), Path("/proc/inferload-calibration"), {"INFERLOAD_HOME": str(tmp_path)})
    assert problem is not None and problem.startswith("--out: cannot write the certificate into /proc/inferload-calibration: ")
    fresh = tmp_path / "new" / "out"
    assert usage_problem(options(), fresh, {"INFERLOAD_HOME": str(tmp_path)}) is None
    assert not (tmp_path / "new").exists()  # the folders made to check are removed again


@pytest.mark.parametrize("value", ["", "0", "1,x", "20000", "1,,2"])
def test_streams_that_are_not_counts_are_refused_naming_the_option(tmp_path: Path, value: str) -> None:
    assert usage_problem(options("--streams", value), tmp_path / "out", {"INFERLOAD_HOME": str(tmp_path)}) == (
        f"--streams: expected a comma list of stream counts from 1 to 10,000, or 'none'; got {value!r}"
    )


def test_streams_take_counts_or_none(tmp_path: Path) -> None:
    for value, counts in (("1,100", (1, 100)), ("none", ()), ("1000", (1000,))):
        assert usage_problem(options("--streams", value), tmp_path / "out", {"INFERLOAD_HOME": str(tmp_path)}) is None
        assert stream_counts_of(value) == counts


def test_a_home_that_is_a_file_is_refused_unless_no_certificate_is_installed(tmp_path: Path) -> None:
    file = tmp_path / "home-file"
    file.write_text("")
    latest = file / ".cache" / "inferload" / "calibration" / machine_user_key()
    assert usage_problem(options(), tmp_path / "out", {"HOME": str(file)}) == (
        f"HOME: cannot write the latest certificate into {latest}: {file} is a file, not a folder; "
        "expected a folder that can be written (or give --no-install)"
    )
    problem = usage_problem(options(), tmp_path / "out", {"INFERLOAD_HOME": str(file), "HOME": str(tmp_path)})
    assert problem is not None and problem.startswith(f"INFERLOAD_HOME: cannot write the latest certificate into {file}: ")
    assert usage_problem(options("--no-install"), tmp_path / "out", {"HOME": str(file)}) is None


def test_calibrate_with_a_bad_out_or_home_exits_2_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    done = inferload("calibrate", "--quick", "--out", str(file), timeout_s=60)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"inferload: --out: cannot write the certificate into {file}: {file} is a file, not a folder; "
        "expected a folder that can be written"
    ]
    monkeypatch.delenv("INFERLOAD_HOME", raising=False)
    monkeypatch.setenv("HOME", str(file))
    done = inferload("calibrate", "--quick", "--out", str(tmp_path / "out"), timeout_s=60)
    assert done.returncode == 2 and done.stdout == "" and not (tmp_path / "out").exists(), done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("inferload: HOME: cannot write the latest certificate into ") and "(or give --no-install)" in line


def test_a_stop_signal_stops_the_case_run_before_calibrate_goes_on(tmp_path: Path) -> None:
    """SIGTERM to calibrate's pid: the case's run gets it (its own session: only through calibrate),
    has exited when CalibrationStopped leaves the case, and the exit code is the shell's (143)."""
    began = time.monotonic()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))  # as `kill PID` would, mid-case
    with ChildProcesses() as children:
        timer.start()
        try:
            with pytest.raises(CalibrationStopped, match="SIGTERM: stopped") as stopped:
                run_watched(sleeper(children, tmp_path / "run.log"), tmp_path / "run.log", 60.0, "case", children)
        finally:
            timer.cancel()  # never a SIGTERM after the block, to pytest itself
        assert children.lead is not None and children.lead.poll() == -signal.SIGTERM
    assert stopped.value.exit_code == 143 and time.monotonic() - began < 10


def test_a_stop_signal_between_cases_starts_no_further_run(tmp_path: Path) -> None:
    with ChildProcesses() as children:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: taken by the block
        with pytest.raises(CalibrationStopped, match="SIGINT: stopped") as stopped:
            run_watched(sleeper(children, tmp_path / "run.log"), tmp_path / "run.log", 60.0, "case", children)
    assert children.lead is None and not (tmp_path / "run.log").exists() and stopped.value.exit_code == 130


def test_a_cases_cpu_is_read_between_samples_and_a_window_ending_just_after_the_last_takes_it():
    from inferload.calibrate.runner import CPU_END_SLACK_S, _cpu_at

    samples = [(100.0, 1.0), (100.2, 1.1), (100.4, 1.5)]
    assert _cpu_at(samples, 100.1) == pytest.approx(1.05)
    assert _cpu_at(samples, 100.4 + CPU_END_SLACK_S / 2) == 1.5  # the tree exited between two samples
    assert _cpu_at(samples, 100.4 + 2 * CPU_END_SLACK_S) is None  # long after: not measured
    assert _cpu_at(samples, 99.9) is None and _cpu_at(samples[:1], 100.0) is None
