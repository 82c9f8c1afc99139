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
from inferload.results.figures import format_burstiness, format_table, value_at
from inferload.results.report import write_report
from inferload.results.schema import RunSummary
from inferload.results.slo import format_checks
from inferload.results.summary import RunFacts, build_summary, write_results
from inferload.scenario.schema import RunOutline, Scenario

logger = logging.getLogger(__name__)


def write_with_fallback(results_dir: Path, summary: RunSummary, record: RunRecord, fallback: Path | None = None) -> Path:
    """Write the results into `results_dir`, or into a temporary folder when that fails (what was measured
    is kept); the folder written. `fallback`: the folder requests.csv already went on in after the results
    folder failed mid-run: the other results join it there. Each file is written whole or not at all
    (`inferload.paths`), so a failed folder holds no partial file."""
    if fallback is not None:
        logger.error(
            "the results folder %s failed during the run; writing the results to %s with requests.csv", results_dir, fallback
        )
        write_results(fallback, summary, record)
        return fallback
    try:
        write_results(results_dir, summary, record)
    except OSError as exc:
        fallback = Path(tempfile.mkdtemp(prefix=f"inferload-{summary.run_id[:100]}-"))  # a file name has <= 255 bytes
        logger.error("cannot write results to %s (%s); writing them to %s instead", results_dir, exc, fallback)
        write_results(fallback, summary, record)
        return fallback
    return results_dir


def request_types_by_name(stats: Any) -> dict[str, str]:
    """Request name -> the request type(s) Locust's statistics hold it under (``GET``; ``GET+POST``),
    for the summary's entries of requests that are no target (`Locust's RequestStats`)."""
    types: dict[str, set[str]] = {}
    for name, method in getattr(stats, "entries", {}):
        types.setdefault(str(name), set()).add(str(method))
    return {name: "+".join(sorted(methods)) for name, methods in types.items()}


def finish_run(
    scenario: Scenario | RunOutline,
    record: RunRecord,
    facts: RunFacts,
    results_dir: Path,
    report: bool = True,
    fallback: Path | None = None,
) -> RunSummary:
    """Build, write and print a run's results (`report`: report.html too; `fallback`: see
    `write_with_fallback`); the summary."""
    summary = build_summary(scenario, record, facts)
    results_dir = write_with_fallback(results_dir, summary, record, fallback)
    try:
        if report:
            print(f"report: {write_report(results_dir)}")
    except (InferloadError, OSError) as exc:
        logger.warning("report.html not written: %s", exc)
    print(f"\ninferload results ({summary.run_id}, steady state, warm-up of {scenario.warmup:g} s excluded):")
    if summary.interrupted:
        print("the run was interrupted: the figures cover the part that ran")
    print(format_table(summary.targets))
    burstiness = format_burstiness(summary.targets)
    if burstiness is not None:
        print(burstiness)
    print(format_checks(summary.slo.checks))
    print(f"results written to {results_dir}", flush=True)
    return summary


def exit_code(summary: RunSummary | Mapping[str, Any]) -> int:
    """1 on a breached SLO, a target that never answered, or failed requests that no error-rate SLO
    covers; else 0 (failures within an error-rate SLO included).

    Only the run's own figures decide (summary.json: the master's from signed worker reports), never
    Locust's statistics, which any peer of the master's port could once send. `summary`: a
    `RunSummary`, or its JSON form (only `targets` and `slo` are read)."""
    if not value_at(summary, ("slo", "passed")):
        return 1
    targets: Mapping[str, Any] = value_at(summary, ("targets",)) or {}
    counts = {name: (value_at(t, ("requests",)) or 0, value_at(t, ("failures",)) or 0) for name, t in targets.items()}
    silent = [name for name, (requests, failures) in counts.items() if requests and requests == failures]
    never_sent = [name for name, (requests, _) in counts.items() if not requests]
    if silent or never_sent:
        for name in silent:
            logger.error("target %r: every request failed", name)
        for name in never_sent:
            logger.error("target %r: no request in the steady state, so nothing was measured of it", name)
        return 1
    with_failures = {name for name, (_, failures) in counts.items() if failures}
    checks = value_at(summary, ("slo", "checks")) or []
    covered = {value_at(c, ("target",)) for c in checks if value_at(c, ("metric",)) == "error_rate"}
    return 1 if with_failures - covered else 0
