"""Between a sweep's steps and the capacity search: a step as the search's evidence (its steady
windows' histograms read back from histograms.jsonl, the hard constraints it broke), and the search's
answer as sweep.json's `capacity` object and the console's lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from inferload.errors import InferloadError
from inferload.results.files import ResultsError, read_summary
from inferload.results.histograms import ALL, read_lines
from inferload.results.schema import TargetSummary
from inferload.traffic.ramp_hold import RAMP_HOLD_JSON, RampHoldRule, rule_spec
from inferload.tune.capacity import (
    GOODPUT,
    HARD_NAMES,
    PERCENTILE_OF,
    RATE,
    USERS,
    Bounds,
    CapacityAnswer,
    Level,
    LevelUnit,
    RunEvidence,
    judge,
)
from inferload.tune.capacity_stats import WindowHistogram, window_histogram
from inferload.tune.step import StepPlan, StepResult
from inferload.tune.stop_rules import (
    StopRules,
    cpu_bound,
    memory_limit,
    queue_growth,
    saturation,
    senders_were_busy,
    too_many_unsent,
)

# `inferload sweep --ramp-hold`: capacity in one run (`inferload.run.ramp_hold` does the ramping inside
# the run): its step plan, and its answer read back from the run's ramp_hold.json, with the hold's
# percentiles and their 95 % intervals from the hold's own windows (histograms.jsonl), judged by the
# capacity search's rule (`inferload.tune.capacity`).
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


#: how the decision is made, in one line (sweep.json's capacity.method)
METHOD = (
    "each rate's percentile with a 95 % interval (bootstrap over its steady windows, binomial rank, widened for few"
    " windows); pass only under the bound, fail only over it; latency fitted nondecreasing in the rate (isotonic);"
    " the boundary's interval from the bootstrap's refitted curves"
)


def bounds_of(rules: StopRules) -> Bounds:
    """The SLO's latency bounds and the error bound (the tighter of --max-error-rate and the SLO's)."""
    latency = {key: value for key, value in rules.slo.items() if key in PERCENTILE_OF}
    return Bounds(latency, min(rules.max_error_rate, rules.slo.get("error_rate", 1.0)), rules.slo.get("min_goodput_pct"))


def min_requests(bounds: Bounds) -> int:
    """Requests a step needs before its highest percentile can pass: 5 / (1 - p) (500 for a p99); as
    many for a goodput bound of p % (its share of misses has an interval under 1 - p only then)."""
    shares = [PERCENTILE_OF[key] / 100.0 for key in bounds.latency_ms]
    if bounds.min_goodput_pct is not None and bounds.min_goodput_pct < 100:
        shares.append(bounds.min_goodput_pct / 100.0)
    return max((math.ceil(5.0 / (1.0 - share)) for share in shares), default=0)


def steady_histograms(results: Path, target: str) -> list[WindowHistogram]:
    """The target's complete steady windows (merged over workers) from histograms.jsonl, oldest first;
    the last, cut by the stop, left out (as windows.csv's steady windows in `inferload.tune.step`)."""
    try:
        summary = read_summary(results)
        steady_from = datetime.fromisoformat(summary.started_at).timestamp() + float(summary.warmup_s)
        lines = [
            line
            for line in read_lines(results)
            if line["worker"] == ALL and line["target"] == target and float(line["start"]) >= steady_from - 1e-6
        ]
    except (ResultsError, OSError) as error:
        raise InferloadError(f"{results}: the step's histograms cannot be read: {error}") from None
    lines.sort(key=lambda line: float(line["start"]))
    return [window_histogram(line) for line in lines[:-1]]


def evidence_of(step: StepResult, target: str, rules: StopRules) -> RunEvidence:
    """A finished step as the search's evidence."""
    broken = []
    for name, reason in (
        ("saturated", saturation(step, rules)),
        ("queue", queue_growth(step, rules)),
        ("memory", memory_limit(step, rules)),
    ):
        if reason:
            broken.append((name, reason))
    windows = steady_histograms(Path(step.results_dir), target)
    invalid = generator_lag(step, rules) if windows else "no complete steady window was measured"
    return RunEvidence(step.level, tuple(windows), tuple(broken), cpu_bound(step, rules), invalid, step.step, step.achieved_rps)


def generator_lag(step: StepResult, rules: StopRules) -> str | None:
    """The generator sent late while senders were free, by more than --max-send-lag and a quarter of the
    tightest latency bound: its latency, counted from the intended send times, is the client's stall
    as much as the server's queue (on a busy machine a stall of a few hundred ms hits one run in ten)."""
    if step.send_lag_p99_ms is None or too_many_unsent(step, rules) or senders_were_busy(step):
        return None
    if queue_growth(step, rules) or (step.achieved_rps is not None and step.achieved_rps < 0.95 * step.level):
        return None  # the server did not keep up: its queue, not the client, made the arrivals late
    latency = [bound for key, bound in rules.slo.items() if key in PERCENTILE_OF]
    allowed = max(rules.max_send_lag_p99_ms, min(latency, default=0.0) / 4.0)
    if step.send_lag_p99_ms <= allowed:
        return None
    return f"send lag p99 {step.send_lag_p99_ms:.1f} ms > {allowed:g} ms while senders were free"


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)


