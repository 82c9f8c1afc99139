"""Files written whole: a reader finds the old file or the new one, never a part of either.

Every results file (summary.json, windows.csv, histograms.jsonl, report.html, sweep.json, tune.json)
and every journal entry of server changes is written to a temporary file in the same folder,
flushed to disk, then renamed over its name (and the folder flushed, so the rename survives a
crash). A full disk or a folder that turned read-only fails the write with an `OSError` before the
rename: the temporary file is removed and whatever had that name is left as it was, so a 0-byte or
half-written summary.json can no longer break `inferload compare` or `report`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def replacing(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file to write that becomes `path` when the block ends without an error (UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself is durable once the folder is
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_atomically(path: Path, text: str) -> Path:
    """`text` into `path`, whole or not at all (see the module's docstring); `path`."""
    with replacing(path) as handle:
        handle.write(text)
    return path
