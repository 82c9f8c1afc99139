"""`inferload compare A B`: two runs' summary.json side by side, with the change B − A per figure.

A and B are results folders or summary.json paths. Targets are matched by name, or by
``--rename OLD=NEW`` (A's target OLD is B's NEW); those in only one run are listed. A streamed
target (a decoupled model) gets its stream figures too. The relative change is (B − A) / A in %:
0 when both are 0, n/a when A is 0 and B is not, or when either figure is missing (null latency
after 0 successes, no server side).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.results.figures import (
    COMPARE,
    GENERATION,
    GENERATION_OPEN_LOOP,
    GENERATION_SERVER,
    GOODPUT,
    STREAMING,
    Figure,
    stream_figures_of,
    value_at,
)
from inferload.results.files import WINDOWS_NAME, ResultsError, TargetSeries, read_summary, read_windows, summary_file
from inferload.results.repeats import GATED, Interval, change_interval, read_repeats
from inferload.results.schema import RunSummary

# `inferload compare A B --fail-on p99:+10%`: a regression gate that fails only beyond the noise.
#
# A rule ``FIGURE:±P%`` fails when the whole 95 % interval of the change B − A, relative to A, lies
# beyond P % in the rule's direction: ``p99:+10%`` fails when even the interval's low end is more than
# 10 % above A; ``throughput:-5%`` when even its high end is more than 5 % below. A change whose
# interval still reaches the threshold is reported as "within the noise" and passes. Figures:
# ``p50, p90, p95, p99, p999, mean, throughput, error_rate``. Samples: `inferload.results.repeats`.
#
# Targets are paired by name, or by ``renames`` (A's name -> B's: ``--rename OLD=NEW``). A gate that
# would judge nothing (no target in both runs: a renamed target) is a usage error, never a pass:
# ``gate`` raises ``InferloadError`` (exit 2); a target found in one run only is named, not gated.
_RULE = re.compile(r"^(?P<figure>[a-z0-9_]+):(?P<sign>[+-])(?P<pct>\d+(\.\d+)?)%?$")


@dataclass(frozen=True)
class GateRule:
    figure: str
    pct: float  # signed: +10 means "fail when it rose by more than 10 %"

    @property
    def text(self) -> str:
        return f"{self.figure}:{self.pct:+g}%"


def parse_rule(text: str) -> GateRule:
    match = _RULE.match(text.strip())
    if match is None or match["figure"] not in GATED:
        raise InferloadError(f"--fail-on: expected FIGURE:+P% or FIGURE:-P% with FIGURE one of {', '.join(GATED)}; got {text!r}")
    pct = float(match["pct"])
    if pct <= 0:
        raise InferloadError(f"--fail-on {text!r}: the threshold must be above 0 %")
    return GateRule(match["figure"], pct if match["sign"] == "+" else -pct)


@dataclass(frozen=True)
class RunFigures:
    """One side of a comparison: a figure's value per target and its samples."""

    folder: Path
    values: dict[str, dict[str, float | None]]  # target -> gate -> value
    samples: dict[str, dict[str, list[float]]]  # target -> gate -> samples
    kind: str  # "repetitions" | "windows"


def read_run_figures(folder: Path) -> RunFigures:
    """A results folder's figures: a repeated run (repeat.json) or one run (summary.json + windows.csv)."""
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    repeats = read_repeats(folder)
    values: dict[str, dict[str, float | None]] = {}
    samples: dict[str, dict[str, list[float]]] = {}
    if repeats is not None:
        for target, figures in repeats["targets"].items():
            values[target] = {gate: figures[gate]["mean"] for gate in GATED if gate in figures}
            samples[target] = {gate: list(figures[gate]["values"]) for gate in GATED if gate in figures}
        return RunFigures(folder, values, samples, "repetitions")
    summary = read_summary(folder)
    windows = read_windows(folder / WINDOWS_NAME).by_target
    for target, figures in summary.targets.items():
        values[target] = {}
        samples[target] = {}
        series = windows.get(target)
        for gate, (path, column) in GATED.items():
            value = value_at(figures, path)
            values[target][gate] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            samples[target][gate] = _window_samples(series, gate, column) if series is not None else []
    return RunFigures(folder, values, samples, "windows")


def _window_samples(series: TargetSeries, gate: str, column: str | None) -> list[float]:
    """The figure in each steady window (the last, cut short by the stop, left out); [] when windows.csv
    does not carry it (read_windows keeps rps, p50, p95, p99, requests and failures)."""
    steady = [i for i, phase in enumerate(series.phase) if phase == "steady"][:-1]
    if column is None:  # error_rate: failures / requests per window
        return [(series.failures[i] or 0.0) / (series.requests[i] or 1.0) for i in steady if series.requests[i]]
    column_values: list[float | None] | None = getattr(series, column, None)
    if column_values is None:
        return []
    return [value for i in steady if (value := column_values[i]) is not None]


@dataclass(frozen=True)
class GateResult:
    target: str
    rule: GateRule
    a: float | None
    b: float | None
    interval: Interval | None
    failed: bool
    verdict: str


