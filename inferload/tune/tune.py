"""`inferload tune`: the seeds' tuning loop, run for you on Triton and on TorchServe.

For each server (its first target in the scenario): 1. the baseline, no batching and one
instance/worker; 2. dynamic batching, the conservative delay first; 3. more instances/workers on the
best so far; a stage ends its line of search when it does not beat the best by `plateau_pct`, and a
candidate whose server passed a memory ceiling (`--max-server-memory`, `--max-gpu-memory`) ends
that server's search: memory is the limit.
Each candidate is applied to the running server (`inferload.tune.server_config`, read back) and
scored by its **capacity under the SLO** (`inferload sweep --find-max-rps`, one folder per
candidate). The winner is written as a ready config fragment; the original settings are put back
at the end. Every finished candidate is in tune.json at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from inferload.errors import InferloadError
from inferload.tune.candidates import Candidate, SearchSpace
from inferload.tune.capacity import CapacitySearch
from inferload.tune.stop_rules import memory_limit
from inferload.tune.sweep import Sweep, SweepSettings
from inferload.tune.tune_report import config_fragment, write_tune_report

TUNE_JSON = "tune.json"


class Configurator(Protocol):
    def apply(self, candidate: Candidate) -> dict[str, Any]: ...

    def restore(self) -> None: ...


@dataclass(frozen=True)
class ServerTune:
    """One server to tune: its scenario target, how to change it, and where its model lives."""

    server: str  # "triton" | "torchserve"
    target: str
    model: str
    configurator: Configurator


@dataclass
class TuneSettings:
    scenario: Path
    out: Path
    sweep: SweepSettings  # the capacity search's settings (its scenario, out and target are set per candidate)
    space: SearchSpace = field(default_factory=SearchSpace)
    plateau_pct: float = 5.0
    budget_s: float | None = None
    printer: Callable[[str], None] = print


@dataclass
class CandidateResult:
    server: str
    name: str
    asked: dict[str, Any]
    applied: dict[str, Any] | None
    capacity_rps: float | None
    first_failing_rps: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    avg_batch: float | None = None
    queue_ms: float | None = None
    compute_ms: float | None = None
    error: str | None = None
    folder: str = ""
    #: the peak over the candidate's steps (server RSS with children; one GPU's memory), GPU util at capacity
    server_memory_mib: float | None = None
    gpu_util_pct: float | None = None
    gpu_memory_mib: float | None = None
    #: why memory was the limit in one of its steps (ends the server's search); None when it was not
    memory_limit: str | None = None


class Tune:
    def __init__(self, settings: TuneSettings, servers: list[ServerTune]) -> None:
        self.settings = settings
        self.servers = servers
        self.results: list[CandidateResult] = []
        self.started = time.monotonic()
        self.stopped: str | None = None
        #: server -> why its search ended early (memory)
        self.server_stops: dict[str, str] = {}

    def within_budget(self) -> bool:
        budget = self.settings.budget_s
        return budget is None or time.monotonic() - self.started < budget

    def score(self, tune: ServerTune, candidate: Candidate, start_rps: float) -> CandidateResult:
        """Apply a candidate, read it back, and search its capacity under the SLO."""
        index = len([r for r in self.results if r.server == tune.server]) + 1
        folder = self.settings.out / tune.server / f"{index:02d}"
        say = self.settings.printer
        say(f"[{tune.server} {index}] {candidate.name}: applying ...")
        try:
            applied = tune.configurator.apply(candidate)
        except InferloadError as error:
            say(f"      refused: {error}")
            return CandidateResult(
                tune.server, candidate.name, candidate.settings(), None, None, None, error=str(error), folder=str(folder)
            )
        capacity = self.settings.sweep.capacity or CapacitySearch(start_rps)
        sweep = Sweep(
            replace(
                self.settings.sweep,
                out=folder,
                target=tune.target,
                capacity=replace(capacity, start_rps=start_rps),
                budget_s=None,
                printer=lambda line: say("      " + line),
            )
        )
        sweep.run()
        answer = sweep.capacity or {}
        best = next((s for s in sweep.steps if answer.get("max_rps") is not None and s.level == answer["max_rps"]), None)
        limits = [reason for s in sweep.steps if (reason := memory_limit(s, self.settings.sweep.rules))]
        return CandidateResult(
            tune.server,
            candidate.name,
            candidate.settings(),
            applied,
            answer.get("max_rps"),
            answer.get("first_failing_rps"),
            p50_ms=best.p50_ms if best else None,
            p99_ms=best.p99_ms if best else None,
            avg_batch=best.avg_batch if best else None,
            queue_ms=best.queue_ms if best else None,
            compute_ms=best.compute_ms if best else None,
            folder=str(folder),
            server_memory_mib=_peak(s.server_memory_mib for s in sweep.steps),
            gpu_util_pct=best.gpu_util_pct if best else None,
            gpu_memory_mib=_peak(s.gpu_memory_mib for s in sweep.steps),
            memory_limit=limits[0] if limits else None,
        )

    def tune_server(self, tune: ServerTune) -> None:
        space = self.settings.space
        start = self.settings.sweep.capacity.start_rps if self.settings.sweep.capacity else 50.0
        best_candidate = space.baseline(tune.server)
        best = self.record(self.score(tune, best_candidate, start))
        if self.memory_stop(tune, best):
            return
        for stage in ("batching", "scale-out"):
            candidates = space.batching(tune.server, best_candidate) if stage == "batching" else space.scale_out(best_candidate)
            improved = False
            for candidate in candidates:
                if not self.within_budget():
                    self.stopped = "budget"
                    return
                result = self.record(self.score(tune, candidate, best.capacity_rps or start))
                if beats(result, best, self.settings.plateau_pct):
                    best, best_candidate, improved = result, candidate, True
                if self.memory_stop(tune, result):
                    return
            if not improved:
                self.settings.printer(f"[{tune.server}] {stage} did not beat the best by {self.settings.plateau_pct:g} %")

    def memory_stop(self, tune: ServerTune, result: CandidateResult) -> bool:
        """Memory was the limit for this candidate: the server's search ends here (and says why)."""
        if result.memory_limit is None:
            return False
        self.server_stops[tune.server] = f"memory is the limit ({result.name}): {result.memory_limit}"
        self.settings.printer(f"[{tune.server}] {self.server_stops[tune.server]}; no more candidates")
        return True

    def record(self, result: CandidateResult) -> CandidateResult:
        self.results.append(result)
        capacity = "-" if result.capacity_rps is None else f"{result.capacity_rps:g} req/s"
        self.settings.printer(f"      capacity under the SLO: {capacity}")
        self.save()
        return result

    def winners(self) -> dict[str, CandidateResult]:
        best: dict[str, CandidateResult] = {}
        for result in self.results:
            current = best.get(result.server)
            if result.capacity_rps is not None and (current is None or beats(result, current, 0.0)):
                best[result.server] = result
        return best

    def document(self) -> dict[str, Any]:
        winners = self.winners()
        return {
            "version": 1,
            "scenario": str(self.settings.scenario),
            "slo": self.settings.sweep.rules.slo,
            "stopped": self.stopped,
            "server_stops": self.server_stops,
            "candidates": [r.__dict__ for r in self.results],
            "winners": {
                server: {**r.__dict__, "fragment": config_fragment(server, r.applied or r.asked, self.model_of(server))}
                for server, r in winners.items()
            },
        }

    def model_of(self, server: str) -> str:
        return next(t.model for t in self.servers if t.server == server)

    def save(self) -> None:
        document = self.document()
        self.settings.out.mkdir(parents=True, exist_ok=True)
        (self.settings.out / TUNE_JSON).write_text(json.dumps(document, indent=2) + "\n")
        write_tune_report(self.settings.out, document)

    def run(self) -> int:
        try:
            for tune in self.servers:
                try:
                    self.tune_server(tune)
                finally:
                    self.settings.printer(f"[{tune.server}] putting the original settings back ...")
                    tune.configurator.restore()
        finally:
            self.save()
        self.print_end()
        return 0 if self.winners() else 1

    def print_end(self) -> None:
        say = self.settings.printer
        winners = self.winners()
        say("")
        for server, result in winners.items():
            say(f"{server}: best {result.name}: {result.capacity_rps:g} req/s under {self.settings.sweep.rules.slo}")
            say("  " + config_fragment(server, result.applied or result.asked, self.model_of(server)).replace("\n", "\n  "))
        if len(winners) == 2:
            triton, torchserve = winners.get("triton"), winners.get("torchserve")
            if triton and torchserve and triton.capacity_rps and torchserve.capacity_rps:
                say(f"Triton vs TorchServe, each at its best: {triton.capacity_rps:g} vs {torchserve.capacity_rps:g} req/s")
        say(f"results: {self.settings.out}/tune.json, tune.html, one folder per candidate")


def _peak(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def beats(result: CandidateResult, best: CandidateResult, margin_pct: float) -> bool:
    if result.capacity_rps is None:
        return False
    if best.capacity_rps is None:
        return True
    return result.capacity_rps > best.capacity_rps * (1 + margin_pct / 100.0)
