"""`inferload sweep`: step the load up until the SLO breaks, errors start, throughput plateaus or
the load generator itself is the limit, and say which; or (`--find-max-rps`) search the highest
open-loop rate whose stable p99 and error rate meet the SLO; or (`--find-max-users`) the most
closed-loop users that do.

Each step is its own headless run (`inferload.tune.step`), stability-gated by `--stop-when-stable`.
Every finished step is written to sweep.json/sweep.csv at once (`write_sweep`), so
an interrupted sweep keeps its steps and `--resume` carries on. Signals go to the step that runs
(it stops and writes its results); the sweep then stops and keeps what it measured. A step a signal
cut short (its exit code 128 + N) is partial: it never passes, so it is never the best nor a
capacity, and `--resume` runs it again.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from inferload.errors import UsageError
from inferload.launch.child_processes import ChildProcesses
from inferload.launch.warm_locust import WarmLocust
from inferload.measure.windows import StabilityRule
from inferload.paths import replacing, write_atomically
from inferload.scenario.limits import max_local_workers
from inferload.scenario.loader import load_scenario, scenario_to_dict
from inferload.scenario.schema import Scenario, is_open_loop
from inferload.traffic.ramp_hold import RampHoldRule
from inferload.tune.capacity import GOODPUT, CapacitySearch, RunEvidence, SearchEnd, search_capacity
from inferload.tune.capacity_steps import (
    answer_lines,
    bounds_of,
    capacity_record,
    evidence_of,
    goodput_misses,
    min_requests,
    ramp_answer,
    ramp_lines,
    ramp_plan,
    record_unit,
)
from inferload.tune.step import GpuSource, StepPlan, StepResult, run_log_reason, run_step, server_pid_from_state
from inferload.tune.stop_rules import StopRules, cpu_bound, memory_limit, queue_growth, saturation, slo_breach, stop_reason
from inferload.tune.sweep_report import write_sweep_report

# -- sweep file ------------------------------------------------------------
# sweep.json and sweep.csv: every finished step, written as it completes (an interrupted sweep keeps
# what it measured, and `--resume` carries on from the file).
#
# sweep.json: ``{"version": 1, "plan": {...}, "steps": [...], "stopped": {"rule", "reason"} | null,
# "best": step | null, "knee": step | null, "capacity": {...} | null}``; sweep.csv: one row per step,
# the same keys as a step in sweep.json.


SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
VERSION = 1


def write_sweep(out: Path, document: dict[str, Any]) -> None:
    """sweep.json and sweep.csv, each replaced atomically (a reader never sees half a file)."""
    write_atomically(out / SWEEP_JSON, json.dumps(document, indent=2) + "\n")
    columns = [f.name for f in fields(StepResult)]
    with replacing(out / SWEEP_CSV, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(document["steps"])


def read_sweep(out: Path) -> dict[str, Any] | None:
    """The sweep.json in `out` (None when there is none); InferloadError naming the file when unreadable."""
    path = out / SWEEP_JSON
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: cannot be read to resume: {error}") from None
    if not isinstance(document, dict) or document.get("version") != VERSION or not isinstance(document.get("steps"), list):
        raise UsageError(f"{path}: not a sweep.json of version {VERSION}; use another --out")
    return document


def steps_from(document: dict[str, Any]) -> list[StepResult]:
    """The finished steps of a sweep.json."""
    names = {f.name for f in fields(StepResult)}
    try:
        return [StepResult(**{k: v for k, v in step.items() if k in names}) for step in document["steps"]]
    except TypeError as error:
        raise UsageError(f"{SWEEP_JSON}: a step cannot be read: {error}") from None


@dataclass(frozen=True)
class SweepSettings:
    scenario: Path
    out: Path
    rule: StabilityRule
    rules: StopRules
    #: levels to step through (users or req/s); empty with `capacity`
    levels: tuple[float, ...] = ()
    #: the levels are arrival rates (open loop) rather than users
    open_loop: bool = False
    capacity: CapacitySearch | None = None
    #: the ramp-and-hold mode (one run), instead of levels or a capacity search
    ramp_hold: RampHoldRule | None = None
    #: its start rate (req/s)
    start_rps: float = 50.0
    target: str | None = None
    window_s: float | None = None
    warmup_s: float | None = None
    workers: int = 0
    resume: bool = False
    #: total time bound (s): no step starts that could not finish within it
    budget_s: float | None = None
    #: the server's process for its memory: given, or read from the local servers' state folder
    server_pid: int | None = None
    server_state: Path | None = None
    #: the GPUs' readings (NVML); None or a source that reads nothing: no GPU columns
    gpu: GpuSource | None = field(default=None, compare=False)
    printer: Callable[[str], None] = field(default=print, compare=False)
    #: called with a second signal during a step, once forwarded to it (tune ends at once then)
    on_second_signal: Callable[[int], None] | None = field(default=None, compare=False)
    #: the warm Locust the steps fork from, shared with the caller (tune's candidates); None: the sweep's own
    warm: WarmLocust | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # each step starts `workers` Locust processes: the CLI bounds --workers as it reads it, and a
        # library caller is held to the same bound before any step starts
        if not 0 <= self.workers <= max_local_workers():
            raise UsageError(
                f"workers: expected a whole number from 0 to {max_local_workers()} (4 per CPU core of this machine);"
                f" got {self.workers}"
            )

    def plan_record(self, target: str) -> dict[str, Any]:
        """What identifies the sweep in sweep.json (a resume must match it)."""
        return {
            "scenario": str(self.scenario.resolve()),
            "target": target,
            "mode": ("find-max-users" if self.capacity.unit.whole else "find-max-rps")
            if self.capacity
            else "ramp-hold"
            if self.ramp_hold
            else ("rate" if self.open_loop else "users"),
            "levels": list(self.levels),
            "capacity": search_record(self.capacity) if self.capacity else None,
            **({"ramp_hold": asdict(self.ramp_hold), "start_rps": self.start_rps} if self.ramp_hold else {}),
            "stability": asdict(self.rule),
            "stop_rules": asdict(self.rules),
            "window_s": self.window_s,
            "warmup_s": self.warmup_s,
            "workers": self.workers,
        }


def search_record(search: CapacitySearch) -> dict[str, Any]:
    """A capacity search's settings in sweep.json's plan: a search over users names its unit ("users");
    one over rates is written as before the unit existed, so its earlier sweeps still resume."""
    record = asdict(search)
    unit = record.pop("unit")
    if search.unit.whole:
        record["unit"] = unit["name"]
    return record


def pick_target(scenario: Scenario, name: str | None) -> str:
    names = [t.name for t in scenario.targets]
    if name is None:
        if len(names) != 1:
            raise UsageError(f"the scenario has {len(names)} targets ({', '.join(names)}); choose one with --target")
        return names[0]
    if name not in names:
        raise UsageError(f"--target {name!r} is not in the scenario; its targets are {', '.join(names)}")
    return name


class Sweep:
    """One sweep or capacity search: its plan, its finished steps, and the files that hold them."""

    def __init__(self, settings: SweepSettings) -> None:
        self.settings = settings
        scenario = load_scenario(settings.scenario)
        self.target = pick_target(scenario, settings.target)
        generation = getattr(scenario.target(self.target), "generation", None)
        #: the target's goodput thresholds (ms by ``ttft_ms``, ``tpot_ms``, ``e2e_ms``); None: it sets none
        self.goodput_limits = None if generation is None or generation.goodput is None else generation.goodput.engine_limits()
        if "min_goodput_pct" in settings.rules.slo and self.goodput_limits is None:
            raise UsageError(
                f"--slo min_goodput_pct: target {self.target!r} sets no goodput thresholds;"
                " give it generation.goodput (ttft_ms, tpot_ms, e2e_ms: what a good request meets)"
            )
        rate_search = settings.capacity is not None and not settings.capacity.unit.whole
        open_loop = settings.open_loop or rate_search or settings.ramp_hold is not None
        shape = scenario.shape
        server_pid = settings.server_pid
        if server_pid is None and settings.server_state is not None:
            server_pid = server_pid_from_state(settings.server_state, scenario.target(self.target).server)
        self.plan = StepPlan(
            open_loop=open_loop,
            rule=settings.rule,
            window_s=settings.window_s or scenario.window,
            warmup_s=scenario.warmup if settings.warmup_s is None else settings.warmup_s,
            target=self.target,
            workers=settings.workers,
            max_in_flight=shape.max_in_flight if is_open_loop(shape) else 64,
            server_pid=server_pid,
        )
        self.base = scenario_to_dict(scenario)
        self.record = settings.plan_record(self.target)
        self.steps: list[StepResult] = []
        self.stopped: dict[str, str] | None = None
        self.capacity: dict[str, Any] | None = None
        #: the ramp-and-hold mode's answer (ramp_hold.json and the hold's intervals)
        self.ramp: dict[str, Any] | None = None
        #: the signal that stopped the sweep (its steps' run then ended early and kept its results)
        self.signalled: int | None = None
        self.started = time.monotonic()
        self._load_previous()

    # -- files --------------------------------------------------------------------------
    def _load_previous(self) -> None:
        previous = read_sweep(self.settings.out)
        if previous is None:
            if self.settings.resume:
                raise UsageError(
                    f"--resume: nothing to resume: {self.settings.out}/sweep.json does not exist (drop --resume to start)"
                )
            return
        if not self.settings.resume:
            raise UsageError(f"{self.settings.out}/sweep.json exists: pass --resume to carry on, or another --out")
        if previous.get("plan") != self.record:
            raise UsageError(f"{self.settings.out}/sweep.json is another sweep's (its plan differs); use another --out")
        self.steps = steps_from(previous)
        self.stopped = previous.get("stopped")
        self.capacity = previous.get("capacity")
        self.ramp = previous.get("ramp_hold")
        if self.stopped is not None and self.stopped.get("rule") == "interrupted":  # carry on where the signal came
            self.steps = [step for step in self.steps if not interrupted(step)]  # a cut step runs again
            self.stopped = None
            self.capacity = None

    def save(self) -> None:
        best = self.best()
        knee = knee_step(self.steps)
        document = {
            "version": VERSION,
            "plan": self.record,
            "steps": [s.as_row() for s in self.steps],
            "stopped": self.stopped,
            "best": best.as_row() if best else None,
            "knee": knee.as_row() if knee else None,
            "capacity": self.capacity,
            **({"ramp_hold": self.ramp} if self.settings.ramp_hold else {}),
        }
        write_sweep(self.settings.out, document)
        write_sweep_report(self.settings.out, document)

    # -- steps --------------------------------------------------------------------------
    def passes(self, step: StepResult) -> bool:
        """Meets the SLO and the error bound, and the generator was not the limit."""
        rules = self.settings.rules
        if step.requests is None or step.exit_code == 2 or interrupted(step):
            return False
        if slo_breach(step, rules.slo) is not None:
            return False
        if step.error_rate is None or step.error_rate > rules.max_error_rate or memory_limit(step, rules):
            return False
        # late arrivals alone are judged by the SLO (the latency counts from the intended send time)
        return cpu_bound(step, rules) is None and saturation(step, rules) is None and queue_growth(step, rules) is None

    def best(self) -> StepResult | None:
        """The passing step with the highest achieved throughput (verification and ramp-and-hold runs left out)."""
        passing = [s for s in self.steps if s.role == "search" and self.passes(s) and s.achieved_rps is not None]
        return max(passing, key=lambda s: s.achieved_rps or 0.0) if passing else None

    @property
    def step_s(self) -> float:
        """The longest a step takes: its run's longest and its start-up."""
        return self.plan.max_duration_s + 15.0

    def _within_budget(self) -> bool:
        budget = self.settings.budget_s
        if budget is None:
            return True
        return budget - (time.monotonic() - self.started) >= self.step_s

    def run_level(
        self,
        children: ChildProcesses,
        level: float,
        total: int | None,
        role: str = "search",
        why: str = "",
        plan: StepPlan | None = None,
    ) -> StepResult:
        index = len(self.steps) + 1
        unit = "req/s" if self.plan.open_loop else "users"
        of = f"/{total}" if total else ""
        purpose = f" ({why})" if why else ""
        plan = plan or (self.capacity_plan(level) if self.settings.capacity else self.plan)
        self.settings.printer(
            f"[step {index}{of}] {level:g} {unit}{purpose}: running (at most {plan.max_duration_s:g} s){self.eta(total)} ..."
        )
        step = run_step(children, self.base, plan, index, level, self.settings.out, index == 1, self.settings.gpu, role=role)
        self.steps.append(step)
        self.save()
        self.settings.printer("      " + describe(step, self.best(), self.plan.open_loop))
        return step

    def capacity_plan(self, level: float) -> StepPlan:
        """A capacity step at `level` is not stable before its windows hold enough requests to decide its
        highest percentile (5 / (1 - p): 500 for a p99), within the maximum windows. Its rate: the level
        offered, or (users) the level times the throughput per user of the last step that had any (none
        yet: the stability rule's windows)."""
        rule = self.plan.rule
        needed = min_requests(bounds_of(self.settings.rules))
        rate = level
        if not self.plan.open_loop:
            answered = [s for s in self.steps if s.achieved_rps and s.level > 0]
            if not answered:
                return self.plan
            rate = level * (answered[-1].achieved_rps or 0.0) / answered[-1].level
        windows = max(rule.windows, min(rule.max_windows, math.ceil(needed / max(rate * self.plan.window_s, 1e-9))))
        return replace(self.plan, rule=replace(rule, windows=windows))

    def eta(self, total: int | None) -> str:
        """', ~N s left' from the steps so far (their mean wall time), bounded by the budget."""
        elapsed = time.monotonic() - self.started
        done = [s.duration_s for s in self.steps]
        parts = [f"{elapsed:.0f} s so far"]
        if total and done:
            left = (total - len(self.steps)) * (sum(done) / len(done))
            parts.append(f"about {left:.0f} s left if no rule stops it")
        if self.settings.budget_s is not None:
            parts.append(f"budget {max(0.0, self.settings.budget_s - elapsed):.0f} s left")
        return "; " + ", ".join(parts)

    def run(self) -> int:
        """The sweep (or capacity search); 0 when it ended by its own rules, 2 when a step could not
        start, 128+N when a signal stopped it."""
        with ChildProcesses(on_second=self.settings.on_second_signal, warm=self.settings.warm or True) as children:
            if self.settings.capacity is not None:
                self._find_capacity(children, self.settings.capacity)
            elif self.settings.ramp_hold is not None:
                self._ramp_hold(children, self.settings.ramp_hold)
            else:
                self._sweep_levels(children)
            if children.signals:
                self.signalled = children.signals[0]
                self.stopped = {"rule": "interrupted", "reason": f"stopped by signal {children.signals[0]}"}
        self.save()
        self._print_end()
        if children.signals:
            return 128 + children.signals[0]
        return 2 if self.stopped and self.stopped["rule"] == "failed" else 0

    def _sweep_levels(self, children: ChildProcesses) -> None:
        if self.stopped is not None:
            return  # a resumed sweep that had already ended
        levels = self.settings.levels
        for level in levels[len(self.steps) :]:
            if children.signals:  # a signal between two steps: none starts
                return
            if not self._within_budget():
                self.stopped = {"rule": "budget", "reason": "the time budget would end during the next step"}
                return
            self.run_level(children, level, len(levels))
            if children.signals:
                return
            reason = stop_reason(self.steps, self.settings.rules)
            if reason is not None:
                self.stopped = {"rule": reason[0], "reason": reason[1]}
                return
        self.stopped = {"rule": "levels", "reason": "every level was run"}

    def evidence(self, step: StepResult) -> RunEvidence | SearchEnd:
        """A capacity-search step as the search's evidence, or why the search cannot go on."""
        if step.exit_code == 2 or step.requests is None:
            return SearchEnd("broken", f"the step's run failed (exit {step.exit_code}); see its run.log")
        return evidence_of(step, self.target, self.settings.rules)

    def _find_capacity(self, children: ChildProcesses, search: CapacitySearch) -> None:
        rules = self.settings.rules
        runs: list[RunEvidence] = []
        verified: list[RunEvidence] = []
        for step in self.steps:  # a resumed search: its steps so far
            outcome = self.evidence(step)
            if isinstance(outcome, RunEvidence):
                (verified if step.role == "verify" else runs).append(outcome)

        def measure(rate: float, role: str) -> RunEvidence | SearchEnd:
            if children.signals:  # a signal between two steps: none starts
                return SearchEnd("interrupted", f"stopped by signal {children.signals[0]}")
            step = self.run_level(children, rate, None, role=role, why="verification" if role == "verify" else "")
            if children.signals:
                return SearchEnd("interrupted", f"stopped by signal {children.signals[0]}")
            return self.evidence(step)

        if not search.unit.whole:
            # below this rate a step cannot hold enough requests to decide the SLO's highest percentile
            decidable = min_requests(bounds_of(rules)) / (self.plan.rule.max_windows * self.plan.window_s)
            search = replace(search, lowest_decidable_rps=decidable)
        answer = search_capacity(measure, search, bounds_of(rules), runs, self._within_budget, verified)
        self.capacity = capacity_record(answer, rules, search.precision_pct, search.unit)
        self._name_goodput_misses(self.capacity, rules)
        end = answer.end
        if end.reason == "broken":
            self.stopped = {"rule": "failed", "reason": end.words}
        elif end.reason in ("generator", "ceiling"):
            self.stopped = {"rule": "generator", "reason": end.words}
        elif end.reason == "budget":
            self.stopped = {"rule": "budget", "reason": end.words}
        elif end.reason != "interrupted":
            self.stopped = {"rule": "capacity", "reason": end.words}

    def _name_goodput_misses(self, capacity: dict[str, Any], rules: StopRules) -> None:
        """A search bound by goodput: the thresholds the first rate over it broke (`goodput_misses`,
        from that rate's last run), as the binding's `over` and at the end of its words."""
        binding = capacity.get("binding")
        failing = capacity.get(f"first_failing_{record_unit(capacity).key}")
        if binding is None or binding.get("constraint") != GOODPUT or failing is None or self.goodput_limits is None:
            return
        runs = [step for step in self.steps if abs(step.level - failing) < 1e-6 and step.role == "search"]
        if not runs:
            return
        over = goodput_misses(Path(runs[-1].results_dir), self.target, self.goodput_limits, rules.slo["min_goodput_pct"])
        binding["over"] = over
        if over:
            binding["words"] = f"{binding['words']} ({'; '.join(over)})"

    def _ramp_hold(self, children: ChildProcesses, rule: RampHoldRule) -> None:
        if self.stopped is not None:
            return  # a resumed sweep that had already ended
        step = self.run_level(
            children, self.settings.start_rps, None, role="ramp-hold", why="ramp and hold", plan=ramp_plan(self.plan, rule)
        )
        if children.signals:
            return
        if step.exit_code == 2 or step.requests is None:
            self.stopped = {"rule": "failed", "reason": f"the run failed (exit {step.exit_code}); see its run.log"}
            return
        self.ramp = ramp_answer(step, self.target, bounds_of(self.settings.rules))
        self.stopped = {"rule": "ramp-hold", "reason": str(self.ramp.get("ended"))}

    def _print_end(self) -> None:
        say = self.settings.printer
        if self.stopped:
            say(f"stopped: {self.stopped['rule']}: {self.stopped['reason']}")
        best = self.best()
        if best is not None and self.capacity is None:  # a capacity search has one answer: its own lines
            say(f"best: {best.achieved_rps:g} req/s at level {best.level:g} (p99 {fmt_ms(best.p99_ms)})")
        if self.capacity is not None:
            for line in answer_lines(self.capacity):
                say(line)
        if self.ramp is not None:
            for line in ramp_lines(self.ramp):
                say(line)
        say(f"results: {self.settings.out}/sweep.json, sweep.csv, sweep.html, steps/")


