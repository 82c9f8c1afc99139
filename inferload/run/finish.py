"""The end of a run: its summary built and written (somewhere that works), report.html, the
console table and SLO checks, and the exit code."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.measure.run_record import RunRecord
from inferload.results.figures import format_table, value_at
from inferload.results.model import RunSummary
from inferload.results.report import write_report
from inferload.results.slo import format_checks
from inferload.results.summary import RunFacts, build_summary, write_results
from inferload.scenario.model import Scenario

logger = logging.getLogger(__name__)


def write_with_fallback(results_dir: Path, summary: RunSummary, record: RunRecord) -> Path:
    """Write the results into `results_dir`, or into a new temporary folder when that fails
    (what was measured is kept); the folder written."""
    try:
        write_results(results_dir, summary, record)
    except OSError as exc:
        fallback = Path(tempfile.mkdtemp(prefix=f"inferload-{summary.run_id[:100]}-"))  # a file name has <= 255 bytes
        logger.error("cannot write results to %s (%s); writing them to %s instead", results_dir, exc, fallback)
        write_results(fallback, summary, record)
        return fallback
    return results_dir


def finish_run(scenario: Scenario, record: RunRecord, facts: RunFacts, results_dir: Path, report: bool = True) -> RunSummary:
    """Build, write and print a run's results (`report`: report.html too); the summary."""
    summary = build_summary(scenario, record, facts)
    results_dir = write_with_fallback(results_dir, summary, record)
    try:
        if report:
            print(f"report: {write_report(results_dir)}")
    except (InferloadError, OSError) as exc:
        logger.warning("report.html not written: %s", exc)
    print(f"\ninferload results ({summary.run_id}, steady state, warm-up of {scenario.warmup:g} s excluded):")
    if summary.interrupted:
        print("the run was interrupted: the figures cover the part that ran")
    print(format_table(summary.targets))
    print(format_checks(summary.slo.checks))
    print(f"results written to {results_dir}", flush=True)
    return summary


def exit_code(summary: RunSummary | Mapping[str, Any]) -> int | None:
    """1 on a breached SLO or a target that never answered; 0 when failures stayed within an
    error-rate SLO; None leaves Locust's own rule (1 when anything failed).

    `summary`: a `RunSummary`, or its JSON form (only `targets` and `slo` are read)."""
    if not value_at(summary, ("slo", "passed")):
        return 1
    targets: Mapping[str, Any] = value_at(summary, ("targets",)) or {}
    counts = {name: (value_at(t, ("requests",)) or 0, value_at(t, ("failures",)) or 0) for name, t in targets.items()}
    silent = [name for name, (requests, failures) in counts.items() if requests and requests == failures]
    never_sent = [name for name, (requests, _) in counts.items() if not requests]
    if silent or never_sent:
        for name in silent:
            logger.error("target %r: every request failed", name)
        return 1
    with_failures = {name for name, (_, failures) in counts.items() if failures}
    checks = value_at(summary, ("slo", "checks")) or []
    covered = {value_at(c, ("target",)) for c in checks if value_at(c, ("metric",)) == "error_rate"}
    if with_failures and with_failures <= covered:
        return 0
    return None
