"""sweep.json and sweep.csv: every finished step, written as it completes (an interrupted sweep keeps
what it measured, and `--resume` carries on from the file).

sweep.json: ``{"version": 1, "plan": {...}, "steps": [...], "stopped": {"rule", "reason"} | null,
"best": step | null, "knee": step | null, "capacity": {...} | null}``; sweep.csv: one row per step,
the same keys as a step in sweep.json.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.tune.step import StepResult

SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
VERSION = 1


def write_sweep(out: Path, document: dict[str, Any]) -> None:
    """sweep.json and sweep.csv, each replaced atomically (a reader never sees half a file)."""
    out.mkdir(parents=True, exist_ok=True)
    _replace(out / SWEEP_JSON, json.dumps(document, indent=2) + "\n")
    columns = [f.name for f in fields(StepResult)]
    temporary = out / f".{SWEEP_CSV}.tmp"
    with open(temporary, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(document["steps"])
    os.replace(temporary, out / SWEEP_CSV)


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def read_sweep(out: Path) -> dict[str, Any] | None:
    """The sweep.json in `out` (None when there is none); InferloadError naming the file when unreadable."""
    path = out / SWEEP_JSON
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InferloadError(f"{path}: cannot be read to resume: {error}") from None
    if not isinstance(document, dict) or document.get("version") != VERSION or not isinstance(document.get("steps"), list):
        raise InferloadError(f"{path}: not a sweep.json of version {VERSION}; use another --out")
    return document


def steps_from(document: dict[str, Any]) -> list[StepResult]:
    """The finished steps of a sweep.json."""
    names = {f.name for f in fields(StepResult)}
    try:
        return [StepResult(**{k: v for k, v in step.items() if k in names}) for step in document["steps"]]
    except TypeError as error:
        raise InferloadError(f"{SWEEP_JSON}: a step cannot be read: {error}") from None
