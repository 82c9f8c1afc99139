"""The command line of a Locust run on inferload's own locustfile (used by `inferload run` and
the demo)."""

from __future__ import annotations

import sys
from pathlib import Path

from inferload.paths import LOCUSTFILE

#: how the CLI starts Locust: `python -m locust` with stop signals held from the first line (see the module)
LOCUST_ENTRY = "inferload.run.locust_entry"


def locust_command(scenario: Path, headless: bool, out: Path | None, run_id: str | None, extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", LOCUST_ENTRY, "-f", str(LOCUSTFILE), "--scenario", str(scenario)]
    if headless:
        command.append("--headless")
    if out is not None:
        command += ["--results-dir", str(out)]
    if run_id:
        command += ["--run-id", run_id]
    return command + list(extra)
