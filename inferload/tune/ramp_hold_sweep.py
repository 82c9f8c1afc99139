"""`inferload sweep --ramp-hold`: capacity in one run (`inferload.run.ramp_hold` does the ramping inside
the run): its step plan, and its answer read back from the run's ramp_hold.json, with the hold's
percentiles and their 95 % intervals from the hold's own windows (histograms.jsonl), judged by the
capacity search's rule (`inferload.tune.capacity`)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.results.histograms import ALL, read_lines
from inferload.results.summary_file import ResultsError
from inferload.traffic.ramp_hold import RAMP_HOLD_JSON, RampHoldRule, rule_spec
from inferload.tune.capacity import Bounds, RunEvidence, judge
from inferload.tune.capacity_stats import window_histogram
from inferload.tune.step import StepPlan, StepResult

#: the ramp may reach this many times the start rate before the run's duration ends it
MAX_GROWTH = 64.0


def ramp_plan(plan: StepPlan, rule: RampHoldRule) -> StepPlan:
    """The one run: long enough to ramp to `MAX_GROWTH` x the start rate and to hold after each step back."""
    steps_up = math.ceil(math.log(MAX_GROWTH) / math.log(1.0 + rule.step_pct / 100.0))
    per_hold = math.ceil(rule.sustain_s / plan.window_s) + rule.settle_windows + 1
    windows = steps_up * (1 + rule.settle_windows) + (rule.max_backoffs + 1) * per_hold + 2
    return replace(plan, ramp_hold=rule_spec(rule), duration_s=plan.warmup_s + windows * plan.window_s)


def ramp_answer(step: StepResult, target: str, bounds: Bounds) -> dict[str, Any]:
    """ramp_hold.json of the run, and the hold judged on its own windows (`hold_level`)."""
    results = Path(step.results_dir)
    path = results / RAMP_HOLD_JSON
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InferloadError(f"{path}: the ramp-and-hold run wrote no answer: {error}") from None
    hold = document.get("hold")
    document["hold_level"] = None
    if hold and hold.get("from") is not None and hold.get("to") is not None:
        try:
            lines = [
                line
                for line in read_lines(results)
                if line["worker"] == ALL
                and line["target"] == target
                and hold["from"] - 1e-6 <= float(line["start"]) < hold["to"] - 1e-6
            ]
        except (ResultsError, OSError) as error:
            raise InferloadError(f"{results}: the run's histograms cannot be read: {error}") from None
        windows = tuple(window_histogram(line) for line in sorted(lines, key=lambda line: float(line["start"])))
        levels = judge([RunEvidence(float(hold["rate"]), windows, step=step.step)], bounds).levels
        if levels:
            level = levels[0]
            document["hold_level"] = {
                "rate": level.rate,
                "windows": level.windows,
                "requests": level.requests,
                "verdict": level.verdict,
                "words": level.words(),
            }
    return document


def ramp_lines(answer: dict[str, Any]) -> list[str]:
    """The console's lines for the mode's answer."""
    held = answer.get("held_rps")
    lines = [f"held under the SLO: {held:g} req/s" if held is not None else "held under the SLO: none"]
    lines.append(f"  {answer.get('ended')}")
    level = answer.get("hold_level")
    if level:
        verdict = {
            "pass": "within the SLO",
            "unsure": "within the noise of the SLO",
            "fail": "over the SLO",
        }.get(level["verdict"], level["verdict"])
        lines.append(f"  the hold's {level['windows']} windows, {level['requests']} requests: {level['words']} ({verdict})")
    rates = [change["rate"] for change in answer.get("changes", [])]
    if rates:
        path = " → ".join(f"{rate:.4g}" for rate in [answer.get("start_rps"), *rates] if rate is not None)
        lines.append(f"  rates (req/s): {path}")
    lines.append("  (one run: a capacity search, --find-max-rps, gives the boundary with its interval)")
    return lines
