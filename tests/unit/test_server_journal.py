"""The journal of server changes without a server: an entry is on disk (whole, never half) before a
change, the owner of an entry is told apart from a process that is gone (a real child process that
wrote one and exited), another running process's change is refused, a journal that cannot be
written refuses the change, leftovers are put back newest first, and `inferload restore` with
nothing to do says so. Putting back on the real servers: tests/integration/test_servers_left_as_found.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from inferload import paths
from inferload.errors import ServerChangeError
from inferload.paths import write_atomically
from inferload.run import server_changes
from inferload.run.server_changes import JournalEntry, ServerJournal, journal_dir, same_host
from inferload.scenario.limits import MAX_SMALL_FILE_BYTES
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


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)], ids=["umask 022", "umask 077"])
def test_a_file_written_whole_has_the_permissions_open_gives_it(tmp_path: Path, umask: int, mode: int) -> None:
    """0666 less the umask, as `open` makes a file: others may read a results folder (a CI's uploader)."""
    before = os.umask(umask)
    try:
        write_atomically(tmp_path / "summary.json", "{}\n")
    finally:
        os.umask(before)
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == mode


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


def gone_owner() -> dict[str, object]:
    """An owner on this host whose process has exited: what it left is a leftover."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return {"pid": int(child.stdout), "started": 0.0, "host": socket.gethostname(), "command": "inferload tune s.yaml"}


def write_leftover(folder: Path, name: str, **entry: object) -> Path:
    """A journal file `name` as a process that is gone left it, with `entry`'s keys (None: the key left out)."""
    raw: dict[str, object] = {
        "version": 1,
        "kind": "triton-model-config",
        "server": "http://127.0.0.1:1",
        "model": "cnn",
        "original": ORIGINAL,
        "access": {},
        "owner": gone_owner(),
        "changed_at": "2025-01-01T00:00:00+00:00",
    }
    raw.update(entry)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({key: value for key, value in raw.items() if value is not None}))
    return path


