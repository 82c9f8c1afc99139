"""What keeps `tests/unit/` the fast layer: no torch imported, no server fixture used, no process left.

tests/unit/conftest.py calls these from pytest's hooks: a unit test that asks for a server
fixture is refused at collection, and a session of only unit tests fails at its end when torch
was imported (by a test, a helper or a module under test) or a child process is still running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

#: modules the fast layer must never import (torch alone takes seconds and much memory)
FORBIDDEN_MODULES = ("torch",)
#: fixtures that start real servers (tests/integration/conftest.py, tests/support/influx_fixture.py)
SERVER_FIXTURES = frozenset({"built_models", "local_servers", "influxdb", "observed_run"})
UNIT_DIR = Path(__file__).resolve().parent.parent / "unit"


def in_unit_layer(path: Path) -> bool:
    return path.resolve().is_relative_to(UNIT_DIR)


def server_fixture_uses(items: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """'test id: fixture' for every (test id, fixture names) that asks for a server fixture."""
    return [f"{test_id}: {name}" for test_id, names in items for name in sorted(set(names) & SERVER_FIXTURES)]


def forbidden_imports(modules: Mapping[str, object]) -> list[str]:
    """The forbidden modules present in `modules` (pass `sys.modules`)."""
    return [name for name in FORBIDDEN_MODULES if name in modules]


def leftover_children() -> list[str]:
    """Child processes of this pytest process that are still running: 'pid command line'."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{child.pid} {' '.join(child.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            continue
    return found
