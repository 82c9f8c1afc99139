"""Reading the files a scenario names (TLS files, TorchServe's token_file, expected answers, npy
inputs) without hanging or exhausting the machine: a regular file, of bounded size, read without
waiting, and an npy header checked against the file before numpy allocates what it claims.

A FIFO waits for a writer, ``/dev/zero`` never ends, ``/proc/kmsg`` is a "regular" file that blocks
until the kernel logs something, and an npy header can claim 58 TiB: each is refused with a line that
names the file and why, before any of it is read.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
from pydantic import ValidationInfo

from inferload.scenario.messages import custom_error

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


#: the kernel's own file systems: their "regular" files can block (/proc/kmsg) or change the system when read
KERNEL_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


def scenario_file(
    value: str | None, info: ValidationInfo, what: str, problem: Callable[[Path], str | None] | None = None
) -> str | None:
    """A file a scenario's key names, relative to the scenario file (a validator's value): None stays
    None; an empty name is refused ("expected the path of ``what``"); when the validation context
    knows the scenario's folder (``base_dir``), its absolute path, once ``problem(path)`` (why the
    file cannot be used; None: it can) has found nothing. Without the folder the name is kept as given."""
    if value is None:
        return None
    if not value.strip():
        raise custom_error(f"expected the path of {what}; got an empty string")
    base_dir = (info.context or {}).get("base_dir")
    if base_dir is None:
        return value
    path = (Path(base_dir) / value).resolve()
    found = problem(path) if problem is not None else None
    if found:
        raise custom_error(found)
    return str(path)


def unreadable_problem(path: Path, read: Callable[[str], object]) -> str | None:
    """Why `path` is no regular file, or why ``read`` (a reader raising ValueError with its message)
    refuses it; None when it reads."""
    problem = not_regular_problem(path)
    if problem is None:
        try:
            read(str(path))
        except ValueError as error:
            problem = str(error)
    return problem


def not_regular_problem(path: Path) -> str | None:
    """Why `path` is no regular file to read (missing, a folder, a FIFO, a device, a kernel file), or None."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python 3.11)
        return f"cannot read {path}: {getattr(error, 'strerror', None) or error}"
    if any(resolved == folder or folder in resolved.parents for folder in KERNEL_FOLDERS):
        return f"{path} is not a regular file: it is a kernel file ({resolved})"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as error:
        return f"cannot read {path}: {error.strerror or type(error).__name__}"
    for is_kind, name in _KINDS:
        if is_kind(mode):
            return f"{path} is not a regular file: it is {name}"
    return None if stat.S_ISREG(mode) else f"{path} is not a regular file"


def read_limited(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes`; ValueError naming it and why not."""
    problem = not_regular_problem(path)
    if problem:
        raise ValueError(problem)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path} is {size:,} bytes; at most {max_bytes:,} are read")
        # O_NONBLOCK: a kernel file that waits for data (/proc/kmsg) answers at once instead of hanging
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except BlockingIOError:
        raise ValueError(f"{path} cannot be read without waiting (a kernel or device file?); expected a regular file") from None
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or type(error).__name__}") from None
    if data is None or len(data) > max_bytes:  # procfs files say size 0 and hold more
        raise ValueError(f"{path} holds more than {max_bytes:,} bytes; at most {max_bytes:,} are read")
    return data


def check_npy_header(handle: IO[bytes], available: int, max_bytes: int, where: str) -> None:
    """Read an npy header from `handle` (then at its start) and refuse it when the array it claims is larger
    than the `available` bytes after it (the header lies) or than `max_bytes`; ValueError naming `where`."""
    try:
        version = np.lib.format.read_magic(handle)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(handle)
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(f"{where} is not an npy array: {error}") from None
    claimed = math.prod(int(dim) for dim in shape) * dtype.itemsize
    data_bytes = available - handle.tell()
    if claimed > data_bytes:
        raise ValueError(
            f"{where}: its header says {list(shape)} {dtype} ({claimed:,} bytes) but {max(data_bytes, 0):,} follow it:"
            " a truncated or altered npy file"
        )
    if claimed > max_bytes:
        raise ValueError(f"{where} holds {claimed:,} bytes; at most {max_bytes:,}")


def check_npy_file(path: Path, max_bytes: int) -> None:
    """`check_npy_header` for an .npy file on disk."""
    with open(path, "rb") as handle:
        check_npy_header(handle, path.stat().st_size, max_bytes, path.name)


def check_npz_members(path: Path, max_bytes: int) -> None:
    """`check_npy_header` for every array of an .npz archive (each member's header against its size)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                check_npy_header(member, info.file_size, max_bytes, f"{path.name}[{info.filename[:-4]!r}]")
