"""Stopping a local server's process group: everything the server started goes, and a stale record
never stops a process that has since been given its pid."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from inferload.local.servers.procs import ProcessRecord, is_alive, processes_mentioning, spawn, start_ticks, stop_group
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


#: a leader that stops its child itself on SIGTERM (SIGUSR1, then waits for it), as Triton stops its
#: model stubs; the child writes down every signal that reached it
ORDERLY_LEADER = """
import signal, subprocess, sys, time
child_code = '''
import signal, sys, time
def note(number, frame):
    open(sys.argv[1], "a").write(signal.Signals(number).name + " "); sys.exit(0)
signal.signal(signal.SIGTERM, note); signal.signal(signal.SIGUSR1, note)
print("ready", flush=True); time.sleep(60)
'''
child = subprocess.Popen([sys.executable, "-c", child_code, sys.argv[1]], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
def stop(number, frame):
    child.send_signal(signal.SIGUSR1); child.wait(); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print(child.pid, flush=True); time.sleep(60)
"""


def test_a_leader_that_stops_its_group_itself_is_the_only_one_sent_sigterm(tmp_path: Path) -> None:
    log, seen = tmp_path / "leader.log", tmp_path / "child-got"
    record = spawn([sys.executable, "-c", ORDERLY_LEADER, str(seen)], log, {"PATH": "/usr/bin:/bin"}, tmp_path)
    wait_until(lambda: log.read_text().strip() != "", 30, "the leader's child started")
    child = int(log.read_text().split()[0])

    assert stop_group(record, term_timeout_s=10, leader_stops_the_rest=True) == []
    assert seen.read_text().split() == ["SIGUSR1"]  # from its leader, and no SIGTERM from the stop
    assert not is_alive(record.pid, record.start_ticks) and not is_alive(child)


# --- the leftovers check: a process that names a folder ----------------------------------------------


def test_a_process_names_a_folder_by_its_command_line_its_working_folder_or_a_file_it_holds_open(tmp_path: Path) -> None:
    """A run forked from a warm Locust has the fork server's command line: where it runs (its working
    folder) and what it writes (its log, open) name its folder."""
    by_cwd, by_file, elsewhere = tmp_path / "by-cwd", tmp_path / "by-file", tmp_path / "elsewhere"
    for folder in (by_cwd, by_file, elsewhere):
        folder.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    with (by_file / "run.log").open("w") as log:
        processes = [
            subprocess.Popen(sleeper, cwd=by_cwd),
            subprocess.Popen(sleeper, cwd=elsewhere.parent.parent, stdout=log),
            subprocess.Popen([*sleeper, str(elsewhere / "named")], cwd=elsewhere.parent.parent),
        ]
    try:
        assert processes_mentioning(str(by_cwd)) == [processes[0].pid]
        assert processes_mentioning(str(by_file)) == [processes[1].pid]
        assert processes_mentioning(str(elsewhere)) == [processes[2].pid]
        assert sorted(processes_mentioning(str(tmp_path))) == sorted(p.pid for p in processes)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert processes_mentioning(str(tmp_path)) == []
