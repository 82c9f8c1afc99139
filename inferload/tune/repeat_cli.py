"""`inferload run --repeat N`: the same headless run N times, then each figure's 95 % interval
(repeat.json, `inferload.results.repeats`); a signal or failed start checks end the repetitions."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from inferload.errors import StoppedBeforeStart, UsageError
from inferload.results.repeats import format_repeats, repetition_folder, write_repeats
from inferload.scenario.loader import load_scenario

EXIT_USAGE = 2


def cmd_run_repeated(args: argparse.Namespace, scenario_name: str, run_once: Callable[[argparse.Namespace, Any], int]) -> int:
    """`--repeat N`: N headless runs into repeat-NN/ folders, then repeat.json (each figure's 95 % interval)."""
    if args.repeat < 2:
        raise UsageError(f"--repeat: expected 2 or more runs; got {args.repeat}")
    if not args.headless:
        raise UsageError("--repeat needs --headless (each repetition runs to its end by itself)")
    run_id = args.run_id or f"{scenario_name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    out = args.out or Path("results") / run_id
    folders: list[Path] = []
    codes: list[int] = []
    for index in range(1, args.repeat + 1):
        folder = repetition_folder(out, index)
        print(f"inferload run: repetition {index} of {args.repeat} -> {folder}", flush=True)
        repetition = argparse.Namespace(**{**vars(args), "out": folder, "run_id": f"{run_id}-r{index:02d}", "repeat": 1})
        try:
            code = run_once(repetition, load_scenario(args.scenario))
        except StoppedBeforeStart as stopped:  # a signal between two repetitions: the ones run are kept
            if not folders:
                raise
            print(f"inferload run: {stopped}", flush=True)
            codes.append(stopped.exit_code)
            break
        folders.append(folder)
        codes.append(code)
        if code == EXIT_USAGE or code >= 128:  # start checks failed, or a signal: no more repetitions
            break
    document = write_repeats(out, folders)
    print(format_repeats(document))
    print(f"repeat.json: {out / 'repeat.json'}")
    return next((code for code in codes if code >= 128 or code == EXIT_USAGE), max(codes))