def no_server_call(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a server was called: {args}")


def test_a_fifo_or_folder_in_the_journal_is_skipped_with_a_reason_and_never_waited_on(tmp_path: Path):
    """`inferload restore` (and every run at its start) reads the journal: a FIFO there is never opened
    for reading (that waits for a writer forever), nor a symlink to one, nor a folder named like an entry."""
    os.mkfifo(tmp_path / "triton-model-config-fifo.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "triton-model-config-fifo.json")
    (tmp_path / "folder.json").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "inferload.cli", "restore", "--journal", str(tmp_path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("inferload restore waited on a FIFO in the journal")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    assert done.stderr.count("is not a regular file: it is a named pipe (FIFO); skipped") == 2, done.stderr
    assert "folder.json is not a regular file: it is a folder; skipped" in done.stderr
    journal = ServerJournal(tmp_path)
    problems = journal.entries()
    assert len(problems) == 3 and all(isinstance(line, str) and "\n" not in line for line in problems)
    lines: list[str] = []
    assert journal.restore_leftovers(None, lines.append) == 0 and lines == []


def test_a_journal_file_larger_than_the_bound_is_refused_unread(tmp_path: Path):
    path = tmp_path / "big.json"
    with open(path, "wb") as handle:
        handle.truncate(server_changes.MAX_ENTRY_BYTES + 1)  # sparse: nothing is written
    [problem] = ServerJournal(tmp_path).entries()
    assert isinstance(problem, str) and str(path) in problem and "at most 4,194,304 are read; skipped" in problem


def test_a_token_file_that_is_dev_zero_or_too_large_is_a_clear_error_and_never_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The management key's file is read only when it is a regular file of at most MAX_SMALL_FILE_BYTES
    (``/dev/zero`` read whole never ends and grows without bound)."""

    def read_whole(self: Path, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{self} read whole")

    monkeypatch.setattr(Path, "read_text", read_whole)
    monkeypatch.setattr(Path, "read_bytes", read_whole)
    with pytest.raises(ServerChangeError, match=r"token_file: /dev/zero is not a regular file"):
        server_changes.access_headers({"token_file": "/dev/zero"})
    large = tmp_path / "key_file.json"
    with open(large, "wb") as handle:
        handle.truncate(MAX_SMALL_FILE_BYTES + 1)
    with pytest.raises(ServerChangeError, match=rf"{large} is 1,048,577 bytes; at most 1,048,576 are read"):
        server_changes.access_headers({"token_file": str(large)})
    # restoring says so for the entry and keeps it, without calling the server
    write_leftover(
        tmp_path / "journal",
        "ts.json",
        kind="torchserve-registration",
        original={"modelUrl": "cnn.mar", "batchSize": 8},
        access={"token_file": "/dev/zero"},
    )
    monkeypatch.setattr(urllib.request, "urlopen", no_server_call)
    lines: list[str] = []
    assert ServerJournal(tmp_path / "journal").restore_leftovers(None, lines.append) == 1
    assert "could not restore model 'cnn'" in lines[-1] and "/dev/zero is not a regular file" in lines[-1]


def test_a_server_that_is_no_http_url_is_refused_naming_the_scheme_and_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(urllib.request, "urlopen", no_server_call)
    path = write_leftover(tmp_path, "triton.json", server="file:///etc/passwd")
    write_leftover(tmp_path, "trace.json", kind="triton-trace-settings", server="file:///etc/passwd", original={})
    journal = ServerJournal(tmp_path)
    problems = journal.entries()
    assert len(problems) == 2 and all(isinstance(line, str) for line in problems)
    assert f"{path}: not a journal entry (server: expected an http:// or https:// URL" in str(problems)
    assert "(the scheme 'file')" in str(problems[0]) and "(the scheme 'file')" in str(problems[1])
    assert journal.restore_leftovers(None, no_server_call) == 0
    with pytest.raises(ServerChangeError, match=r"GET file:///etc/passwd: refused: .*the scheme 'file'"):
        server_changes.http_json("GET", "file:///etc/passwd")
    with pytest.raises(ServerChangeError, match=r"cannot be written down \(server: .*the scheme 'ftp'"):
        journal.record("torchserve-registration", "ftp://127.0.0.1:8081", "cnn", {"modelUrl": "cnn.mar"})
    # a traced Triton's address may be host:port, as the targets give it
    assert journal.record("triton-trace-settings", "127.0.0.1:8001", "cnn", {"trace_rate": "1000"}).server == "127.0.0.1:8001"


def test_a_missing_or_mistyped_original_is_a_line_naming_the_file_and_what_was_expected(tmp_path: Path):
    missing = write_leftover(tmp_path, "missing.json", original=None)
    listed = write_leftover(tmp_path, "list.json", original=[1, 2])
    mistyped = write_leftover(
        tmp_path, "ts.json", kind="torchserve-registration", original={"modelUrl": "m.mar", "batchSize": "8"}
    )
    problems = {str(line).split(":")[0]: line for line in ServerJournal(tmp_path).entries()}
    assert problems[str(missing)] == (
        f"{missing}: not a journal entry (original: missing; expected an object: the settings found before the change, to put back)"
    )
    assert problems[str(listed)] == (
        f"{listed}: not a journal entry (original: expected an object: the settings found before the change, to put back;"
        " got [1, 2])"
    )
    assert (
        problems[str(mistyped)] == f"{mistyped}: not a journal entry (original: batchSize: expected a whole number >= 0; got '8')"
    )


def test_a_registration_to_put_back_without_its_archive_is_a_clear_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    write_leftover(tmp_path, "ts.json", kind="torchserve-registration", server="http://ts:8081", original={"batchSize": 8})
    monkeypatch.setattr(server_changes, "http_json", lambda method, url, *args, **kwargs: (404, {}))  # not registered
    lines: list[str] = []
    assert ServerJournal(tmp_path).restore_leftovers(None, lines.append) == 1
    assert "could not restore model 'cnn'" in lines[-1] and "has no modelUrl (the archive to register it from)" in lines[-1]


def test_a_registration_put_back_says_when_torchserve_no_longer_loads_it_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    original = {
        "modelUrl": "cnn.mar",
        "batchSize": 8,
        "maxBatchDelay": 10,
        "minWorkers": 1,
        "maxWorkers": 1,
        "loadedAtStartup": True,
    }
    described = [None, {**original, "loadedAtStartup": False}]  # before the registration, then after it
    monkeypatch.setattr(server_changes, "torchserve_description", lambda *_: described.pop(0))
    monkeypatch.setattr(server_changes, "torchserve_register", lambda *_: None)
    done = server_changes.restore_torchserve_registration("http://127.0.0.1:1", "cnn", original, {})
    assert done.startswith("registered again with batch size 8") and "loadedAtStartup: false" in done
