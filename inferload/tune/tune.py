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

The servers are left as found: each configurator writes the original settings to the journal of
server changes before its first change (`inferload.run.server_changes`) and puts them back at the
end of the server's search, on every way out (an error, the budget, a signal). What a killed tune
left is put back by the next tune against that server (`restore_leftovers`) or `inferload restore`.
SIGINT, SIGTERM or SIGHUP stop the tune at once: the step that runs stops and keeps its figures, no
other candidate starts, the servers are put back, tune.json says ``"stopped": "interrupted"`` and the
exit code is 128 + the signal's number. `--budget` bounds the whole tune, the candidates' applying
and putting back included: no candidate starts that could not end within it.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from inferload.errors import InferloadError, UsageError
from inferload.launch.child_processes import StopSignals
from inferload.launch.warm_locust import WarmLocust
from inferload.paths import write_atomically
from inferload.run.server_changes import ServerJournal, same_host
from inferload.tune.capacity import CapacitySearch
from inferload.tune.server_config import Candidate, ChangesRefused, SearchSpace
from inferload.tune.stop_rules import memory_limit
from inferload.tune.sweep import Sweep, SweepSettings
from inferload.tune.sweep_report import slo_words

# tune.html and the winners' ready config: a table of every candidate, a Pareto plot (capacity
# under the SLO against p99 at that rate, one point per candidate, per server), and for each server
# its winner as a config.pbtxt fragment (Triton) or config.properties `models=` entry and
# registration call (TorchServe).
TUNE_HTML = "tune.html"


def config_fragment(
    server: str,
    settings: dict[str, Any],
    model: str,
    management_url: str | None = None,
    response_timeout_s: int | None = None,
    management_key: bool = False,
) -> str:
    """The winner's settings in the server's own configuration syntax. TorchServe: a ``models=`` entry
    (with the model's own ``responseTimeout``, when known) and the registration call on its management
    API at ``management_url`` (with its key, ``management_key``)."""
    if server == "triton":
        lines = []
        if settings.get("dynamic_batching") and settings.get("max_batch_size"):
            lines.append(f"max_batch_size: {settings['max_batch_size']}")
        if settings.get("dynamic_batching"):
            lines.append("dynamic_batching {")
            if settings.get("preferred_batch_size"):
                lines.append(f"  preferred_batch_size: [ {', '.join(str(n) for n in settings['preferred_batch_size'])} ]")
            lines.append(f"  max_queue_delay_microseconds: {settings.get('max_queue_delay_microseconds') or 0}")
            lines.append("}")
        lines.append(f"instance_group [ {{ kind: KIND_CPU, count: {settings.get('instance_count', 1)} }} ]")
        return "\n".join(lines)
    version: dict[str, Any] = {
        "marName": f"{model}.mar",
        "batchSize": settings.get("batch_size", 1),
        "maxBatchDelay": settings.get("max_batch_delay_ms", 0),
        "minWorkers": settings.get("workers", 1),
        "maxWorkers": settings.get("workers", 1),
    }
    query = f"url={model}.mar&batch_size={settings.get('batch_size', 1)}&max_batch_delay={settings.get('max_batch_delay_ms', 0)}"
    query += f"&initial_workers={settings.get('workers', 1)}"
    if response_timeout_s is not None:
        version["responseTimeout"] = response_timeout_s
        query += f"&response_timeout={response_timeout_s}"
    url = (management_url or "http://127.0.0.1:8081").rstrip("/")
    key = " -H 'Authorization: Bearer <management key of key_file.json>'" if management_key else ""
    register = f"curl{key} -X DELETE '{url}/models/{model}' && curl{key} -X POST '{url}/models?{query}&synchronous=true'"
    entry = {model: {"1.0": version}}
    return (
        f"models={json.dumps(entry, separators=(',', ':'))}\n"
        f"# or, on a running server with enable_model_api=true (unregister, then register): {register}"
    )


def _capacity(candidate: dict[str, Any]) -> float | None:
    estimate = candidate.get("capacity_estimate_rps")
    return estimate if estimate is not None else candidate.get("capacity_rps")


