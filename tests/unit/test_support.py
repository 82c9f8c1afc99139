"""The shared test support: waiting with a deadline, and the fast layer's guard (no torch, no servers)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.fast_layer import forbidden_imports, server_fixture_uses
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until


def test_wait_until_returns_the_first_truthy_value_and_treats_oserror_as_not_yet() -> None:
    calls: list[object] = [None, OSError("refused"), "", "ready"]

    def probe() -> str | None:
        value = calls.pop(0)
        if isinstance(value, Exception):
            raise value
        return value if isinstance(value, str) else None

    assert wait_until(probe, 5, "the probe", interval_s=0.001) == "ready"


def test_wait_until_fails_at_the_deadline_naming_what_it_waited_for_and_the_last_value() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0\.2 s waiting for the web UI \(last seen: .*refused"):
        wait_until(lambda: (_ for _ in ()).throw(ConnectionRefusedError("refused")), 0.2, "the web UI", interval_s=0.01)
    assert 0.2 <= time.monotonic() - started < 2


def test_other_errors_are_not_swallowed() -> None:
    with pytest.raises(KeyError):
        wait_until(lambda: dict[str, str]()["missing"], 5, "a key")


def test_server_fixtures_in_a_unit_test_are_named() -> None:
    uses = server_fixture_uses([("t::a", ["tmp_path"]), ("t::b", ["tmp_path", "local_servers", "influxdb"])])
    assert uses == ["t::b: influxdb", "t::b: local_servers"]


def test_forbidden_imports_are_found() -> None:
    assert forbidden_imports({"numpy": object(), "torch": object()}) == ["torch"]


def test_a_unit_session_that_imports_torch_fails() -> None:
    """The guard's end-to-end check: a stand-in `torch` module in sys.modules fails a unit session."""
    code = (
        "import sys, types, pytest; sys.modules['torch'] = types.ModuleType('torch'); "
        "sys.exit(pytest.main(['tests/unit/test_latency.py', '-q', '-p', 'no:cacheprovider']))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAST LAYER: the fast layer imported torch" in done.stdout
    assert " passed" in done.stdout  # the tests themselves passed: only the guard failed the session


def test_test_module_names_are_unique_across_the_layers() -> None:
    """Test folders are not packages: two test files of one name would stop `pytest tests` at collection."""
    unit, integration = ({p.name for p in (REPO / "tests" / layer).glob("test_*.py")} for layer in ("unit", "integration"))
    assert unit & integration == set()
