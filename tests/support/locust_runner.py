"""Run the real `locust` command on a scenario, as a user would, and read what it wrote."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferload.paths import LOCUSTFILE, REPO_ROOT


@dataclass
class LocustRun:
    returncode: int
    output: str
    elapsed_s: float
    results_dir: Path
    stats_json: list[dict[str, Any]]
    failures_csv: list[dict[str, str]]

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.results_dir / "summary.json").read_text())

    @property
    def windows_csv(self) -> str:
        return (self.results_dir / "windows.csv").read_text()


def write_scenario(data: dict[str, Any], folder: Path, name: str = "scenario.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_locust(scenario_path: Path, folder: Path, *extra: str, timeout_s: float = 120) -> LocustRun:
    results = folder / "results"
    stats_file = folder / "locust-stats.json"
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--scenario",
        str(scenario_path),
        "--headless",
        "--only-summary",
        "--results-dir",
        str(results),
        "--json-file",
        str(stats_file.with_suffix("")),
        "--csv",
        str(folder / "locust"),
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    elapsed = time.monotonic() - started
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else []
    failures_path = folder / "locust_failures.csv"
    failures = list(csv.DictReader(failures_path.open())) if failures_path.exists() else []
    return LocustRun(done.returncode, done.stdout + done.stderr, elapsed, results, stats, failures)