def _pareto_png(candidates: list[dict[str, Any]]) -> str | None:
    points = [c for c in candidates if _capacity(c) is not None and c.get("p99_ms") is not None]
    if not points:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.6), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    for server, marker in (("triton", "o"), ("torchserve", "s")):
        mine = [c for c in points if c["server"] == server]
        if mine:
            axes.scatter([_capacity(c) or 0.0 for c in mine], [c["p99_ms"] for c in mine], marker=marker, label=server)
            for c in mine:
                low, high = c.get("capacity_low_rps"), c.get("capacity_high_rps")
                if low is not None:
                    right = high if high is not None else (_capacity(c) or low) * 1.2
                    axes.hlines(c["p99_ms"], low, right, alpha=0.5)
                axes.annotate(
                    c["name"], (_capacity(c) or 0.0, c["p99_ms"]), fontsize=7, xytext=(4, 4), textcoords="offset points"
                )
    axes.set_xlabel("capacity under the SLO (req/s; bars: its 95 % interval)")
    axes.set_ylabel("p99 at that rate (ms)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else html.escape(str(value))


def write_tune_report(out: Path, document: dict[str, Any]) -> Path:
    candidates = document["candidates"]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>inferload tune</title>",
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px}pre{background:#f4f4f4;padding:8px}</style>",
        f"<h1>Tuning under {html.escape(slo_words(document['slo']))}</h1>",
    ]
    png = _pareto_png(candidates)
    if png:
        parts.append(f"<img alt='capacity against p99' src='data:image/png;base64,{png}'>")
    columns = (
        "server",
        "name",
        "capacity_estimate_rps",
        "capacity_low_rps",
        "capacity_high_rps",
        "capacity_rps",
        "first_failing_rps",
        "p50_ms",
        "p99_ms",
        "avg_batch",
        "queue_ms",
        "compute_ms",
        "server_memory_mib",
        "gpu_util_pct",
        "gpu_memory_mib",
        "binding",
        "error",
    )
    parts.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>")
    for candidate in candidates:
        parts.append("<tr>" + "".join(f"<td>{_cell(candidate.get(c))}</td>" for c in columns) + "</tr>")
    parts.append("</table>")
    for server, winner in document["winners"].items():
        capacity = _capacity(winner)
        low, high = winner.get("capacity_low_rps"), winner.get("capacity_high_rps")
        span = "" if low is None else f" [{low:g}, {'∞' if high is None else f'{high:g}'}]"
        head = f"{html.escape(server)}: {html.escape(winner['name'])}, {capacity:g}{span} req/s"
        if winner.get("tied_with"):
            head += f" (tied within noise with {html.escape(', '.join(winner['tied_with']))})"
        parts.append(f"<h2>{head}</h2>")
        parts.append(f"<pre>{html.escape(winner['fragment'])}</pre>")
    path = out / TUNE_HTML
    path.write_text("\n".join(parts))
    return path


TUNE_JSON = "tune.json"


