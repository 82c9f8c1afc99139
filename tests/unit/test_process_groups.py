"""Stopping a local server's process group: everything the server started goes, and a stale record
never stops a process that has since been given its pid."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from inferload.local.servers.procs import ProcessRecord, is_alive, spawn, start_ticks, stop_group
from tests.support.waiting import wait_until

#: a leader that starts a child in its own group, says the child's pid, then waits
LEADER = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"


def _leader(tmp_path: Path) -> tuple[ProcessRecord, int]:
    log = tmp_path / "leader.log"
    record = spawn([sys.executable, "-c", LEADER], log, {"PATH": "/usr/bin:/bin"}, tmp_path)
    wait_until(lambda: log.read_text().strip() != "", 30, "the leader's child started")
    return record, int(log.read_text().split()[0])


def test_stopping_a_group_stops_the_leader_and_what_it_started(tmp_path: Path) -> None:
    record, child = _leader(tmp_path)
    assert is_alive(child)
    stop_group(record, term_timeout_s=10)
    assert not is_alive(record.pid, record.start_ticks) and not is_alive(child)


def test_a_record_whose_pid_now_runs_another_process_stops_nothing(tmp_path: Path) -> None:
    record, child = _leader(tmp_path)
    ticks = start_ticks(record.pid)
    assert ticks is not None and ticks > 0
    # the same pid, recorded for a process that started before this one: what a state file left
    # behind by a server long gone reads like once the kernel has recycled its pid
    stale = dataclasses.replace(record, start_ticks=ticks - 1)
    try:
        assert stop_group(stale, term_timeout_s=0.5, kill_timeout_s=0.5) == []
        assert is_alive(record.pid, record.start_ticks) and is_alive(child)
    finally:
        stop_group(record, term_timeout_s=10)