def _metric_figures(level: Level) -> dict[str, float | None]:
    """Each bound's figure with its interval (`p99_ms`, `p99_ms_low`, `p99_ms_high`, ...; None:
    unbounded, too few requests); the goodput bound as the good share, `goodput_pct` [low, high]."""
    figures: dict[str, float | None] = {}
    for metric in level.metrics:
        if metric.key == GOODPUT:  # held as the share missed; said as the share good
            figures["goodput_pct"] = None if metric.estimate is None else _finite(100.0 * (1.0 - metric.estimate))
            figures["goodput_pct_low"] = _finite(100.0 * (1.0 - metric.high))
            figures["goodput_pct_high"] = _finite(100.0 * (1.0 - metric.low))
            continue
        figures[metric.key] = _finite(metric.estimate)
        figures[f"{metric.key}_low"] = _finite(metric.low)
        figures[f"{metric.key}_high"] = _finite(metric.high)
    return figures


def level_key(unit: LevelUnit) -> str:
    """A capacity level's key in sweep.json: "rate" (req/s) or "users"."""
    return "users" if unit.whole else "rate"


def _level_record(level: Level, unit: LevelUnit) -> dict[str, Any]:
    record: dict[str, Any] = {
        level_key(unit): level.rate,
        "steps": list(level.steps),
        "windows": level.windows,
        "requests": level.requests,
        "verdict": level.verdict,
        **_metric_figures(level),
    }
    for key, value in level.fitted_ms.items():
        record[f"fitted_{key}"] = _finite(value)
    record["broken"] = {name: {"share": share, "reason": why} for name, (share, why) in level.broken.items()}
    return record


def capacity_record(answer: CapacityAnswer, rules: StopRules, precision_pct: float, unit: LevelUnit = RATE) -> dict[str, Any]:
    """sweep.json's `capacity`: the keys it always had (max_rps, first_failing_rps, precision_pct, slo,
    limited_by_generator) and the interval, binding constraint, cliff, levels and verification. A search
    over users names its levels in `unit` ("users") and its keys with `_users` for `_rps`
    (max_users, first_failing_users, estimate_users, interval_users; each level's `users` for `rate`)."""
    k = unit.key
    judgement = answer.judgement
    boundary = judgement.boundary
    passing, failing = boundary.highest_pass_rps, boundary.first_over_rps
    high = _finite(boundary.high_rps)
    width = boundary.width_pct
    generator = answer.end.reason in ("generator", "ceiling")
    binding: dict[str, Any] | None = None
    if generator:
        binding = {"constraint": "generator", "words": answer.end.words}
    elif boundary.binding is not None:
        binding = {"constraint": boundary.binding, "words": boundary.binding_words}
    verification = answer.verification
    return {
        "unit": unit.name,
        f"max_{k}": passing,
        f"first_failing_{k}": failing,
        "precision_pct": None if passing is None or failing is None else round((failing - passing) / passing * 100.0, 2),
        "slo": rules.slo,
        "limited_by_generator": generator,
        f"estimate_{k}": _finite(boundary.estimate_rps),
        f"interval_{k}": [_finite(boundary.low_rps), high],
        "interval_pct": None if width is None else round(width, 2),
        # never "reached" beside a verification that says the answer is elsewhere
        "precision_reached": width is not None
        and width <= precision_pct + 1e-9
        and (verification is None or verification.verified is not False),
        "ended": {"reason": answer.end.reason, "words": answer.end.words},
        "bounds": bounds_of(rules).words(),
        "binding": binding,
        "cliff": boundary.cliff,
        "levels": [_level_record(level, unit) for level in judgement.levels],
        "verification": None
        if verification is None
        else {
            "verified": verification.verified,
            "words": verification.words(),
            "runs": [
                {
                    "side": run.side,
                    "factor": round(run.factor, 3),
                    level_key(unit): run.level.rate,
                    "step": run.level.steps[0] if run.level.steps else None,
                    "verdict": run.level.verdict,
                    **_metric_figures(run.level),
                    "words": run.words(),
                }
                for run in verification.runs
            ],
        },
        "method": METHOD,
        # the verification went the other way: the interval above takes its runs into the fit;
        # the search's own answer, which the verification was made around, is `searched`
        "refit": answer.refit,
        "searched": None
        if answer.searched is None
        else {
            f"estimate_{k}": _finite(answer.searched.estimate_rps),
            f"interval_{k}": [_finite(answer.searched.low_rps), _finite(answer.searched.high_rps)],
        },
    }


#: the summary's percentiles, each with the share (%) of requests at or under it
_PERCENTILES = ((50.0, "p50"), (90.0, "p90"), (95.0, "p95"), (99.0, "p99"), (99.9, "p999"))