class Configurator(Protocol):
    #: whether a candidate's settings are on the server now (restore() puts the original back)
    changed: bool

    def current(self) -> dict[str, Any]: ...

    def apply(self, candidate: Candidate) -> dict[str, Any]: ...

    def restore(self) -> str | None: ...

    def fragment_options(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ServerTune:
    """One server to tune: its scenario target, how to change it, and where its model lives."""

    server: str  # "triton" | "torchserve"
    target: str
    model: str
    configurator: Configurator
    #: the option that gives its management URL (for messages)
    option: str = ""


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
    #: the capacity search's boundary: its estimate and 95 % interval (high None: open), and what binds it
    capacity_estimate_rps: float | None = None
    capacity_low_rps: float | None = None
    capacity_high_rps: float | None = None
    binding: str | None = None

    @property
    def ranked_rps(self) -> float | None:
        """What candidates are ranked by: the boundary's estimate, else the highest rate that passed."""
        return self.capacity_estimate_rps if self.capacity_estimate_rps is not None else self.capacity_rps

    def span(self) -> str:
        """`250 [230, 270] req/s`, or the highest passing rate when there is no interval."""
        if self.ranked_rps is None:
            return "-"
        if self.capacity_low_rps is None:
            return f"{self.ranked_rps:g} req/s"
        high = "∞" if self.capacity_high_rps is None else f"{self.capacity_high_rps:g}"
        return f"{self.ranked_rps:g} [{self.capacity_low_rps:g}, {high}] req/s"


class Tune:
    def __init__(self, settings: TuneSettings, servers: list[ServerTune]) -> None:
        self.settings = settings
        self.servers = servers
        self.results: list[CandidateResult] = []
        self.started = time.monotonic()
        self.stopped: str | None = None
        #: server -> why its search ended early (memory, or a server that refuses every candidate)
        self.server_stops: dict[str, str] = {}
        self.signals = StopSignals("inferload tune", "; the journal keeps what to put back: run `inferload restore`")
        #: the longest a candidate took to apply (and so about as long to put back), for the budget
        self.apply_s = 0.0
        #: servers that refused every candidate (their management API, an ensemble): a usage problem
        self.refused: set[str] = set()
        #: the warm Locust every candidate's steps fork from (started by the first step, stopped by `run`)
        self.warm = WarmLocust()

    def restore_leftovers(self, journal: ServerJournal) -> int:
        """Put back what a killed process left changed on the servers to tune (`inferload restore`'s job,
        done first so the tune starts from the servers as they were); how many could not be put back."""
        urls = [getattr(tune.configurator, "url", "") for tune in self.servers]
        return journal.restore_leftovers(
            lambda entry: any(url and same_host(entry.server, url) for url in urls), self.settings.printer
        )

    def check_servers(self) -> None:
        """Every server's model settings can be read now (its API answers, it serves the model): UsageError
        naming the option and why, before anything is changed or measured."""
        for tune in self.servers:
            try:
                tune.configurator.current()
            except InferloadError as error:
                raise UsageError(
                    f"{tune.option or tune.server}: cannot read the settings of model {tune.model!r}: {error}"
                ) from None

    def budget_left(self) -> float | None:
        """Seconds of the budget left for measuring, the putting back of the last candidate kept aside (about
        twice as long as applying one: Triton unloads the model and loads it again)."""
        budget = self.settings.budget_s
        return None if budget is None else budget - (time.monotonic() - self.started) - 2 * self.apply_s

    def within_budget(self) -> bool:
        """Whether another candidate fits in the budget: applying it, one step at least, putting it back."""
        left = self.budget_left()
        plan = self.settings.sweep
        window = plan.window_s or 1.0
        shortest_step = (plan.warmup_s or 0.0) + (plan.rule.windows + 1) * window + 15.0
        return left is None or left - self.apply_s >= shortest_step

    @property
    def interrupted(self) -> bool:
        return bool(self.signals.received)

    def score(self, tune: ServerTune, candidate: Candidate, start_rps: float) -> CandidateResult:
        """Apply a candidate, read it back, and search its capacity under the SLO."""
        index = len([r for r in self.results if r.server == tune.server]) + 1
        folder = self.settings.out / tune.server / f"{index:02d}"
        say = self.settings.printer
        say(f"[{tune.server} {index}] {candidate.name}: applying ...")
        started = time.monotonic()
        try:
            applied = tune.configurator.apply(candidate)
        except ChangesRefused:
            raise  # no candidate can be applied: the server's search ends (tune_server says why, once)
        except InferloadError as error:
            say(f"      refused: {error}")
            return CandidateResult(
                tune.server, candidate.name, candidate.settings(), None, None, None, error=str(error), folder=str(folder)
            )
        finally:
            self.apply_s = max(self.apply_s, time.monotonic() - started)
        if self.interrupted:  # the signal came while the server took the candidate
            return CandidateResult(
                tune.server, candidate.name, candidate.settings(), applied, None, None, error="interrupted", folder=str(folder)
            )
        capacity = self.settings.sweep.capacity or CapacitySearch(start_rps)
        left = self.budget_left()
        sweep = Sweep(
            replace(
                self.settings.sweep,
                out=folder,
                target=tune.target,
                capacity=replace(capacity, start_rps=start_rps, verify=False),  # candidates are compared by their intervals
                budget_s=None if left is None else max(left - self.apply_s, 0.0),
                printer=lambda line: say("      " + line),
                on_second_signal=self.signals.exit_at_once,  # a second signal during a step: at once, as between them
                warm=self.warm,
            )
        )
        sweep.run()
        if sweep.signalled is not None:  # the step stopped and kept its figures; the tune stops too
            self.signals.note([sweep.signalled])
        answer = sweep.capacity or {}
        best = next((s for s in sweep.steps if answer.get("max_rps") is not None and s.level == answer["max_rps"]), None)
        limits = [reason for s in sweep.steps if (reason := memory_limit(s, self.settings.sweep.rules))]
        low, high = (answer.get("interval_rps") or [None, None])[:2]
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
            capacity_estimate_rps=answer.get("estimate_rps"),
            capacity_low_rps=low,
            capacity_high_rps=high,
            binding=(answer.get("binding") or {}).get("words"),
            error="interrupted" if self.interrupted else None,
        )

    def tune_server(self, tune: ServerTune) -> None:
        try:
            self._tune_server(tune)
        except ChangesRefused as refused:
            self.server_stops[tune.server] = str(refused)
            self.refused.add(tune.server)
            self.settings.printer(f"[{tune.server}] no candidate can be applied: {refused}")

    def _tune_server(self, tune: ServerTune) -> None:
        space = self.settings.space
        start = self.settings.sweep.capacity.start_rps if self.settings.sweep.capacity else 50.0
        if not self.within_budget():
            self.stopped = "budget"
            return
        best_candidate = space.baseline(tune.server)
        best = self.record(self.score(tune, best_candidate, start))
        if self.memory_stop(tune, best) or self.interrupted:
            return
        for stage in ("batching", "scale-out"):
            candidates = space.batching(tune.server, best_candidate) if stage == "batching" else space.scale_out(best_candidate)
            improved = False
            tried: list[CandidateResult] = []
            for candidate in candidates:
                if self.interrupted:
                    return
                if not self.within_budget():
                    self.stopped = "budget"
                    return
                result = self.record(self.score(tune, candidate, best.capacity_rps or start))
                tried.append(result)
                if beats(result, best, self.settings.plateau_pct):
                    best, best_candidate, improved = result, candidate, True
                if self.memory_stop(tune, result):
                    return
            if tried and not improved:
                self.settings.printer(f"[{tune.server}] {stage_outcome(stage, tried, best, self.settings.plateau_pct)}")

    def memory_stop(self, tune: ServerTune, result: CandidateResult) -> bool:
        """Memory was the limit for this candidate: the server's search ends here (and says why)."""
        if result.memory_limit is None:
            return False
        self.server_stops[tune.server] = f"memory is the limit ({result.name}): {result.memory_limit}"
        self.settings.printer(f"[{tune.server}] {self.server_stops[tune.server]}; no more candidates")
        return True

    def record(self, result: CandidateResult) -> CandidateResult:
        self.results.append(result)
        self.settings.printer(f"      capacity under the SLO: {result.span()}")
        self.save()
        return result

    def ranking(self, server: str) -> list[CandidateResult]:
        """The server's measured candidates, the highest capacity first (ties: the one tried first)."""
        # a candidate refused, or cut short by a signal, was not measured to its end: not ranked
        measured = [r for r in self.results if r.server == server and r.ranked_rps is not None and r.error is None]
        return sorted(measured, key=lambda r: -(r.ranked_rps or 0.0))

    def winners(self) -> dict[str, CandidateResult]:
        """Each server's highest capacity (a winner outright only when `decided`: see `tied_with`)."""
        best: dict[str, CandidateResult] = {}
        for server in dict.fromkeys(r.server for r in self.results):
            ranked = self.ranking(server)
            if ranked:
                best[server] = ranked[0]
        return best

    def tied_with(self, winner: CandidateResult) -> list[CandidateResult]:
        """The candidates the winner's interval does not clear: tied with it within noise."""
        return [r for r in self.ranking(winner.server) if r is not winner and not clears(winner, r)]

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
                server: {
                    **r.__dict__,
                    "fragment": self.fragment(server, r),
                    "decided": not self.tied_with(r),
                    "tied_with": [t.name for t in self.tied_with(r)],
                }
                for server, r in winners.items()
            },
        }

    def fragment(self, server: str, result: CandidateResult) -> str:
        """The result's settings in the server's own config syntax (its management address and the
        model's own response timeout in TorchServe's)."""
        tune = next(t for t in self.servers if t.server == server)
        return config_fragment(server, result.applied or result.asked, tune.model, **tune.configurator.fragment_options())

    def save(self) -> None:
        document = self.document()
        self.settings.out.mkdir(parents=True, exist_ok=True)
        write_atomically(self.settings.out / TUNE_JSON, json.dumps(document, indent=2) + "\n")
        write_tune_report(self.settings.out, document)

    def run(self) -> int:
        """The loop; 0 with a winner, 1 without, 128 + N when signal N stopped it (servers put back in every case)."""
        failed_restores = 0
        with self.signals:
            try:
                for tune in self.servers:
                    if self.interrupted:
                        break
                    try:
                        self.tune_server(tune)
                    finally:
                        failed_restores += self.put_back(tune)
            finally:
                self.warm.close()
                if self.interrupted:
                    self.stopped = "interrupted"
                self.save()
        self.print_end()
        if self.interrupted:
            return 128 + self.signals.received[0]
        if not self.winners() and self.refused and not failed_restores:
            return 2  # the server's set-up, not a capacity: what to do was said
        return 0 if self.winners() and not failed_restores else 1

    def put_back(self, tune: ServerTune) -> int:
        """Put the server's original settings back; 1 when that failed (the journal keeps them), else 0."""
        say = self.settings.printer
        if tune.configurator.changed:  # nothing changed: nothing to say (the journal entry is forgotten all the same)
            say(f"[{tune.server}] putting the original settings back ...")
        try:
            done = tune.configurator.restore()
        except InferloadError as error:
            say(f"[{tune.server}] could not put the original settings back: {error}; run `inferload restore` once it answers")
            return 1
        if done:
            say(f"[{tune.server}] {done}")
        return 0

    def print_end(self) -> None:
        say = self.settings.printer
        winners = self.winners()
        say("")
        slo = slo_words(self.settings.sweep.rules.slo)
        for server, result in winners.items():
            tied = self.tied_with(result)
            if tied:
                others = "; ".join(f"{t.name} {t.span()}" for t in tied)
                say(f"{server}: tied within noise under {slo}: {result.name} {result.span()}; {others}")
                say(f"  the highest estimate, {result.name}, as a fragment (no candidate's interval clears the others'):")
            else:
                runner = next(iter(self.ranking(server)[1:]), None)
                beaten = f", clearing {runner.name} {runner.span()}" if runner else ""
                say(f"{server}: best {result.name}: {result.span()} under {slo}{beaten}")
            say("  " + self.fragment(server, result).replace("\n", "\n  "))
        if len(winners) == 2:
            triton, torchserve = winners.get("triton"), winners.get("torchserve")
            if triton and torchserve and triton.ranked_rps and torchserve.ranked_rps:
                verdict = (
                    "Triton ahead"
                    if clears(triton, torchserve)
                    else "TorchServe ahead"
                    if clears(torchserve, triton)
                    else "tied within noise"
                )
                say(f"Triton vs TorchServe, each at its best: {triton.span()} vs {torchserve.span()}: {verdict}")
        say(f"results: {self.settings.out}/tune.json, tune.html, one folder per candidate")


