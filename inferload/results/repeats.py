"""`inferload run --repeat N`: the same run N times, and each figure's mean with its 95 % interval.

The repetitions are ordinary results folders (`repeat-01/` ...) under the run's folder; repeat.json
next to them holds, per target and figure, the N values, their mean and the mean's 95 % interval
(Student's t over the repetitions: `inferload.results.noise`). `inferload compare` reads it to tell a
change from the noise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferload.results.figures import value_at
from inferload.results.model import RunSummary
from inferload.results.noise import mean_interval
from inferload.results.summary_file import ResultsError, read_summary

REPEAT_JSON = "repeat.json"
#: gate name -> (path in a target summary, windows.csv column or None)
GATED: dict[str, tuple[tuple[str, ...], str | None]] = {
    "p50": (("latency_ms", "p50"), "p50_ms"),
    "p90": (("latency_ms", "p90"), "p90_ms"),
    "p95": (("latency_ms", "p95"), "p95_ms"),
    "p99": (("latency_ms", "p99"), "p99_ms"),
    "p999": (("latency_ms", "p999"), "p999_ms"),
    "mean": (("latency_ms", "mean"), "mean_ms"),
    "throughput": (("throughput_rps",), "rps"),
    "error_rate": (("error_rate",), None),
}


def repetition_folder(out: Path, index: int) -> Path:
    return out / f"repeat-{index:02d}"


def figure_values(summaries: Sequence[RunSummary], target: str, path: tuple[str, ...]) -> list[float]:
    values = []
    for summary in summaries:
        figures = summary.targets.get(target)
        value = value_at(figures, path) if figures is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values.append(float(value))
    return values


def summarise_repeats(folders: Sequence[Path]) -> dict[str, Any]:
    """repeat.json's content for these repetition folders (those without a summary are named, not used)."""
    summaries: list[RunSummary] = []
    missing: list[str] = []
    for folder in folders:
        try:
            summaries.append(read_summary(folder))
        except ResultsError:
            missing.append(folder.name)
    targets: dict[str, dict[str, Any]] = {}
    names = list(dict.fromkeys(name for summary in summaries for name in summary.targets))
    for name in names:
        figures: dict[str, Any] = {}
        for gate, (path, _) in GATED.items():
            values = figure_values(summaries, name, path)
            interval = mean_interval(values)
            figures[gate] = {
                "values": values,
                "mean": None if not values else sum(values) / len(values),
                "ci95": None if interval is None else [interval[1], interval[2]],
            }
        targets[name] = figures
    return {"repeats": [folder.name for folder in folders], "missing": missing, "targets": targets}


def write_repeats(out: Path, folders: Sequence[Path]) -> dict[str, Any]:
    document = summarise_repeats(folders)
    (out / REPEAT_JSON).write_text(json.dumps(document, indent=2) + "\n")
    return document


def read_repeats(folder: Path) -> dict[str, Any] | None:
    """repeat.json of a repeated run's folder; None when `folder` is not one."""
    path = folder / REPEAT_JSON
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ResultsError(f"{path}: cannot be read: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("targets"), dict):
        raise ResultsError(f"{path}: not a repeat.json (no targets)")
    return document


def format_repeats(document: dict[str, Any]) -> str:
    """Console lines: per target, each figure's mean and 95 % interval over the repetitions."""
    lines = [
        f"{len(document['repeats'])} repetitions"
        + (f" ({', '.join(document['missing'])} wrote no results)" if document["missing"] else "")
    ]
    for name, figures in document["targets"].items():
        lines.append(f"target {name}:")
        for gate, figure in figures.items():
            if figure["mean"] is None:
                continue
            ci = figure["ci95"]
            interval = f" (95 % interval {ci[0]:.4g} .. {ci[1]:.4g})" if ci else ""
            lines.append(f"  {gate}: mean {figure['mean']:.4g}{interval} over {len(figure['values'])} runs")
    return "\n".join(lines)
