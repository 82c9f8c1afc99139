"""`inferload run --repeat N`: the same run N times, and each figure's mean with its 95 % interval.

The repetitions are ordinary results folders (`repeat-01/` ...) under the run's folder; repeat.json
next to them holds, per target and figure, the N values, their mean and the mean's 95 % interval
(Student's t over the repetitions: `inferload.results.repeats`). `inferload compare` reads it to tell a
change from the noise.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from inferload.results.figures import value_at
from inferload.results.files import ResultsError, model_problem, present, read_json_file, read_summary
from inferload.results.schema import Number, RunSummary

# How noisy a figure is, and whether a change between two runs is beyond that noise.
#
# A figure's **samples** are its values in each repetition of a run (`inferload run --repeat N`,
# repeat.json) when there are at least two, else its values in each steady window of the one run
# (windows.csv). The change B − A is the difference of the exact figures (of the means of the
# repetitions); its 95 % interval is Welch's: ± t · sqrt(var_A/n_A + var_B/n_B), t from Student's
# distribution with Welch–Satterthwaite degrees of freedom. Window samples measure how much the figure
# moves within a run, a lower bound on run-to-run noise: repetitions are the stronger evidence.
#: Student's t, two-sided 95 % (the 0.975 quantile), by degrees of freedom; between rows: interpolated
_T975 = (
    (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306), (9, 2.262),
    (10, 2.228), (12, 2.179), (15, 2.131), (20, 2.086), (25, 2.060), (30, 2.042), (40, 2.021), (60, 2.000),
    (120, 1.980), (100000, 1.960),
)  # fmt: skip


def t975(df: float) -> float:
    """Student's t 0.975 quantile for `df` degrees of freedom (df >= 1)."""
    dfs = [d for d, _ in _T975]
    if df <= 1:
        return _T975[0][1]
    index = bisect.bisect_left(dfs, df)
    if index >= len(dfs):
        return 1.960
    (d0, t0), (d1, t1) = _T975[index - 1], _T975[index]
    return t0 + (t1 - t0) * (df - d0) / (d1 - d0)


@dataclass(frozen=True)
class Interval:
    """A change B − A with its 95 % interval, absolute and relative to A (None: not computable)."""

    change: float
    low: float
    high: float
    a: float
    samples_a: int
    samples_b: int

    @property
    def change_pct(self) -> float | None:
        return None if self.a == 0 else self.change / abs(self.a) * 100.0

    @property
    def low_pct(self) -> float | None:
        return None if self.a == 0 else self.low / abs(self.a) * 100.0

    @property
    def high_pct(self) -> float | None:
        return None if self.a == 0 else self.high / abs(self.a) * 100.0


def mean_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the mean of `values` with its 95 % interval; None for fewer than 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def change_interval(a: float, b: float, samples_a: Sequence[float], samples_b: Sequence[float]) -> Interval | None:
    """B − A (the exact figures `a`, `b`) with Welch's 95 % interval from each side's samples."""
    if len(samples_a) < 2 or len(samples_b) < 2:
        return None
    var_a = statistics.variance(samples_a) / len(samples_a)
    var_b = statistics.variance(samples_b) / len(samples_b)
    spread = math.sqrt(var_a + var_b)
    if spread == 0:
        df = 100000.0
    else:
        df = (var_a + var_b) ** 2 / (
            (var_a**2 / (len(samples_a) - 1) if var_a else 0.0) + (var_b**2 / (len(samples_b) - 1) if var_b else 0.0)
        )
    half = t975(df) * spread
    change = b - a
    return Interval(change, change - half, change + half, a, len(samples_a), len(samples_b))


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


class RepeatFigure(BaseModel):
    """One figure of one target in repeat.json: its value in each repetition, their mean and its interval."""

    model_config = ConfigDict(strict=True, extra="allow")

    values: list[Number]
    mean: Number | None
    ci95: list[Number] | None = None


class RepeatDocument(BaseModel):
    """repeat.json as `summarise_repeats` writes it, checked on reading (readers get the dict itself)."""

    model_config = ConfigDict(strict=True, extra="allow")

    repeats: list[str] = []
    missing: list[str] = []
    targets: dict[str, dict[str, RepeatFigure]]


#: what repeat.json is, in messages
REPEAT_EXPECTED = "the repeat.json of `inferload run --repeat N` (per target and figure: values, mean, ci95)"


def read_repeats(folder: Path) -> dict[str, Any] | None:
    """repeat.json of a repeated run's folder, checked (`RepeatDocument`); None when there is none.
    ResultsError naming the file and the first problem (`inferload.results.files.read_json_file`)."""
    path = folder / REPEAT_JSON
    if not present(path, REPEAT_EXPECTED):
        return None
    document = read_json_file(path, REPEAT_EXPECTED)
    problem = model_problem(RepeatDocument, document)
    if problem is not None:
        raise ResultsError(f"{path}: {problem}")
    return dict(document)


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
