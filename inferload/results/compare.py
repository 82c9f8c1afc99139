"""`inferload compare A B`: two runs' summary.json side by side, with the change B − A per figure.

A and B are results folders or summary.json paths. Targets are matched by name; those in only
one run are listed. The relative change is (B − A) / A in %: 0 when both are 0, n/a when A is 0
and B is not, or when either figure is missing (null latency after 0 successes, no server side).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inferload.results.figures import COMPARE
from inferload.results.model import RunSummary
from inferload.results.summary_file import ResultsError, read_summary, summary_file

EXIT_USAGE = 2

# (name in the table and the JSON, path in a summary target, format): the compare view of
# inferload.results.figures
FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = tuple((f.name, f.path, f.compare_spec) for f in COMPARE)


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
    targets: dict[str, list[FigureChange]]  # targets in both runs, in A's order
    only_in_a: list[str]
    only_in_b: list[str]


def change_of(figure: str, a: float | None, b: float | None) -> FigureChange:
    if a is None or b is None:
        return FigureChange(figure, a, b, None, None)
    change = b - a
    if a == 0:
        pct = 0.0 if b == 0 else None
    else:
        pct = change / abs(a) * 100.0
    return FigureChange(figure, a, b, change, pct)


def compare_summaries(a: RunSummary, b: RunSummary, a_path: str = "A", b_path: str = "B") -> Comparison:
    """Compare two loaded summaries (pure)."""
    a_targets, b_targets = a.targets, b.targets
    both = [name for name in a_targets if name in b_targets]
    return Comparison(
        a=RunInfo(a_path, a.run_id, a.scenario),
        b=RunInfo(b_path, b.run_id, b.scenario),
        targets={name: [change_of(f.name, f.value(a_targets[name]), f.value(b_targets[name])) for f in COMPARE] for name in both},
        only_in_a=[name for name in a_targets if name not in b_targets],
        only_in_b=[name for name in b_targets if name not in a_targets],
    )


def compare_runs(a_dir: Path, b_dir: Path) -> Comparison:
    """Read both runs (folders or summary.json paths) and compare them; ResultsError if unreadable."""
    return compare_summaries(
        read_summary(Path(a_dir)), read_summary(Path(b_dir)), str(summary_file(Path(a_dir))), str(summary_file(Path(b_dir)))
    )


def _number(value: float | None, spec: str, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return format(value, ("+" if sign else "") + spec)


def format_comparison(comparison: Comparison) -> str:
    """A plain text table per target in both runs, then the targets found in only one."""
    specs = {label: spec for label, _, spec in FIGURES}
    lines = [
        f"A: {comparison.a.path} (run {comparison.a.run_id or '?'}, scenario {comparison.a.scenario or '?'})",
        f"B: {comparison.b.path} (run {comparison.b.run_id or '?'}, scenario {comparison.b.scenario or '?'})",
    ]
    if not comparison.targets:
        lines += ["", "no target is in both runs"]
    for name, changes in comparison.targets.items():
        rows = [("figure", "A", "B", "B - A", "change %")]
        for c in changes:
            spec = specs[c.figure]
            pct = "n/a" if c.change_pct is None else f"{c.change_pct:+.1f} %"
            rows.append((c.figure, _number(c.a, spec), _number(c.b, spec), _number(c.change, spec, sign=True), pct))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["", f"target: {name}"]
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
    }


def main_compare(a: Path, b: Path, as_json: bool, fail_on: list[str] | None = None) -> int:
    """The CLI command: print the comparison (and the regression gate with `fail_on`); exit 1 when a
    gate rule fails beyond the noise, 2 when a run cannot be read or a rule is malformed."""
    from inferload.errors import InferloadError
    from inferload.results.regression import format_gate, gate, parse_rule
    from inferload.results.repeats import read_repeats

    try:
        rules = [parse_rule(text) for text in fail_on or []]
        repeated = read_repeats(Path(a)) is not None or read_repeats(Path(b)) is not None
        if not repeated:
            comparison = compare_runs(a, b)
            print(json.dumps(comparison_to_dict(comparison), indent=2) if as_json else format_comparison(comparison))
        elif not rules:
            print("A or B is a repeated run (repeat.json): compare them with --fail-on FIGURE:±P%", file=sys.stderr)
            return EXIT_USAGE
        if not rules:
            return 0
        results, note = gate(Path(a), Path(b), rules)
    except (ResultsError, InferloadError) as exc:
        print(f"inferload compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(format_gate(results, note), file=sys.stderr if as_json and not repeated else sys.stdout)
    return 1 if any(result.failed for result in results) else 0
