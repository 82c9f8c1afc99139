"""torch-model-archiver as a test runs it: a .mar of a handler with its model file, weights and extra
files, built into a folder of the test's (never into the checkout)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def archive_model(
    store: Path,
    name: str,
    handler: Path,
    *,
    serialized_file: Path | None = None,
    model_file: Path | None = None,
    extra_files: Sequence[Path] = (),
    version: str = "1.0",
    config_file: Path | None = None,
) -> Path:
    """``store/<name>.mar``. An extra folder's contents land at the archive's top level, the folder
    the handler is imported from (a folder of packages there is importable by the handler)."""
    command = [sys.executable, "-m", "model_archiver.model_packaging", "--model-name", name, "--version", version]
    command += ["--handler", str(handler), "--export-path", str(store), "--force"]
    if serialized_file is not None:
        command += ["--serialized-file", str(serialized_file)]
    if model_file is not None:
        command += ["--model-file", str(model_file)]
    if extra_files:
        command += ["--extra-files", ",".join(str(path) for path in extra_files)]
    if config_file is not None:  # the model's model-config.yaml (batching, sequence batching, handler settings)
        command += ["--config-file", str(config_file)]
    store.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr or done.stdout
    return store / f"{name}.mar"
