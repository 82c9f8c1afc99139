"""`inferload compare A B`: two runs' summary.json side by side, with the change B − A per figure.

A and B are results folders or summary.json paths. Targets are matched by name, or by
``--rename OLD=NEW`` (A's target OLD is B's NEW); those in only one run are listed. A streamed
target (a decoupled model) gets its stream figures too. The relative change is (B − A) / A in %:
0 when both are 0, n/a when A is 0 and B is not, or when either figure is missing (null latency
after 0 successes, no server side).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.results.figures import COMPARE, STREAMING, Figure, streamed
from inferload.results.model import RunSummary
from inferload.results.summary_file import ResultsError, read_summary, summary_file

EXIT_USAGE = 2

# (name in the table and the JSON, path in a summary target, format): the compare view of
# inferload.results.figures
FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = tuple((f.name, f.path, f.compare_spec) for f in COMPARE)


def _shown(a_target: Any, b_target: Any) -> tuple[Figure, ...]:
    """The figures compared for one target: `COMPARE`, and `STREAMING` when either run streamed it."""
    return COMPARE + (STREAMING if streamed(a_target, b_target) else ())


@dataclass(frozen=True)
class FigureChange:
    """One figure of one target in both runs."""

    figure: str
    a: float | None
    b: float | None
    change: float | None  # b - a
    change_pct: float | None  # (b - a) / a * 100


@dataclass(frozen=True)
class RunInfo:
    path: str
    run_id: str | None
    scenario: str | None


@dataclass(frozen=True)
class Comparison:
    a: RunInfo
    b: RunInfo
    targets: dict[str, list[FigureChange]]  # targets in both runs (by A's name), in A's order
    only_in_a: list[str]
    only_in_b: list[str]
    renamed: dict[str, str] = field(default_factory=dict)  # A's name -> B's, for the targets paired by --rename


def parse_renames(texts: list[str]) -> dict[str, str]:
    """``--rename OLD=NEW`` options as {A's name: B's name}; InferloadError on a malformed one."""
    renames: dict[str, str] = {}
    for text in texts:
        old, sep, new = text.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise InferloadError(f"--rename: expected A_NAME=B_NAME (target A_NAME of run A is B_NAME in run B); got {text!r}")
        if old.strip() in renames:
            raise InferloadError(f"--rename: target {old.strip()!r} is renamed twice")
        renames[old.strip()] = new.strip()
    return renames


def change_of(figure: str, a: float | None, b: float | None) -> FigureChange:
    if a is None or b is None:
        return FigureChange(figure, a, b, None, None)
    change = b - a
    if a == 0:
        pct = 0.0 if b == 0 else None
    else:
        pct = change / abs(a) * 100.0
    return FigureChange(figure, a, b, change, pct)


def compare_summaries(
    a: RunSummary, b: RunSummary, a_path: str = "A", b_path: str = "B", renames: Mapping[str, str] | None = None
) -> Comparison:
    """Compare two loaded summaries (pure); ``renames``: A's target name -> B's (InferloadError when
    one names a target that is not there)."""
    from inferload.results.regression import target_pairs

    a_targets, b_targets = a.targets, b.targets
    pairs = target_pairs(list(a_targets), list(b_targets), renames or {})
    paired_b = {new for _, new in pairs}
    return Comparison(
        a=RunInfo(a_path, a.run_id, a.scenario),
        b=RunInfo(b_path, b.run_id, b.scenario),
        targets={
            old: [
                change_of(f.name, f.value(a_targets[old]), f.value(b_targets[new]))
                for f in _shown(a_targets[old], b_targets[new])
            ]
            for old, new in pairs
        },
        only_in_a=[name for name in a_targets if name not in dict(pairs)],
        only_in_b=[name for name in b_targets if name not in paired_b],
        renamed={old: new for old, new in pairs if old != new},
    )


def compare_runs(a_dir: Path, b_dir: Path, renames: Mapping[str, str] | None = None) -> Comparison:
    """Read both runs (folders or summary.json paths) and compare them; ResultsError if unreadable."""
    return compare_summaries(
        read_summary(Path(a_dir)),
        read_summary(Path(b_dir)),
        str(summary_file(Path(a_dir))),
        str(summary_file(Path(b_dir))),
        renames,
    )


def _number(value: float | None, spec: str, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return format(value, ("+" if sign else "") + spec)


def format_comparison(comparison: Comparison) -> str:
    """A plain text table per target in both runs, then the targets found in only one."""
    specs = {f.name: f.compare_spec for f in COMPARE + STREAMING}
    lines = [
        f"A: {comparison.a.path} (run {comparison.a.run_id or '?'}, scenario {comparison.a.scenario or '?'})",
        f"B: {comparison.b.path} (run {comparison.b.run_id or '?'}, scenario {comparison.b.scenario or '?'})",
    ]
    if not comparison.targets:
        lines += ["", "no target is in both runs (--rename A_NAME=B_NAME pairs a renamed target)"]
    for name, changes in comparison.targets.items():
        rows = [("figure", "A", "B", "B - A", "change %")]
        for c in changes:
            spec = specs[c.figure]
            pct = "n/a" if c.change_pct is None else f"{c.change_pct:+.1f} %"
            rows.append((c.figure, _number(c.a, spec), _number(c.b, spec), _number(c.change, spec, sign=True), pct))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        renamed = comparison.renamed.get(name)
        lines += ["", f"target: {name}" + (f" (in B: {renamed})" if renamed else "")]
        lines += [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in rows
        ]
    if comparison.only_in_a:
        lines += ["", "only in A: " + ", ".join(comparison.only_in_a)]
    if comparison.only_in_b:
        lines += ["", "only in B: " + ", ".join(comparison.only_in_b)]
    return "\n".join(lines)


def comparison_to_dict(comparison: Comparison) -> dict[str, Any]:
    """JSON form: {"a": run, "b": run, "targets": {name: {figure: {a, b, change, change_pct}}}, "only_in_a", "only_in_b"}."""
    return {
        "a": asdict(comparison.a),
        "b": asdict(comparison.b),
        "targets": {
            name: {c.figure: {"a": c.a, "b": c.b, "change": c.change, "change_pct": c.change_pct} for c in changes}
            for name, changes in comparison.targets.items()
        },
        "only_in_a": comparison.only_in_a,
        "only_in_b": comparison.only_in_b,
        "renamed": dict(comparison.renamed),
    }


def main_compare(a: Path, b: Path, as_json: bool, fail_on: list[str] | None = None, rename: list[str] | None = None) -> int:
    """The CLI command: print the comparison (and the regression gate with `fail_on`); exit 1 when a
    gate rule fails beyond the noise, 2 when a run cannot be read, a rule or rename is malformed, or
    the gate would judge nothing (no target in both runs)."""
    from inferload.results.regression import format_gate, gate, parse_rule
    from inferload.results.repeats import read_repeats

    try:
        rules = [parse_rule(text) for text in fail_on or []]
        renames = parse_renames(rename or [])
        repeated = read_repeats(Path(a)) is not None or read_repeats(Path(b)) is not None
        if not repeated:
            comparison = compare_runs(a, b, renames)
            print(json.dumps(comparison_to_dict(comparison), indent=2) if as_json else format_comparison(comparison))
        elif not rules:
            print("A or B is a repeated run (repeat.json): compare them with --fail-on FIGURE:±P%", file=sys.stderr)
            return EXIT_USAGE
        if not rules:
            return 0
        results, note = gate(Path(a), Path(b), rules, renames)
    except (ResultsError, InferloadError) as exc:
        print(f"inferload compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(format_gate(results, note), file=sys.stderr if as_json and not repeated else sys.stdout)
    return 1 if any(result.failed for result in results) else 0
