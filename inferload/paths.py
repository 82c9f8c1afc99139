"""Where inferload's own files are, from a checkout or from an installed wheel.

From a checkout (``pip install -e .``, the tests, ``make``), the top-level ``scenarios/``,
``model_repository/`` and ``model_store/`` are the files themselves. A wheel carries copies of
them inside the package, as ``inferload/samples/<folder>/`` (setup.py maps the top-level folders
there when it builds; there is no such folder in a checkout). ``samples_dir()`` is the one place
that tells the two apart. Installed, the sample models are built under ``home_dir()``
(``$INFERLOAD_HOME``, or ``.inferload`` in the working folder); see inferload.local.models.specs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO


# Files written whole: a reader finds the old file or the new one, never a part of either.
#
# Every results file (summary.json, windows.csv, histograms.jsonl, report.html, sweep.json, tune.json)
# and every journal entry of server changes is written to a temporary file in the same folder,
# flushed to disk, then renamed over its name (and the folder flushed, so the rename survives a
# crash). A full disk or a folder that turned read-only fails the write with an `OSError` before the
# rename: the temporary file is removed and whatever had that name is left as it was, so a 0-byte or
# half-written summary.json can no longer break `inferload compare` or `report`.
@contextlib.contextmanager
def replacing(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file to write that becomes `path` when the block ends without an error (UTF-8), made
    with the usual permissions (0666 less the umask, as `open` makes a file: a results folder is
    read by others, a CI's uploader or a web server)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
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


PACKAGE_DIR = Path(__file__).resolve().parent
#: the locustfile `inferload run` gives Locust (also `python -m inferload.locustfile`)
LOCUSTFILE = PACKAGE_DIR / "locustfile.py"
#: the checkout's root when inferload runs from one (tests, bench); see `checkout_root()`
REPO_ROOT = PACKAGE_DIR.parent
DEFAULT_STATE_DIR = Path(".inferload") / "servers"
HOME_ENV = "INFERLOAD_HOME"


def checkout_root() -> Path | None:
    """The source checkout inferload runs from, or None when it is installed from a wheel."""
    marker = REPO_ROOT / "model_store" / "handler.py"
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() and marker.is_file() else None


def samples_dir() -> Path:
    """The folder holding ``scenarios/``, ``model_repository/`` (configs) and ``model_store/`` (handler)."""
    return checkout_root() or PACKAGE_DIR / "samples"


def scenarios_dir() -> Path:
    """The sample scenarios (``steady.yaml``, ``compare.yaml``, ...)."""
    return samples_dir() / "scenarios"


def home_dir() -> Path:
    """``$INFERLOAD_HOME``, or ``.inferload`` in the working folder (absolute)."""
    return Path(os.environ.get(HOME_ENV) or ".inferload").absolute()
