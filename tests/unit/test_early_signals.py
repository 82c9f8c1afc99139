"""A stop signal held while a process starts (`inferload.run.early_signals`) waits for the command's
own handlers, but not for ever: a process blocked in a system call meanwhile stops by itself once the
grace is over, with 128 + the signal and a line saying why; one that takes it in time goes on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from inferload.run.early_signals import HELD_GRACE_S

#: a process that holds the stop signals and then blocks reading a pipe nobody writes to
BLOCKED_WHILE_HELD = """
import os, sys
from inferload.run import early_signals
early_signals.hold()
read_end, _write_end = os.pipe()
print("blocked", flush=True)
os.read(read_end, 1)
print("the read returned", flush=True)
"""

#: a process that holds them, is signalled, and takes the signal well within the grace
TAKEN_IN_TIME = """
import os, signal, time
from inferload.run import early_signals
early_signals.hold()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.2)
print("taken", early_signals.take(), flush=True)
time.sleep(%s)
print("still running", flush=True)
"""


def test_a_process_blocked_in_a_system_call_stops_after_the_grace_with_the_signals_code() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_WHILE_HELD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "blocked"
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=HELD_GRACE_S + 30)
        took_s = time.monotonic() - signalled
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    assert "SIGTERM while starting" in err and "Traceback" not in err
    assert "the read returned" not in out
    assert took_s >= HELD_GRACE_S - 0.1  # the command's handlers had their chance first


def test_a_signal_taken_within_the_grace_leaves_the_process_to_its_command() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TAKEN_IN_TIME % (HELD_GRACE_S + 1)], capture_output=True, text=True, timeout=HELD_GRACE_S + 30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"taken [{int(signal.SIGTERM)}]", "still running"]
