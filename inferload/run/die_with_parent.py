"""Run a command that gets SIGTERM when the process that started it dies (Linux).

    python -I -S .../inferload/run/die_with_parent.py PARENT_PID COMMAND [ARG ...]

sets PR_SET_PDEATHSIG, checks that PARENT_PID is still its parent (it may have died before the
flag was set), then replaces itself with COMMAND (the flag survives `exec`).

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
USAGE = "usage: python die_with_parent.py PARENT_PID COMMAND [ARG ...]"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.stderr.write(f"{USAGE}\n")
        return 2
    parent, command = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            sys.stderr.write(f"inferload: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}\n")
        if os.getppid() != parent:  # the parent died before the flag was set: nobody waits for this run
            return 128 + int(signal.SIGTERM)
    try:
        os.execvp(command[0], command)
    except OSError as error:
        sys.stderr.write(f"inferload: cannot start {command[0]!r}: {error.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