def judge(rule: GateRule, target: str, a: RunFigures, b: RunFigures, b_target: str | None = None) -> GateResult:
    """One rule on A's ``target`` against B's ``b_target`` (default: the same name)."""
    other = b_target or target
    label = target if other == target else f"{target} (B: {other})"
    value_a, value_b = a.values[target].get(rule.figure), b.values[other].get(rule.figure)
    if value_a is None or value_b is None:
        return GateResult(label, rule, value_a, value_b, None, False, "not measured in both runs: not judged")
    interval = change_interval(value_a, value_b, a.samples[target].get(rule.figure, []), b.samples[other].get(rule.figure, []))
    if interval is None or interval.low_pct is None or interval.high_pct is None:
        return GateResult(label, rule, value_a, value_b, interval, False, "too few samples for an interval: not judged")
    beyond = interval.low_pct > rule.pct if rule.pct > 0 else interval.high_pct < rule.pct
    span = f"{interval.change_pct:+.1f} % (95 % interval {interval.low_pct:+.1f} .. {interval.high_pct:+.1f} %)"
    verdict = f"{span}: beyond {rule.pct:+g} %, FAIL" if beyond else f"{span}: within the noise or the threshold, pass"
    return GateResult(label, rule, value_a, value_b, interval, beyond, verdict)


def target_pairs(a_targets: list[str], b_targets: list[str], renames: Mapping[str, str]) -> list[tuple[str, str]]:
    """(A's name, B's name) of each target in both runs, in A's order; InferloadError when a rename
    names a target that is not there."""
    for old, new in renames.items():
        if old not in a_targets:
            raise InferloadError(f"--rename {old}={new}: A has no target {old!r} (it has: {', '.join(a_targets) or 'none'})")
        if new not in b_targets:
            raise InferloadError(f"--rename {old}={new}: B has no target {new!r} (it has: {', '.join(b_targets) or 'none'})")
    return [(name, renames.get(name, name)) for name in a_targets if renames.get(name, name) in b_targets]


def gate(
    a_folder: Path, b_folder: Path, rules: list[GateRule], renames: Mapping[str, str] | None = None
) -> tuple[list[GateResult], str]:
    """Every rule for every target in both runs; and a note on where the samples came from (and on
    targets found in one run only). InferloadError when no target is in both: nothing to gate."""
    a, b = read_run_figures(a_folder), read_run_figures(b_folder)
    pairs = target_pairs(list(a.values), list(b.values), renames or {})
    if not pairs:
        raise InferloadError(
            f"--fail-on: A and B have no target in common (A: {', '.join(a.values) or 'none'};"
            f" B: {', '.join(b.values) or 'none'}), so the gate would judge nothing; pair a renamed target"
            " with --rename A_NAME=B_NAME"
        )
    results = [judge(rule, old, a, b, new) for old, new in pairs for rule in rules]
    note = f"noise from A's {a.kind} and B's {b.kind}" + (
        "" if a.kind == b.kind == "repetitions" else " (windows within one run: repetitions, --repeat N, are stronger evidence)"
    )
    only_a = [name for name in a.values if name not in {old for old, _ in pairs}]
    only_b = [name for name in b.values if name not in {new for _, new in pairs}]
    if only_a or only_b:
        found = "; ".join(
            part
            for part in (f"only in A: {', '.join(only_a)}" if only_a else "", f"only in B: {', '.join(only_b)}" if only_b else "")
            if part
        )
        note += f"; not gated, {found} (--rename A_NAME=B_NAME pairs a renamed target)"
    return results, note


def format_gate(results: list[GateResult], note: str) -> str:
    lines = [f"regression gate ({note}):"]
    for result in results:
        lines.append(f"  {result.target} {result.rule.text}: {result.verdict}")
    return "\n".join(lines)


EXIT_USAGE = 2


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on (escape sequences, carriage returns,
    bells) written as its Python escape; line breaks kept. Names in a results folder are the
    server's and the scenario's, not ours to let drive the user's terminal."""
    return "\n".join(
        "".join(char if char.isprintable() or char == "\t" else repr(char)[1:-1] for char in line) for line in text.split("\n")
    )


# (name in the table and the JSON, path in a summary target, format): the compare view of
# inferload.results.figures
FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = tuple((f.name, f.path, f.compare_spec) for f in COMPARE)


def _shown(a_target: Any, b_target: Any) -> tuple[Figure, ...]:
    """The figures compared for one target: `COMPARE`, and `stream_figures_of` the two runs' targets."""
    return COMPARE + stream_figures_of(a_target, b_target)


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
    from inferload.results.compare import target_pairs

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
    specs = {
        f.name: f.compare_spec for f in COMPARE + STREAMING + GENERATION + GENERATION_OPEN_LOOP + GOODPUT + GENERATION_SERVER
    }
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
    the gate would judge nothing (no target in both runs). Both runs are read whole before anything
    is printed: a file that cannot be read is the one line said."""
    from inferload.results.compare import format_gate, gate, parse_rule
    from inferload.results.repeats import read_repeats

    try:
        rules = [parse_rule(text) for text in fail_on or []]
        renames = parse_renames(rename or [])
        repeated = read_repeats(Path(a)) is not None or read_repeats(Path(b)) is not None
        if repeated and not rules:
            print("A or B is a repeated run (repeat.json): compare them with --fail-on FIGURE:±P%", file=sys.stderr)
            return EXIT_USAGE
        comparison = None if repeated else compare_runs(a, b, renames)
        gated = gate(Path(a), Path(b), rules, renames) if rules else None
    except (ResultsError, InferloadError) as exc:
        print(terminal_safe(f"inferload compare: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    if comparison is not None:
        print(json.dumps(comparison_to_dict(comparison), indent=2) if as_json else terminal_safe(format_comparison(comparison)))
    if gated is None:
        return 0
    results, note = gated
    print(terminal_safe(format_gate(results, note)), file=sys.stderr if as_json and not repeated else sys.stdout)
    return 1 if any(result.failed for result in results) else 0
