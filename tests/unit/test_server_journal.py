"""The journal of server changes without a server: an entry is on disk (whole, never half) before a
change, the owner of an entry is told apart from a process that is gone (a real child process that
wrote one and exited), another running process's change is refused, a journal that cannot be
written refuses the change, leftovers are put back newest first, and `inferload restore` with
nothing to do says so. Putting back on the real servers: tests/integration/test_servers_left_as_found.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from inferload import paths
from inferload.errors import ServerChangeError
from inferload.paths import write_atomically
from inferload.run import server_changes
from inferload.run.server_changes import JournalEntry, ServerJournal, journal_dir, same_host
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

ORIGINAL = {"max_batch_size": 32, "dynamic_batching": {"max_queue_delay_microseconds": 1000}}


def record_in_child(folder: Path, server: str = "http://127.0.0.1:8000") -> None:
    """A real process that records a change and exits without putting it back (as a killed tune would)."""
    code = (
        "import sys; from pathlib import Path; from inferload.run.server_changes import ServerJournal; "
        f"ServerJournal(Path(sys.argv[1])).record('triton-model-config', {server!r}, 'cnn', {ORIGINAL!r})"
    )
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_folder_comes_from_the_variable_else_the_xdg_state_folder_else_home():
    assert journal_dir({"INFERLOAD_JOURNAL_DIR": "/j", "HOME": "/h"}) == Path("/j")
    assert journal_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s/inferload/server-changes")
    assert journal_dir({"HOME": "/h"}) == Path("/h/.local/state/inferload/server-changes")


def test_an_entry_is_on_disk_before_the_change_and_gone_once_forgotten(tmp_path: Path):
    journal = ServerJournal(tmp_path / "journal")
    entry = journal.record("triton-model-config", "http://127.0.0.1:8000/", "cnn", ORIGINAL, {"headers_from_env": {}})
    [path] = (tmp_path / "journal").glob("*.json")
    written = json.loads(path.read_text())
    assert written["original"] == ORIGINAL and written["server"] == "http://127.0.0.1:8000"
    assert written["owner"]["pid"] == os.getpid() and written["kind"] == "triton-model-config"
    assert journal.entries() == [entry]
    # this process's own entry is the one kept (the first original), not replaced by a later one
    again = journal.record("triton-model-config", "http://127.0.0.1:8000", "cnn", {"max_batch_size": 1})
    assert again.original == ORIGINAL
    assert journal.leftovers() == []  # its owner runs: nothing to put back
    journal.forget(entry)
    assert journal.entries() == []


def test_a_process_that_is_gone_leaves_a_leftover_and_blocks_a_new_change_until_restored(tmp_path: Path):
    record_in_child(tmp_path)
    journal = ServerJournal(tmp_path)
    [left] = journal.leftovers()
    assert left.owner.state() == "gone" and left.original == ORIGINAL
    with pytest.raises(ServerChangeError, match="is not restored yet: run `inferload restore`"):
        journal.record("triton-model-config", "http://127.0.0.1:8000", "cnn", {"max_batch_size": 1})


#: a parent that starts a child, prints its pid, kills it once told to and never collects its exit
#: (this test process cannot: gevent, which Locust's import set up, collects its own children at once)
NEGLECTFUL_PARENT = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
sys.stdin.readline()
child.send_signal(signal.SIGKILL)
print("killed", flush=True)
time.sleep(60)
"""


def test_an_owner_killed_and_not_yet_reaped_is_gone(tmp_path: Path):
    """A zombie (killed, its exit not collected: a container's PID 1 may never collect it) no longer
    runs: what it left is a leftover, not a change in use."""
    journal = ServerJournal(tmp_path)
    entry = journal.record("triton-model-config", "http://127.0.0.1:8000", "cnn", ORIGINAL)
    parent = subprocess.Popen([sys.executable, "-c", NEGLECTFUL_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdin is not None
        pid = int(parent.stdout.readline())
        owner = entry.owner.model_copy(update={"pid": pid, "started": psutil.Process(pid).create_time()})
        assert owner.state() == "running"
        parent.stdin.write("kill\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "killed"
        wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10, "the child a zombie")
        assert owner.state() == "gone"
    finally:
        parent.kill()
        parent.wait()


def test_a_change_by_another_running_process_is_refused(tmp_path: Path):
    journal = ServerJournal(tmp_path)
    entry = journal.record("torchserve-registration", "http://127.0.0.1:8081", "cnn", {"batchSize": 8})
    path = journal.path_of(entry.kind, entry.server, entry.model)
    parent = entry.owner.model_copy(update={"pid": os.getppid(), "started": psutil.Process(os.getppid()).create_time()})
    path.write_text(entry.model_copy(update={"owner": parent}).model_dump_json())
    with pytest.raises(ServerChangeError, match=f"being changed by another inferload.*pid {os.getppid()}"):
        journal.record("torchserve-registration", "http://127.0.0.1:8081", "cnn", {"batchSize": 1})
    assert journal.leftovers() == []  # a running owner's change is never put back under it


def test_a_journal_that_cannot_be_written_refuses_the_change(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    journal = ServerJournal(blocker / "journal")
    with pytest.raises(ServerChangeError, match=r"cannot write the journal of server changes .* is left as it is"):
        journal.record("triton-trace-settings", "127.0.0.1:8001", "cnn", {"trace_rate": "1000"})


def test_writing_never_leaves_half_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "entry.json"
    write_atomically(path, "old\n")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_atomically(path, "new\n" * 1000)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["entry.json"]  # no temporary file left


def test_leftovers_are_put_back_newest_first_and_kept_when_that_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    record_in_child(tmp_path, "http://127.0.0.1:8000")
    record_in_child(tmp_path, "http://127.0.0.1:9000")
    journal = ServerJournal(tmp_path)
    done: list[str] = []

    def put_back(entry: JournalEntry) -> str:
        if entry.server.endswith("9000"):
            done.append(entry.server)
            return "put back"
        raise ServerChangeError("connection refused")

    monkeypatch.setitem(server_changes.RESTORERS, "triton-model-config", put_back)
    lines: list[str] = []
    assert journal.restore_leftovers(None, lines.append) == 1
    assert done == ["http://127.0.0.1:9000"]  # the newest first
    assert any("restored model 'cnn': the model config on Triton at http://127.0.0.1:9000: put back" in line for line in lines)
    assert any("could not restore" in line and "connection refused" in line for line in lines)
    assert [entry.server for entry in journal.leftovers()] == ["http://127.0.0.1:8000"]  # kept for the next try


def test_a_run_finds_what_a_tune_left_on_its_host_whatever_the_port():
    assert same_host("http://127.0.0.1:8000", "127.0.0.1:8001")
    assert same_host("http://localhost:8081", "http://127.0.0.1:8080")
    assert not same_host("http://10.0.0.2:8000", "10.0.0.3:8000")


def test_restore_lists_and_puts_back_what_the_journal_holds(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "inferload.cli", "restore", "--journal", str(tmp_path)]
    empty = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert empty.returncode == 0 and "nothing to put back" in empty.stdout, empty.stderr
    record_in_child(tmp_path, "http://127.0.0.1:1")  # a server that is not there
    listed = subprocess.run([*command, "--list"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert listed.returncode == 0 and "left by" in listed.stdout and "to put back" in listed.stdout, listed
    failed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert failed.returncode == 1, failed
    assert "could not restore model 'cnn': the model config on Triton at http://127.0.0.1:1" in failed.stdout
    assert "Traceback" not in failed.stderr
    assert len(ServerJournal(tmp_path).leftovers()) == 1  # kept: it was not put back
