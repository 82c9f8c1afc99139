"""`inferload demo`: the seeds' Triton-vs-TorchServe comparison on the embedded default.

`--servers` picks the servers compared (default Triton and TorchServe; KServe too, see
`DEMO_SERVERS` below and docs/comparing-servers.md). They all start locally on loopback with the sample model; each server then gets the
same payload at the same concurrency, one at a time (on a small machine, two servers loaded
at once would measure each other): a steady phase and a bursty phase, each after its own
warm-up, which is excluded. Every phase is a plain `locust --headless` run of a generated
scenario, so the demo measures exactly what a user's run would. Cold start, server-side batch
sizes and queue/compute time come from the servers themselves.

Ctrl-C or SIGTERM goes once to the phase that is running (each phase runs in its own session, as
`inferload run` starts Locust: `inferload.launch.child_processes`); that phase ends early and writes
its results, no later phase starts, the servers are stopped, and the summary, windows.csv and report
cover the phases measured so far (`interrupted: true`). The exit code is then 128 + the signal.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from inferload.errors import InferloadError
from inferload.launch.child_processes import ChildProcesses, locust_arguments
from inferload.local.models.specs import SPECS as MODEL_SPECS
from inferload.local.models.specs import ModelSpec
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.measure.windows import StabilityRule
from inferload.results.figures import format_table
from inferload.results.files import SUMMARY_NAME, read_summary, write_summary
from inferload.results.report import write_report
from inferload.results.schema import SCHEMA_VERSION, DemoCapacity, RunSummary, SloSection
from inferload.scenario.limits import DEMO_CAPACITY_RUNS
from inferload.scenario.loader import load_scenario
from inferload.tune.capacity import CapacitySearch
from inferload.tune.server_config import TorchServeConfigurator, TritonConfigurator
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep import Sweep, SweepSettings

# The servers `inferload demo --servers` can compare, one entry each: how the demo reaches it.
#
# Each entry names the local server (``LocalServers``), the target kind the demo sends with, a label
# for the console, and the target keys (address, metrics page, body form) for a given model and
# ports. Adding a server to the comparison is one entry here (and its ``*_local.py`` in
# ``local/servers``); the demo itself loops over whatever ``--servers`` lists.
DEFAULT_DEMO_SERVERS: tuple[str, ...] = ("triton", "torchserve")


@dataclass(frozen=True)
class DemoServer:
    name: str  # LocalServers' name: "triton", "torchserve", "kserve", ...
    kind: str  # the target kind the demo sends with
    label: str  # how the console names it
    keys: Callable[[ModelSpec, ServerPorts], dict[str, Any]]  # address and protocol keys of its target


def _triton(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {"address": f"127.0.0.1:{ports.triton_grpc}", "outputs": [spec.output_name]}


def _torchserve(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {
        "address": f"http://127.0.0.1:{ports.ts_inference}",
        "content_type": "octet-stream",
        "metrics_url": f"http://127.0.0.1:{ports.ts_metrics}/metrics",
    }


def _kserve(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    return {
        "address": f"127.0.0.1:{ports.kserve_grpc}",
        "outputs": [spec.output_name],
        "metrics_url": f"http://127.0.0.1:{ports.kserve_http}/metrics",
    }


def _bentoml(spec: ModelSpec, ports: ServerPorts) -> dict[str, Any]:
    # POST /<model> with {"INPUT__0": [...]}; /metrics on the same port (the target's default)
    return {"address": f"http://127.0.0.1:{ports.bentoml_http}", "content_type": "json"}


DEMO_SERVERS: dict[str, DemoServer] = {
    server.name: server
    for server in (
        DemoServer("triton", "triton-grpc", "Triton (gRPC)", _triton),
        DemoServer("torchserve", "torchserve-rest", "TorchServe (REST)", _torchserve),
        DemoServer("kserve", "kserve-v2-grpc", "KServe (v2 gRPC)", _kserve),
        DemoServer("bentoml", "bentoml-http", "BentoML (HTTP)", _bentoml),
    )
}


def demo_server(name: str) -> DemoServer:
    """The entry of ``name``; a ValueError naming the servers the demo knows."""
    try:
        return DEMO_SERVERS[name]
    except KeyError:
        raise ValueError(f"the demo cannot compare {name!r}; it knows: {', '.join(DEMO_SERVERS)}") from None


def server_of_kind(kind: str) -> DemoServer:
    """The entry whose demo target has ``kind``."""
    return next(server for server in DEMO_SERVERS.values() if server.kind == kind)


# The demo's short tuning pass: each server's capacity under a p99 target, as it is configured, and
# the configuration that reached it, read back from the server.
#
# For each server the demo's target gets an open-loop capacity search (`inferload.tune.sweep`, short:
# precision 20 % (±10 %), 1 s windows, at most DEMO_CAPACITY_RUNS runs (`--capacity-runs`), no verification runs) into
# `<out>/capacity/<server>/`. Its line is the estimate and interval when that precision was reached;
# otherwise only what was measured: "at least" the highest rate that met the target, and the lowest
# that did not;
# the server's batching and instance/worker settings are read from its own APIs (Triton's model
# config, TorchServe's describe-model), so the line printed says what ran. A full search over settings
# is `inferload tune`.
#: the start rate of the search on each server (req/s): near the sample models' capacity on 2 cores
START_RPS = {"triton": 200.0, "torchserve": 100.0}
#: the capacity search's precision (%: (high − low) / low); its most runs per server: DEMO_CAPACITY_RUNS
DEMO_CAPACITY_PRECISION_PCT = 20.0


@dataclass(frozen=True)
class Capacity:
    server: str
    max_rps: float | None
    first_failing_rps: float | None
    config: str  # the server's settings as it ran, in words
    signalled: int | None = None  # the signal that cut the search short
    #: the search's answer (sweep.json's capacity): estimate, interval, binding constraint, verification, levels
    answer: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, p99_ms: float | None, bound: str | None = None) -> dict[str, Any]:
        """summary.json's `capacity` entry (`DemoCapacity`): ``p99_ms`` the latency bound, or
        ``bound`` the words of another one (a generative target's goodput under its thresholds)."""
        answer = self.answer
        binding = answer.get("binding") or {}
        verification = answer.get("verification") or {}
        curve = [
            {
                "rate": level["rate"],
                "p99_ms": level.get("p99_ms"),
                "p99_low_ms": level.get("p99_ms_low"),
                "p99_high_ms": level.get("p99_ms_high"),
                "fitted_p99_ms": level.get("fitted_p99_ms"),
                "verdict": level["verdict"],
            }
            for level in answer.get("levels") or []
        ]
        return {
            "p99_ms": p99_ms,
            "bound": bound,
            "max_rps": self.max_rps,
            "first_failing_rps": self.first_failing_rps,
            "config": self.config,
            "estimate_rps": answer.get("estimate_rps"),
            "interval_rps": answer.get("interval_rps"),
            "binding": binding.get("words"),
            "verification": verification.get("words"),
            "curve": curve or None,
            "precision_reached": answer.get("precision_reached"),
        }

    def line(self, bound: str) -> str:
        """The answer in one line: the estimate and its interval when the search reached its precision;
        else what was measured: at least the highest rate that met ``bound`` (its words: "p99 <= 100 ms"),
        over it at the lowest that did not."""
        low, high = (self.answer.get("interval_rps") or [None, None])[:2]
        estimate = self.answer.get("estimate_rps")
        if estimate is not None and low is not None and high is not None and self.answer.get("precision_reached"):
            return f"{self.server}: {_rps(estimate)} req/s [{_rps(low)}, {_rps(high)}] under {bound} ({self.config})"
        if self.max_rps is None:
            return f"{self.server}: no rate met {bound} ({self.config})"
        over = f", over it at {_rps(self.first_failing_rps)}" if self.first_failing_rps else ""
        ended = (self.answer.get("ended") or {}).get("words")
        why = f"; ±{DEMO_CAPACITY_PRECISION_PCT / 2:g} % not reached: {ended}" if ended else ""
        return f"{self.server}: at least {_rps(self.max_rps)} req/s under {bound}{over}{why} ({self.config})"


def _rps(value: float) -> str:
    """A rate to four significant digits, never in exponent form: 317.5, 40.21, 1,204."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def triton_config_words(applied: dict[str, Any]) -> str:
    batching = (
        f"dynamic batching, {applied['max_queue_delay_microseconds']} us queue delay"
        if applied["dynamic_batching"]
        else "no batching"
    )
    return f"{batching}, {applied['instance_count']} instance(s), max_batch_size {applied['max_batch_size']}"


def torchserve_config_words(applied: dict[str, Any]) -> str:
    return f"batch size {applied['batch_size']}, {applied['max_batch_delay_ms']} ms batch delay, {applied['workers']} worker(s)"


def read_config(server: str, ports: ServerPorts, model: str) -> str:
    """The server's settings for `model`, read from the server itself; why not, when they cannot be read."""
    try:
        if server == "triton":
            return triton_config_words(TritonConfigurator(f"http://127.0.0.1:{ports.triton_http}", model).applied())
        return torchserve_config_words(TorchServeConfigurator(f"http://127.0.0.1:{ports.ts_management}", model).applied())
    except InferloadError as error:
        return f"settings not read: {error}"


def capacity_pass(
    out: Path, target: dict[str, Any], server: str, start_rps: float, slo: dict[str, float], runs: int = DEMO_CAPACITY_RUNS
) -> tuple[dict[str, Any], int | None]:
    """One server's capacity under ``slo`` (a sweep's SLO: ``{"p99_ms": 100}``, ``{"min_goodput_pct":
    90}``), as configured, in at most `runs` runs from ``start_rps``: the search's answer (sweep.json's
    capacity) and the signal that cut it short (None)."""
    folder = out / "capacity" / server
    folder.mkdir(parents=True, exist_ok=True)
    scenario = folder / "scenario.yaml"
    data = {
        "name": f"demo-capacity-{server}",
        "duration": "30s",
        "warmup": "1s",
        "window": "1s",
        "targets": [target],
        "shape": {"kind": "constant-rate", "rate": start_rps, "max_in_flight": 64},
    }
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    sweep = Sweep(
        SweepSettings(
            scenario=scenario,
            out=folder,
            rule=StabilityRule(windows=2, tolerance_pct=30.0, max_windows=5),
            rules=StopRules(slo=slo, max_unsent_ratio=0.05),
            capacity=CapacitySearch(start_rps, precision_pct=DEMO_CAPACITY_PRECISION_PCT, max_steps=runs, verify=False),
            window_s=1.0,
            warmup_s=1.0,
            printer=lambda line: print("      " + line, flush=True),
        )
    )
    sweep.run()
    return sweep.capacity or {}, sweep.signalled


def measured_capacity(server: str, answer: dict[str, Any], signalled: int | None, config: str) -> Capacity:
    """A capacity search's answer as the demo's `Capacity` line."""
    return Capacity(server, answer.get("max_rps"), answer.get("first_failing_rps"), config, signalled, answer)


PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class DemoSettings:
    out: Path | None = None
    users: int = 8
    steady_s: float = 20.0
    burst_s: float = 20.0
    warmup_s: float = 5.0
    model: str = "cnn"
    #: the closing capacity pass: each server's capacity under p99 <= this (ms); None skips it
    capacity_p99_ms: float | None = 100.0
    #: the most runs of each server's capacity search
    capacity_runs: int = DEMO_CAPACITY_RUNS
    #: the servers compared, one at a time, in this order (names in ``DEMO_SERVERS``)
    servers: tuple[str, ...] = DEFAULT_DEMO_SERVERS


@dataclass(frozen=True)
class Phase:
    target: str  # the server's demo target kind: "triton-grpc", "torchserve-rest", "kserve-v2-grpc", ...
    name: str  # "steady" | "burst"

    @property
    def target_name(self) -> str:
        return f"{self.target}.{self.name}"


def demo_target(kind: str, name: str, model: str, ports: ServerPorts) -> dict[str, Any]:
    spec = MODEL_SPECS[model]
    target: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "model": model,
        "batch_size": 1,
        "inputs": [
            {
                "name": spec.input_name,
                "shape": list(spec.input_shape),
                "dtype": "FP32",
                "data": {"generator": "random", "seed": 0},
            }
        ],
        "timeout": "10s",
    }
    target.update(server_of_kind(kind).keys(spec, ports))  # address, metrics page, body form
    return target


