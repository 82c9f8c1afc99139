"""inferload's own Locust options (each with its environment variable), and reading them back.

`add_arguments` is Locust's `init_command_line_parser` hook; `scenario_path_from_argv` reads
`--scenario` before Locust parses anything (the locustfile needs the scenario to define its
classes); `RunOptions.from_parsed` is what a run takes from Locust's parsed options.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferload.observe.influx_export import add_influx_arguments

logger = logging.getLogger(__name__)

SCENARIO_ENV = "INFERLOAD_SCENARIO"
RESULTS_DIR_ENV = "INFERLOAD_RESULTS_DIR"
RUN_ID_ENV = "INFERLOAD_RUN_ID"
COLD_STARTS_ENV = "INFERLOAD_COLD_STARTS"
SKIP_START_CHECKS_ENV = "INFERLOAD_SKIP_START_CHECKS"
STOP_WHEN_STABLE_ENV = "INFERLOAD_STOP_WHEN_STABLE"
RAMP_HOLD_ENV = "INFERLOAD_RAMP_HOLD"


def scenario_path_from_argv(argv: list[str]) -> str | None:
    """The `--scenario` value (or $INFERLOAD_SCENARIO), read before Locust parses its options."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--scenario")
    known, _ = parser.parse_known_args(argv)
    return known.scenario or os.environ.get(SCENARIO_ENV)


def add_arguments(parser: Any) -> None:
    """Locust's `init_command_line_parser` hook: inferload's own options.

    Also makes Locust's web UI listen on this machine only unless `--web-host` (or
    LOCUST_WEB_HOST) says otherwise: the inference servers bind loopback, and so does the UI.
    """
    parser.set_defaults(web_host="127.0.0.1")
    group = parser.add_argument_group("inferload")
    group.add_argument("--scenario", help="inferload scenario YAML file", env_var=SCENARIO_ENV)
    group.add_argument(
        "--results-dir",
        help="folder for summary.json and windows.csv (default results/<run id>)",
        env_var=RESULTS_DIR_ENV,
    )
    group.add_argument("--run-id", help="run identifier (default <scenario>-<UTC time>)", env_var=RUN_ID_ENV)
    group.add_argument(
        "--cold-starts",
        help="JSON file: target name -> cold start seconds, recorded in summary.json",
        env_var=COLD_STARTS_ENV,
    )
    group.add_argument(
        "--requests-csv",
        action="store_true",
        default=False,
        help="also write every request (time, target, latency, outcome, worker) to requests.csv in the results folder",
    )
    group.add_argument(
        "--skip-start-checks",
        action="store_true",
        default=False,
        env_var=SKIP_START_CHECKS_ENV,
        help="send load without checking first that every target's server answers and serves its model as the"
        " scenario sends it (by default a problem there exits 2 before any load)",
    )
    group.add_argument(
        "--stop-when-stable",
        metavar="WINDOWS,PERCENT",
        default=None,
        env_var=STOP_WHEN_STABLE_ENV,
        help="end the run once WINDOWS consecutive steady windows of every target agree within ±PERCENT on"
        " throughput and p99 (e.g. 3,10); the scenario's duration stays the upper bound",
    )
    group.add_argument(
        "--ramp-hold",
        metavar="SPEC",
        default=None,
        env_var=RAMP_HOLD_ENV,
        help="open loop, one target: raise the rate a step per window while the window meets the SLO, step back at"
        " the first that breaks it and hold for the sustain period; SPEC e.g. p99_ms=50,step=10,sustain=30"
        " (docs/tuning.md); writes ramp_hold.json",
    )
    group.add_argument(
        "--no-report",
        action="store_true",
        default=False,
        help="write summary.json and windows.csv but not report.html (sweep steps: the sweep draws its own)",
    )
    add_influx_arguments(parser)


@dataclass(frozen=True)
class RunOptions:
    """inferload's options as Locust parsed them (None: not given)."""

    run_id: str | None = None
    results_dir: Path | None = None
    cold_starts: Path | None = None
    requests_csv: bool = False
    skip_start_checks: bool = False
    #: ``--stop-when-stable``: the rule as given (WINDOWS,PERCENT), checked by `run.stable_stop`
    stop_when_stable: str | None = None
    #: ``--no-report``: no report.html (its plots are most of the time a run takes to finish)
    no_report: bool = False
    #: ``--ramp-hold``: the spec as given, read by `run.ramp_hold`
    ramp_hold: str | None = None

    @classmethod
    def from_parsed(cls, options: Any) -> RunOptions:
        """From Locust's `environment.parsed_options` (a Namespace, or None in a bare Environment)."""
        results_dir = getattr(options, "results_dir", None)
        cold_starts = getattr(options, "cold_starts", None)
        return cls(
            run_id=getattr(options, "run_id", None) or None,
            results_dir=Path(results_dir) if results_dir else None,
            cold_starts=Path(cold_starts) if cold_starts else None,
            requests_csv=bool(getattr(options, "requests_csv", False)),
            skip_start_checks=bool(getattr(options, "skip_start_checks", False)),
            stop_when_stable=getattr(options, "stop_when_stable", None) or None,
            no_report=bool(getattr(options, "no_report", False)),
            ramp_hold=getattr(options, "ramp_hold", None) or None,
        )


def read_cold_starts(path: Path | None) -> dict[str, float | None]:
    """--cold-starts: target name -> seconds (or null); {} (and a warning) when unreadable."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
        return {str(k): (None if v is None else float(v)) for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        logger.warning("cannot read cold starts from %s: %s", path, exc)
        return {}
