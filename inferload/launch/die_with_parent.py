"""Run a command that gets SIGTERM when the process that started it dies (Linux).

    python -I -S .../inferload/launch/die_with_parent.py [--signal=NAME] PARENT_PID COMMAND [ARG ...]

sets PR_SET_PDEATHSIG (SIGTERM, or the signal NAME: HUP, TERM, ...), checks that PARENT_PID is still
its parent (it may have died before the flag was set), then replaces itself with COMMAND (the flag
survives `exec`).

The kernel sends the signal when the *thread* that started the child ends, and again each time
the child is handed to another thread of the dying parent: a parent with N threads killed at
once can send it N times (seen: a CLI with gRPC's threads, SIGKILLed, sent SIGTERM twice, and the
second SIGTERM made Locust exit at once without its results). The CLI's Locust processes are
therefore started with ``--signal=HUP``: they stop on the first SIGHUP as on SIGTERM and ignore the
repeats (`inferload.run.signals`), while SIGINT and SIGTERM keep their meaning.

Why a separate program and not `preexec_fn`: `preexec_fn` makes Python fork without `vfork`, and
a CLI that has already spoken gRPC (it reads the models' metadata before a distributed run) has
gRPC's threads and poller; their fork handlers then run in the child, which has aborted with
"epoll_wait error: Bad file descriptor" before it could exec. Starting this small program instead
keeps the fork clean. Imports only the standard library.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
USAGE = "usage: python die_with_parent.py [--signal=NAME] PARENT_PID COMMAND [ARG ...]"


def die_with(parent: int, death_signal: signal.Signals) -> bool:
    """Linux: this process gets `death_signal` when its parent dies; False when its parent is no longer
    `parent` (it died before the flag was set). Elsewhere a no-op (True)."""
    if not sys.platform.startswith("linux"):
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
        sys.stderr.write(f"inferload: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}\n")
    return os.getppid() == parent


def main(argv: list[str]) -> int:
    death_signal = signal.SIGTERM
    if argv and argv[0].startswith("--signal="):
        name = argv.pop(0).split("=", 1)[1].upper()
        try:
            death_signal = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        except KeyError:
            sys.stderr.write(f"{USAGE}\n")
            return 2
    if len(argv) < 2 or not argv[0].isdigit():
        sys.stderr.write(f"{USAGE}\n")
        return 2
    parent, command = int(argv[0]), argv[1:]
    if not die_with(parent, death_signal):  # the parent died before the flag was set: nobody waits for this run
        return 128 + int(death_signal)
    try:
        os.execvp(command[0], command)
    except OSError as error:
        sys.stderr.write(f"inferload: cannot start {command[0]!r}: {error.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