def phase_scenario(phase: Phase, settings: DemoSettings, ports: ServerPorts) -> dict[str, Any]:
    users = settings.users
    if phase.name == "steady":
        duration = settings.warmup_s + settings.steady_s
        shape: dict[str, Any] = {"kind": "steady", "users": users, "spawn_rate": users}
    else:
        duration = settings.warmup_s + settings.burst_s
        # a base of a quarter of the users, bursts of twice the users, 3 s in every 8 s
        shape = {
            "kind": "burst",
            "base_users": max(1, users // 4),
            "burst_users": users * 2,
            "burst_length": "3s",
            "period": "8s",
            "first_burst_at": f"{settings.warmup_s + 2:g}s",
            "spawn_rate": users * 20,
        }
    return {
        "name": f"demo-{phase.target_name}".replace(".", "-"),
        "description": f"inferload demo: {phase.target} under {phase.name} load",
        "duration": f"{duration:g}s",
        "warmup": f"{settings.warmup_s:g}s",
        "window": "1s",
        "targets": [demo_target(phase.target, phase.target_name, settings.model, ports)],
        "shape": shape,
    }


def run_phase(
    phase: Phase, scenario_path: Path, out: Path, cold_starts_path: Path, expected_s: float, step: str, children: ChildProcesses
) -> RunSummary:
    """One headless Locust run; Locust's own log goes to a file, progress to the console.

    `children` forwards the demo's signals to the run (it then stops early and keeps its results)."""
    results = out / phase.target_name
    log_path = out / f"{phase.target_name}.locust.log"
    arguments = locust_arguments(
        scenario_path,
        True,
        results,
        f"{out.name}-{phase.target_name}",
        [
            "--cold-starts",
            str(cold_starts_path),
            "--only-summary",
            "--loglevel",
            "WARNING",
        ],
    )
    print(f"{step} {phase.target} {phase.name}: running for {expected_s:g} s ...", flush=True)
    started = time.monotonic()
    process = children.start_locust(arguments, log_path)
    while process.poll() is None:
        try:
            process.wait(timeout=PROGRESS_EVERY_S)
        except subprocess.TimeoutExpired:
            print(f"      {time.monotonic() - started:5.0f} s / {expected_s:g} s", flush=True)
    if not (results / SUMMARY_NAME).exists():
        raise InferloadError(f"{phase.target} {phase.name}: locust wrote no results (exit {process.returncode}); see {log_path}")
    summary = read_summary(results)
    figures = summary.targets[phase.target_name]
    print(
        f"      done: {figures.requests} requests, {figures.failures} failures, "
        f"p99 {figures.latency_ms.p99 or 0:.2f} ms (locust exit {process.returncode})",
        flush=True,
    )
    return summary


def combine(
    out: Path, warmup_s: float, model: str, users: int, summaries: dict[str, RunSummary], cold: dict[str, float | None]
) -> RunSummary:
    """The phases' summaries as one: every phase's target, every SLO check, the demo's settings."""
    first = next(iter(summaries.values()))
    checks = [c for s in summaries.values() for c in s.slo.checks]
    return RunSummary(
        schema_version=SCHEMA_VERSION,
        run_id=out.name,
        scenario="demo",
        started_at=first.started_at,
        duration_s=round(sum(s.duration_s for s in summaries.values()), 3),
        warmup_s=warmup_s,
        steady_s=round(sum(s.steady_s or 0.0 for s in summaries.values()), 3),
        workers=1,
        model=model,
        users=users,
        cold_start_s=cold,
        phases={name: s.run_id for name, s in summaries.items()},
        targets={name: t for s in summaries.values() for name, t in s.targets.items()},
        slo=SloSection(passed=all(c.passed for c in checks), checks=checks),
        interrupted=any(s.interrupted for s in summaries.values()),
    )


def write_results(out: Path, summary: RunSummary, phases: list[str]) -> Path | None:
    """The demo's summary.json, its phases' windows.csv merged, and report.html (None: not written, said why)."""
    write_summary(out, summary)
    merge_windows(out, phases)
    try:
        return write_report(out)
    except (InferloadError, OSError) as exc:
        print(f"report.html not written: {exc}", file=sys.stderr)
        return None


def exit_code(summary: RunSummary, signal_number: int | None) -> int:
    """128 + the signal that cut the demo short; else 1 when a request failed, 0 when none did."""
    if signal_number is not None:
        return 128 + signal_number
    return 0 if sum(t.failures or 0 for t in summary.targets.values()) == 0 else 1


def merge_windows(out: Path, names: list[str]) -> None:
    rows: list[dict[str, str]] = []
    fields: list[str] | None = None
    for name in names:
        path = out / name / "windows.csv"
        if not path.exists():
            continue
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            fields = fields or list(reader.fieldnames or [])
            rows.extend(reader)
    if fields:
        with open(out / "windows.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)


def run_demo(settings: DemoSettings) -> int:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (settings.out or Path("results") / f"demo-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    ports = ServerPorts.free()
    servers = LocalServers(out / "servers", ports, models=(settings.model,))
    compared = [demo_server(name) for name in settings.servers]
    labels = ", ".join(server.label for server in compared)
    phases = [Phase(server.kind, n) for n in ("steady", "burst") for server in compared]
    steps = 1 + len(phases) + (0 if settings.capacity_p99_ms is None else 1)
    print(f"inferload demo: model '{settings.model}', {settings.users} users, results in {out}", flush=True)
    print(f"[1/{steps}] starting the real {labels} on 127.0.0.1 ...", flush=True)
    summaries: dict[str, RunSummary] = {}
    cold: dict[str, float | None] = {server.name: None for server in compared}
    capacities: list[Capacity] = []
    signalled: int | None = None
    # from here on a signal goes to the phase that runs (its own session), not to this process
    with ChildProcesses(warm=True) as children:
        try:
            started = servers.up(which=settings.servers)
            cold = {server.name: started["servers"][server.name]["cold_start_s"] for server in compared}
            print(
                "      ready: cold start " + ", ".join(f"{server.label} {cold[server.name] or 0:.1f} s" for server in compared),
                flush=True,
            )
            cold_path = out / "cold_starts.json"
            cold_path.write_text(json.dumps({p.target_name: cold[server_of_kind(p.target).name] for p in phases}))
            for number, phase in enumerate(phases, start=2):
                if children.signals:
                    print(f"interrupted (signal {children.signals[0]}): the remaining phases are not run", flush=True)
                    break
                data = phase_scenario(phase, settings, ports)
                path = out / f"{phase.target_name}.yaml"
                path.write_text(yaml.safe_dump(data, sort_keys=False))
                scenario = load_scenario(path)  # the generated scenario goes through the same validation
                summaries[phase.target_name] = run_phase(
                    phase, path, out, cold_path, scenario.duration, f"[{number}/{steps}]", children
                )
            if settings.capacity_p99_ms is not None and summaries and not children.signals:
                print(
                    f"[{steps}/{steps}] capacity under p99 <= {settings.capacity_p99_ms:g} ms, each server as configured ...",
                    flush=True,
                )
                for server in (s for s in compared if s.name in START_RPS):  # the servers whose settings it can read
                    target = demo_target(server.kind, f"{server.kind}.capacity", settings.model, ports)
                    slo = {"p99_ms": settings.capacity_p99_ms}
                    answer, cut = capacity_pass(out, target, server.name, START_RPS[server.name], slo, settings.capacity_runs)
                    config = read_config(server.name, ports, settings.model)
                    capacities.append(measured_capacity(server.name, answer, cut, config))
                    if capacities[-1].signalled is not None:
                        signalled = capacities[-1].signalled
                        break
        finally:
            print("stopping the servers ...", flush=True)
            servers.down()
    if not summaries:
        print("no phase was measured", file=sys.stderr)
        return 128 + children.signals[0] if children.signals else 1
    signal_number = children.signals[0] if children.signals else signalled
    summary = combine(out, settings.warmup_s, settings.model, settings.users, summaries, cold)
    update: dict[str, Any] = {"interrupted": True} if signal_number is not None else {}
    bound = "" if settings.capacity_p99_ms is None else f"p99 <= {settings.capacity_p99_ms:g} ms"
    if capacities and settings.capacity_p99_ms is not None:
        update["capacity"] = {c.server: DemoCapacity(**c.as_dict(settings.capacity_p99_ms)) for c in capacities}
    summary = summary.model_copy(update=update)
    report = write_results(out, summary, list(summaries))
    print(
        f"\n{' vs '.join(server.label for server in compared)}, model '{settings.model}', same payload, {settings.users} users;"
    )
    print(f"steady state after a {settings.warmup_s:g} s warm-up; batch sizes, queue and compute time from the servers:\n")
    print(format_table(summary.targets))
    print(
        f"\nresults: {out}/summary.json, windows.csv, one folder per phase" + (f", {report.name}" if report else ""), flush=True
    )
    if capacities and settings.capacity_p99_ms is not None:
        print(
            f"\ncapacity under p99 <= {settings.capacity_p99_ms:g} ms, open loop, each server as configured"
            " (`inferload tune` searches the settings):"
        )
        for capacity in capacities:
            print("  " + capacity.line(bound))
    return exit_code(summary, signal_number)
