"""A results folder that fails mid-run, for real: a small tmpfs mounted for one test, remounted
read-only or filled up while a run writes into it. Mounting needs root (CAP_SYS_ADMIN), as the
network namespaces of `netns_hosts` do: the integration layer runs as root (`chmod` could not stand
in: root writes through it).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. ``256k``) mounted at `path` until the block ends."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs at {path} ({done.stderr.strip()}): the integration layer runs as root"
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)


def remount_read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, text=True, check=True)


def fill_up(path: Path) -> Path:
    """Fill the file system of `path` until it has no byte left (ENOSPC); the filler file."""
    filler = path / "filler"
    chunk = b"\0" * 4096
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as handle:
        while True:
            handle.write(chunk)
    with contextlib.suppress(OSError), open(filler, "ab", buffering=0) as handle:  # the last bytes of a page
        while True:
            handle.write(b"\0")
    return filler
