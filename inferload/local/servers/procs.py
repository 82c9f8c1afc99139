"""Process bookkeeping for the local servers: start detached, check, stop a whole group.

Servers are started in their own session (process group = the server's pid), so the group
holds everything the server spawned (Triton's Python stubs, TorchServe's java and workers).
A pid is only trusted together with its kernel start time, so a recycled pid is never killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    """A started server process as recorded in state.json."""

    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: survives no pid reuse
    started_at: float  # time.time() just before the spawn
    log: str
    command: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "started_at": self.started_at,
            "log": self.log,
            "command": list(self.command),
        }

    @classmethod
    def from_dict(cls, data: dict) -> ProcessRecord:
        return cls(
            int(data["pid"]),
            int(data["start_ticks"]),
            float(data["started_at"]),
            str(data["log"]),
            tuple(data.get("command", ())),
        )


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: field N of proc(5) at index N - 3 (the state is
    index 0, the start time 19, a zombie's wait status 49); None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name is in parentheses and may contain spaces: split after the last ')'
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """True when pid runs (not a zombie) and, if given, started at ``ticks``."""
    _reap(pid)
    fields = stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return ticks is None or int(fields[19]) == ticks


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def spawn(command: list[str], log_path: Path, env: dict[str, str], cwd: Path) -> ProcessRecord:
    """Start ``command`` in a new session, stdout+stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started_at = time.time()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(cwd),
            start_new_session=True,
        )
    ticks = start_ticks(proc.pid) or 0
    # the Popen object is dropped on purpose: is_alive() reaps the child once it exits
    proc.returncode = 0  # keeps Popen.__del__ from warning about a running child
    return ProcessRecord(proc.pid, ticks, started_at, str(log_path), tuple(command))


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _own_members(record: ProcessRecord) -> list[int]:
    """Members of the record's group started no earlier than the record (no recycled pids).

    Empty when the recorded pid now runs another process: the kernel gives out no pid still used as
    a group id, so that group, with every member, is the other process's (a stale record must not
    kill a server started since on the recycled pid)."""
    leader_ticks = start_ticks(record.pid)
    if leader_ticks is not None and leader_ticks != record.start_ticks:
        return []
    return [p for p in group_members(record.pid) if (start_ticks(p) or 0) >= record.start_ticks]


def stop_group(
    record: ProcessRecord, term_timeout_s: float, kill_timeout_s: float = 5.0, *, leader_stops_the_rest: bool = False
) -> list[int]:
    """SIGTERM the group of a recorded process, then SIGKILL what is left.

    With `leader_stops_the_rest`, SIGTERM goes to the recorded process alone, which stops the rest
    of its group itself (Triton unloads its models through their stubs: a stub sent SIGTERM as well
    ends before Triton can unload its model). Returns the pids that had to be killed (empty when
    SIGTERM sufficed). Does nothing when the recorded process no longer runs and nothing it started
    is left.
    """
    if is_alive(record.pid, record.start_ticks):
        if leader_stops_the_rest:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
        else:
            signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + term_timeout_s
    while _own_members(record) and time.monotonic() < deadline:
        _reap(record.pid)
        time.sleep(0.1)
    leftovers = _own_members(record)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + kill_timeout_s
    while _own_members(record) and time.monotonic() < deadline:
        _reap(record.pid)
        time.sleep(0.1)
    _reap(record.pid)
    return leftovers


def log_tail(path: str | Path, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:])


def processes_mentioning(text: str) -> list[int]:
    """Live pids (not this one) whose command line, working folder or open files name ``text`` (e.g. a
    state or results folder): the leftovers check. A run forked from a warm Locust has the fork
    server's command line; its working folder and its log are where it runs."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if _names(entry, text) and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _names(process: Path, text: str) -> bool:
    """Whether the process at ``process`` (/proc/<pid>) names ``text`` in its command line, its working
    folder or the paths of its open files (False for one that ended or that this user may not read)."""
    try:
        if text in (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
            return True
        if text in os.readlink(process / "cwd"):
            return True
        for fd in (process / "fd").iterdir():
            with contextlib.suppress(FileNotFoundError):  # closed since the folder was listed
                if text in os.readlink(fd):
                    return True
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return False