def _peak(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def stage_outcome(stage: str, tried: list[CandidateResult], best: CandidateResult, margin_pct: float) -> str:
    """Why a stage did not change the best: nothing measured (each refused, or no rate met the SLO),
    or measured and not better beyond the noise (its interval clears the best's) and by the margin."""
    if all(r.ranked_rps is None for r in tried):
        interrupted = sum(1 for r in tried if r.error == "interrupted")
        refused = sum(1 for r in tried if r.error is not None) - interrupted
        counts = {
            "refused by the server": refused,
            "interrupted": interrupted,
            "passed the SLO at no rate": len(tried) - refused - interrupted,
        }
        parts = [f"{count} {words}" for words, count in counts.items() if count]
        return f"{stage}: no candidate measured ({', '.join(parts)})"
    if best.ranked_rps is None:
        return f"{stage}: no capacity to compare with"
    return f"{stage} did not beat the best ({best.name}: {best.span()}) beyond the noise and by {margin_pct:g} %"


def clears(result: CandidateResult, other: CandidateResult) -> bool:
    """`result`'s capacity interval lies wholly above `other`'s (without intervals: its capacity is higher)."""
    if result.ranked_rps is None:
        return False
    if other.ranked_rps is None:
        return True
    if result.capacity_low_rps is not None and other.capacity_low_rps is not None:
        other_high = other.capacity_high_rps if other.capacity_high_rps is not None else float("inf")
        return result.capacity_low_rps > other_high
    return result.ranked_rps > other.ranked_rps


def beats(result: CandidateResult, best: CandidateResult, margin_pct: float) -> bool:
    """A candidate becomes the best so far only when its interval clears the best's (not within noise)
    and its capacity is at least `margin_pct` % higher."""
    if result.ranked_rps is None:
        return False
    if best.ranked_rps is None:
        return True
    return clears(result, best) and result.ranked_rps > best.ranked_rps * (1 + margin_pct / 100.0)