def interrupted(step: StepResult) -> bool:
    """A step a signal cut short (its run exited 128 + the signal's number): its figures are partial."""
    return step.exit_code >= 128


def knee_step(steps: list[StepResult]) -> StepResult | None:
    """The knee of the latency-throughput curve: the step of highest power (throughput / p99, Kleinrock)."""
    measured = [s for s in steps if s.achieved_rps and s.p99_ms and s.p99_ms > 0 and not interrupted(s)]
    return max(measured, key=lambda s: (s.achieved_rps or 0.0) / (s.p99_ms or math.inf)) if measured else None


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def describe(step: StepResult, best: StepResult | None, open_loop: bool) -> str:
    """One progress line for a finished step."""
    if step.requests is None:
        log = Path(step.results_dir).parent / "run.log"
        return "\n        ".join([f"no results (exit {step.exit_code}); see {log}", *run_log_reason(log)])
    parts = [
        f"achieved {step.achieved_rps or 0:.1f} req/s",
        f"p50 {fmt_ms(step.p50_ms)}",
        f"p99 {fmt_ms(step.p99_ms)}",
        f"errors {step.error_rate or 0:.2%}",
        "stable" if step.stable else f"not stable in {step.windows} windows",
    ]
    if step.goodput_pct is not None:
        parts.insert(3, f"goodput {step.goodput_pct:.1f} %")
    if step.ttft_p99_ms is not None:
        parts.insert(3, f"TTFT p99 {fmt_ms(step.ttft_p99_ms)}, TPOT p99 {fmt_ms(step.tpot_p99_ms)}")
    if step.avg_batch is not None:
        parts.append(f"avg batch {step.avg_batch:.2f}")
    if open_loop and step.send_lag_p99_ms is not None:
        parts.append(f"send lag p99 {step.send_lag_p99_ms:.2f} ms")
    if step.client_cpu_per_worker is not None:
        parts.append(f"client {step.client_cpu_per_worker:.2f} cores")
    if step.server_memory_mib is not None:
        parts.append(f"server memory {step.server_memory_mib:.0f} MiB")
    if step.gpu_memory_mib is not None:
        parts.append(f"GPU {step.gpu_util_pct or 0:.0f} %, {step.gpu_memory_mib:.0f} MiB")
    line = ", ".join(parts)
    if best is not None:
        line += f"; best so far {best.achieved_rps or 0:.1f} req/s at {best.level:g}"
    return line
