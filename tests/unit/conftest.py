"""The fast layer's guard (see tests/support/fast_layer.py): no server fixtures, no torch, no leftovers.

`make unit` runs only this folder; when it does, the session fails if anything imported torch
or left a child process running. In a run that also collects tests/integration the import
check is off (the integration conftest imports torch itself).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.support.fast_layer import forbidden_imports, in_unit_layer, leftover_children, server_fixture_uses


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit_items = [item for item in items if in_unit_layer(Path(str(item.path)))]
    uses = server_fixture_uses((item.nodeid, getattr(item, "fixturenames", ())) for item in unit_items)
    if uses:
        raise pytest.UsageError("tests/unit must not start servers; move these to tests/integration:\n  " + "\n  ".join(uses))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    items = getattr(session, "items", [])
    if not items or not all(in_unit_layer(Path(str(item.path))) for item in items):
        return
    problems = [
        f"the fast layer imported {name} (find who with: python -X importtime -m pytest tests/unit)"
        for name in forbidden_imports(sys.modules)
    ]
    problems += [f"a unit test left a process running: {child}" for child in leftover_children()]
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")
            for problem in problems:
                reporter.write_line(f"FAST LAYER: {problem}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail a test that blocks (a FIFO opened for reading waits for a writer) instead of hanging."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("still waiting after 10 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
