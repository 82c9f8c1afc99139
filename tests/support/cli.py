"""The `inferload` command run as a user runs it: a subprocess of this interpreter, in the checkout."""

from __future__ import annotations

import subprocess
import sys

from tests.support.system_tools import REPO

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def inferload(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferload.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s
    )
