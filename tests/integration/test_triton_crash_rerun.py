"""The tests that trace Triton run again on a new Triton when the one before crashed, up to
CRASH_ATTEMPTS Tritons (`tests.support.example_triton.on_triton_surviving_its_crash`), and only
then: a real SIGSEGV sent to a real Triton makes it write the crash line that Triton 2.51's own
crash with tracing on writes; a Triton killed without a word (SIGKILL) crashed too: it ended before
the test stopped it, and the test says which signal ended it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.example_triton import CRASH_ATTEMPTS, CRASH_LINE, ExampleTriton, on_triton_surviving_its_crash
from tests.support.waiting import wait_until

MODELS = {"tail_queue": "tail_queue"}


def _crash(server: ExampleTriton, sig: signal.Signals = signal.SIGSEGV) -> None:
    port = server.http.rsplit(":", 1)[1]
    [triton] = [
        p
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "tritonserver" and f"--http-port={port}" in (p.info["cmdline"] or [])
    ]
    os.kill(triton.pid, sig)
    if sig == signal.SIGSEGV:
        wait_until(lambda: CRASH_LINE.search(server.log.read_text(errors="replace")), 30, "Triton's crash line in its log")
    wait_until(lambda: _exited(triton), 60, "the crashed Triton gone")


def _exited(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # ended, not yet reaped by its parent
    except psutil.NoSuchProcess:
        return True


def test_a_test_whose_triton_crashed_runs_once_more_on_a_new_one(tmp_path: Path) -> None:
    servers: list[str] = []

    def body(server: ExampleTriton, folder: Path) -> str:
        servers.append(server.http)
        if len(servers) == 1:
            _crash(server)  # then the request below is refused: not an assertion, and still a crash
        assert server.ready("tail_queue")
        return folder.name

    assert on_triton_surviving_its_crash(tmp_path, MODELS, lambda folder: [], body) == "attempt-2"
    assert len(servers) == 2 and servers[0] != servers[1]


def test_a_triton_that_ended_without_a_word_crashed_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    servers: list[str] = []

    def body(server: ExampleTriton, folder: Path) -> str:
        servers.append(server.http)
        if len(servers) == 1:
            _crash(server, signal.SIGKILL)  # no handler runs: the log says nothing
            assert not CRASH_LINE.search(server.log.read_text(errors="replace"))
        assert server.ready("tail_queue")
        return folder.name

    assert on_triton_surviving_its_crash(tmp_path, MODELS, lambda folder: [], body) == "attempt-2"
    assert len(servers) == 2
    assert "Triton crashed, ended by SIGKILL" in capsys.readouterr().out


def test_any_other_failure_fails_at_once(tmp_path: Path) -> None:
    attempts: list[str] = []

    def body(server: ExampleTriton, folder: Path) -> None:
        attempts.append(folder.name)
        assert server.crashed() is False
        raise AssertionError("a wrong figure")

    with pytest.raises(AssertionError, match="a wrong figure"):
        on_triton_surviving_its_crash(tmp_path, MODELS, lambda folder: [], body)
    assert attempts == ["attempt-1"]


def test_the_last_triton_s_crash_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def body(server: ExampleTriton, folder: Path) -> None:
        _crash(server)
        raise AssertionError(f"Triton crashed in {folder.name}")

    with pytest.raises(AssertionError, match=f"attempt-{CRASH_ATTEMPTS}"):
        on_triton_surviving_its_crash(tmp_path, MODELS, lambda folder: [], body)
    said = capsys.readouterr().out
    assert said.count("Triton crashed, ended by SIGSEGV") == CRASH_ATTEMPTS and said.endswith("no Triton left to try\n")
