"""Test layers: ``unit/`` (pure: no torch, no servers; guarded by unit/conftest.py) and
``integration/`` (real servers); shared helpers in ``support/``. See docs/testing.md.

Locust patches the standard library for gevent when it is imported; that has to happen before
anything imports ssl (requests, urllib3, influxdb-client), as in every locustfile.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator

import locust  # noqa: F401
import pytest

from inferload.run.server_changes import JOURNAL_ENV
from tests.support.locust_runner import close_warm_locust

#: the real InfluxDB and the observed run (streaming + collector) as session fixtures
pytest_plugins = ("tests.support.influx_fixture",)


def pytest_sessionstart(session: pytest.Session) -> None:
    """CI builds the native engine before any test (`.ci/run` refuses a machine without cargo): its
    tests skip only where it cannot be built, so in CI a missing module stops the session instead."""
    if os.environ.get("CI") and shutil.which("cargo") and importlib.util.find_spec("inferload._native") is None:
        raise pytest.UsageError(
            "CI: inferload/_native.abi3.so is not built, so the engine's tests would skip; run `make native` first"
        )


@pytest.fixture(scope="session", autouse=True)
def warm_locust_stopped_at_the_end() -> Iterator[None]:
    """The warm Locust that `run_locust` forks its runs from ends with the session that started it."""
    yield
    close_warm_locust()


@pytest.fixture(scope="session", autouse=True)
def own_journal_of_server_changes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The journal of server changes of this test session (every subprocess inherits it): what a test
    leaves there is never put back by someone else's run on this machine, nor theirs by ours."""
    previous = os.environ.get(JOURNAL_ENV)
    os.environ[JOURNAL_ENV] = str(tmp_path_factory.mktemp("server-changes"))
    yield
    if previous is None:
        os.environ.pop(JOURNAL_ENV, None)
    else:
        os.environ[JOURNAL_ENV] = previous


@pytest.fixture(scope="session", autouse=True)
def own_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The system temp folder of this test session, for its own code and every subprocess (TMPDIR):
    what inferload keeps there on purpose (the results' fallback folder, a scenario's unpacked
    payloads when a worker is killed) goes with pytest's own temp folders, not into /tmp for good."""
    previous_env, previous_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    folder = tmp_path_factory.mktemp("system-temp")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    yield
    tempfile.tempdir = previous_dir
    if previous_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous_env
