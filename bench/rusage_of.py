"""Run one command and write its process tree's CPU and wall time as JSON (run by `bench.peers`).

    python -m bench.rusage_of OUT_JSON TIMEOUT_S COMMAND...

`os.wait4` gives the rusage of the command and of every descendant it waited for; this wrapper
exists so that the measuring process's own state cannot take the child from it (a gevent-patched
process reaps every child from its SIGCHLD watcher, and `wait4` then finds none). Its own CPU is
not counted; its start-up adds the same wall time to every run, which difference over difference
cancels. Output: ``{"exit_code", "cpu_s", "user_s", "sys_s", "wall_s", "timed_out"}``; the
command's stdout and stderr pass through.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m bench.rusage_of OUT_JSON TIMEOUT_S COMMAND...", file=sys.stderr)
        return 2
    out, timeout_s, command = Path(argv[0]), float(argv[1]), argv[2:]
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() - started > timeout_s:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            done, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.01)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    out.write_text(
        json.dumps(
            {
                "exit_code": code,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "user_s": usage.ru_utime,
                "sys_s": usage.ru_stime,
                "wall_s": wall,
                "timed_out": timed_out,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
