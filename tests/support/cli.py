"""The `inferload` command run as a user runs it: a subprocess of this interpreter, in the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from tests.support.system_tools import REPO

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def inferload(*args: str, timeout_s: float = 300, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``env``: variables set for this command beside the test's own."""
    return subprocess.run(
        [sys.executable, "-m", "inferload.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else {**os.environ, **env},
    )