def goodput_misses(results: Path, target: str, thresholds: dict[str, float], min_goodput_pct: float) -> list[str]:
    """`threshold_misses` of a step's results folder (none when it has no summary of ``target``)."""
    try:
        figures = read_summary(results).targets[target]
    except (ResultsError, KeyError):
        return []
    return threshold_misses(figures, thresholds, min_goodput_pct)


def threshold_misses(figures: TargetSummary, thresholds: dict[str, float], min_goodput_pct: float) -> list[str]:
    """Which goodput thresholds a step's requests broke, in words (worst first): each threshold's
    figure (TTFT: the time to the first content event; TPOT; E2E: the request's latency) over the
    step's steady state at the percentile of the bound's share (90 %: p90), where it is over the
    threshold: with 90 % of requests to be good, a p90 over a threshold alone breaks the bound. When
    none is over there (the misses split between thresholds), at the first higher percentile where
    one is."""
    measured = {
        "ttft_ms": ("TTFT", figures.decoupled.first_response_ms if figures.decoupled else None),
        "tpot_ms": ("TPOT", figures.generation.tpot_ms if figures.generation else None),
        "e2e_ms": ("E2E", figures.latency_ms),
    }
    for share, key in _PERCENTILES:
        if share < min_goodput_pct and key != "p999":
            continue
        over: list[tuple[float, str]] = []
        for name, threshold in thresholds.items():
            label, latency = measured[name]
            value = None if latency is None else getattr(latency, key)
            if value is not None and value > threshold:
                over.append((value / threshold, f"{label} {key} {value:.4g} ms > {threshold:g} ms"))
        if over:
            return [words for _, words in sorted(over, reverse=True)]
    return []


def constraint_words(binding: dict[str, Any] | None) -> str:
    """The binding constraint's name for people."""
    if binding is None:
        return "none found"
    key = binding.get("constraint")
    if key == "generator":
        return "the load generator"
    if key == "error_rate":
        return "errors"
    if key == GOODPUT:
        return "goodput (the share of requests meeting every goodput threshold)"
    if key in HARD_NAMES:
        return HARD_NAMES[key]
    return f"latency ({str(key).removesuffix('_ms')})"


def record_unit(capacity: dict[str, Any]) -> LevelUnit:
    """What a sweep.json `capacity` searched over (one written before its `unit` key: rates)."""
    return USERS if capacity.get("unit") == USERS.name else RATE


def answer_lines(capacity: dict[str, Any]) -> list[str]:
    """The console's lines for a capacity search's answer."""
    unit = record_unit(capacity)
    name, k = unit.name, unit.key
    word = "user count" if unit.whole else "rate"
    low, high = (capacity.get(f"interval_{k}") or [None, None])[:2]
    estimate = capacity.get(f"estimate_{k}")
    lines = []
    if estimate is not None:
        span = f"[{low:g}, {'∞' if high is None else f'{high:g}'}]" if low is not None else ""
        lines.append(f"capacity under the SLO: {estimate:g} {name}, 95 % interval {span} {name}")
    elif capacity.get(f"max_{k}") is not None:
        lines.append(f"capacity under the SLO: at least {capacity[f'max_{k}']:g} {name} (no upper end found)")
    else:
        unsure = sorted(level[level_key(unit)] for level in capacity.get("levels") or [] if level.get("verdict") == "unsure")
        if unsure:
            rates = ", ".join(f"{rate:g}" for rate in unsure)
            lines.append(f"capacity under the SLO: not found: no {word} passed, and {rates} {name} were within the noise of it")
        else:
            lines.append(f"capacity under the SLO: no {word} met it")
    passing, failing = capacity.get(f"max_{k}"), capacity.get(f"first_failing_{k}")
    if passing is not None or failing is not None:
        lines.append(
            f"  measured: {'-' if passing is None else f'{passing:g}'} {name} passed,"
            f" {'-' if failing is None else f'{failing:g}'} {name} is over the SLO"
        )
    binding = capacity.get("binding")
    if binding:
        lines.append(f"  binding constraint: {constraint_words(binding)}: {binding.get('words')}")
    if capacity.get("cliff"):
        lines.append(f"  {capacity['cliff']}")
    ended = capacity.get("ended") or {}
    reached = "reached" if capacity.get("precision_reached") else "NOT reached"
    width = capacity.get("interval_pct")
    wide = "open at one end" if width is None else f"{width:g} % wide"
    lines.append(f"  precision {reached} (the interval is {wide}): {ended.get('words', '')}")
    verification = capacity.get("verification")
    if verification:
        lines.append(f"  {verification['words']}")
    searched = capacity.get("searched")
    if capacity.get("refit") and searched:
        low, high = searched[f"interval_{k}"]
        lines.append(
            f"  the answer above takes the verification runs into its fit (the search alone said {searched[f'estimate_{k}']}"
            f" {name}, [{low}, {'∞' if high is None else high}]): the machine's noise moved between them"
        )
    return lines
