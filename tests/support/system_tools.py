"""System programs the tests need (installed by `scripts/install-system-deps.sh test`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
#: headless Chromium as every test starts it (root in CI: no sandbox; no GPU, no background traffic)
HEADLESS_CHROMIUM = (
    "chromium",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def require_tool(command: str) -> str:
    """The path of `command`, installing the test packages first when it is missing."""
    path = shutil.which(command)
    if path is None:
        subprocess.run(["bash", str(REPO / "scripts" / "install-system-deps.sh"), "test"], check=True)
        path = shutil.which(command)
    assert path is not None, f"{command} is still missing after scripts/install-system-deps.sh test"
    return path
