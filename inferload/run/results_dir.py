"""The run id and the results folder, checked before any load is sent.

A run id names the results folder (``results/<run id>``) and tags every InfluxDB point, so it must
make one folder name: no path separator, not ``.`` or ``..``, and short enough for a file name
(most file systems allow 255 bytes). A results folder that cannot be written is found at start
where the run needs it from the start (``--requests-csv`` writes into it as it goes, a
distributed run puts the workers' locustfile there); otherwise the results go to a temporary
folder named in the log at the end (``run.finish``).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from inferload.errors import StartCheckError

#: characters of a run id (a default one is the scenario name, at most 100, and 17 more)
MAX_RUN_ID_CHARS = 150


def run_id_problem(run_id: str) -> str | None:
    """What is wrong with ``run_id`` as a run id (and folder name), or None."""
    if not run_id or run_id in (".", ".."):
        return f"expected a name for the results folder; got {run_id!r}"
    if len(run_id) > MAX_RUN_ID_CHARS:
        return f"expected at most {MAX_RUN_ID_CHARS} characters; got {len(run_id):,}"
    bad = sorted({char for char in run_id if char in "/\\" or not char.isprintable()})
    if bad:
        return f"expected no {', '.join(repr(char) for char in bad)} (it names one folder); got {run_id[:60]!r}"
    return None


def not_a_folder_problem(folder: Path, what: str = "the results") -> str | None:
    """A file (or a device, a FIFO) where ``folder`` or one of its parents should be, or None."""
    existing = next((path for path in (folder, *folder.parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"cannot write {what} into {folder}: {existing} is a file, not a folder"
    return None


def unwritable_problem(folder: Path, what: str = "the results", keep: bool = True) -> str | None:
    """Why ``what`` cannot be written into ``folder`` (made when missing), or None.

    ``keep=False``: the folders made to check are removed again (a check before anything starts)."""
    in_the_way = not_a_folder_problem(folder, what)
    if in_the_way:
        return in_the_way
    made = [path for path in (folder, *folder.parents) if not path.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".inferload-write-check-"):
            pass
    except OSError as exc:
        return f"cannot write {what} into {folder}: {exc.strerror or type(exc).__name__}"
    finally:
        if not keep:
            for path in made:  # deepest first
                with contextlib.suppress(OSError):
                    path.rmdir()
    return None


def check_results_dir(run_id: str, folder: Path, written_from_start: bool) -> None:
    """StartCheckError when ``run_id`` is no folder name, or (``written_from_start``) ``folder``
    cannot be written (for a run started by Locust itself: ``inferload run`` checks before)."""
    problems = []
    id_problem = run_id_problem(run_id)
    if id_problem:
        problems.append(f"--run-id: {id_problem}")
    folder_problem = unwritable_problem(folder) if written_from_start and not id_problem else None
    if folder_problem:
        problems.append(f"--results-dir: {folder_problem}")
    if problems:
        raise StartCheckError(problems, skippable=False)
