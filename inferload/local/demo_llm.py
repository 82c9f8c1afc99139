"""`inferload demo --llm`: the built-in LLM served three ways on this machine, side by side.

The one GGUF model (`inferload.local.models.llm`, random weights) is served by llama.cpp's own OpenAI
server, by Triton (a decoupled Python-backend model over llama.cpp's engine, behind Triton's generate
extension: ``generate_stream``) and by KServe (an OpenAI model over the same engine, behind KServe's
OpenAI routes), each with llama.cpp's same settings (`llamacpp_engine`: 4 slots decoding together,
one thread). So what differs between the columns is the server around the engine.

Each server gets the same requests, one server at a time (on a small machine two servers loaded at
once would measure each other): the same prompt as a plain completion (no chat template, so every
server prefills the same tokens), ``max_tokens`` tokens asked and held (the model never ends an
answer early), the tokens counted with the model's own tokenizer everywhere (Triton's generate sends
no ``usage``). First a steady phase of ``users`` closed-loop users after a warm-up (excluded); then
a capacity search for streams from the rate that phase achieved: the highest open-loop rate at which
at least ``goodput_pct`` % of the requests are good (the first token within ``ttft_ms``, then each
token within ``tpot_ms``), with its interval. The phases are plain Locust runs of generated scenarios
(`inferload.local.demo.run_phase`), as the tensor demo's are; Ctrl-C keeps what was measured.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from inferload.launch.child_processes import ChildProcesses
from inferload.local.demo import (
    DEMO_CAPACITY_PRECISION_PCT,
    Capacity,
    Phase,
    capacity_pass,
    combine,
    exit_code,
    measured_capacity,
    run_phase,
    write_results,
)
from inferload.local.models.llm import LLM_NAME, ensure_llm_model, tokenizer_path
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.results.figures import figures, format_table
from inferload.results.files import read_windows
from inferload.results.schema import DemoCapacity, RunSummary
from inferload.scenario.loader import load_scenario

#: the kind the OpenAI servers are sent (a plain completion: no chat template, the same tokens as Triton's)
COMPLETIONS = "openai-completions"
#: the most runs of each server's capacity search (the demo's three servers within about 5 minutes)
LLM_DEMO_CAPACITY_RUNS = 5
#: the prompt every server gets (a plain completion: the same tokens prefilled everywhere)
PROMPT = "The lighthouse keeper watched the storm come in over the harbour and wrote in his log that"


@dataclass(frozen=True)
class LlmServer:
    """One way the demo serves the LLM: the local server's name, its label, and its target's keys."""

    name: str  # `LocalServers`' name
    label: str
    #: the target's kind, address and server keys, for the ports
    keys: Callable[[ServerPorts], dict[str, Any]]
    #: llama.cpp's settings around which the server runs, in words (the capacity line's)
    config: str


LLM_SERVERS: dict[str, LlmServer] = {
    server.name: server
    for server in (
        LlmServer(
            "llamacpp",
            "llama.cpp (OpenAI)",
            lambda ports: {
                "kind": COMPLETIONS,
                "address": f"http://127.0.0.1:{ports.llamacpp_http}",
                "metrics_url": f"http://127.0.0.1:{ports.llamacpp_http}/metrics",
            },
            "llama.cpp's server, 4 slots",
        ),
        LlmServer(
            "triton",
            "Triton (generate_stream)",
            lambda ports: {
                "kind": "triton-generate",
                "address": f"127.0.0.1:{ports.triton_http}",
                "metrics_url": f"http://127.0.0.1:{ports.triton_metrics}/metrics",
            },
            "Triton's Python backend, decoupled, llama.cpp's engine with 4 slots",
        ),
        LlmServer(
            "kserve",
            "KServe (OpenAI routes)",
            lambda ports: {
                "kind": COMPLETIONS,
                "address": f"http://127.0.0.1:{ports.kserve_http}",
                "base_path": "/openai/v1",
            },
            "KServe 0.14's OpenAI model, llama.cpp's engine with 4 slots",
        ),
    )
}
DEFAULT_LLM_SERVERS: tuple[str, ...] = tuple(LLM_SERVERS)


def llm_server(name: str) -> LlmServer:
    """The entry of ``name``; a ValueError naming the servers the LLM demo knows."""
    try:
        return LLM_SERVERS[name]
    except KeyError:
        raise ValueError(f"the LLM demo cannot serve the LLM on {name!r}; it knows: {', '.join(LLM_SERVERS)}") from None


@dataclass(frozen=True)
class LlmDemoSettings:
    out: Path | None = None
    users: int = 4
    steady_s: float = 15.0
    warmup_s: float = 3.0
    #: the tokens each answer is asked for (and holds)
    max_tokens: int = 32
    #: a good request: its first token within this (ms) ...
    ttft_ms: float = 250.0
    #: ... then each token within this (ms)
    tpot_ms: float = 25.0
    #: the capacity: the highest rate at which at least this share (%) of the requests is good; None skips it
    goodput_pct: float | None = 90.0
    #: the most runs of each server's capacity search
    capacity_runs: int = LLM_DEMO_CAPACITY_RUNS
    #: the servers compared, one at a time, in this order (names in ``LLM_SERVERS``)
    servers: tuple[str, ...] = DEFAULT_LLM_SERVERS

    @property
    def bound(self) -> str:
        """The capacity's bound in words."""
        return f"goodput >= {self.goodput_pct:g} % (TTFT <= {self.ttft_ms:g} ms, TPOT <= {self.tpot_ms:g} ms)"


def llm_target(server: LlmServer, name: str, settings: LlmDemoSettings, ports: ServerPorts) -> dict[str, Any]:
    keys = server.keys(ports)
    generation: dict[str, Any] = {
        "prompt": PROMPT,
        "max_tokens": settings.max_tokens,
        "ignore_eos": True,
        "tokenizer": str(tokenizer_path(ensure_llm_model())),
        "goodput": {"ttft_ms": settings.ttft_ms, "tpot_ms": settings.tpot_ms},
    }
    base_path = keys.pop("base_path", None)
    if base_path is not None:
        generation["base_path"] = base_path
    return {"name": name, "model": LLM_NAME, **keys, "generation": generation, "timeout": "30s"}


def steady_scenario(server: LlmServer, settings: LlmDemoSettings, ports: ServerPorts) -> dict[str, Any]:
    phase = Phase(server.name, "steady")
    return {
        "name": f"demo-llm-{server.name}-steady",
        "description": f"inferload demo --llm: {server.label} under steady load",
        "duration": f"{settings.warmup_s + settings.steady_s:g}s",
        "warmup": f"{settings.warmup_s:g}s",
        "window": "1s",
        "targets": [llm_target(server, phase.target_name, settings, ports)],
        "shape": {"kind": "steady", "users": settings.users, "spawn_rate": settings.users},
    }


def mean_waiting(results: Path, target: str) -> float | None:
    """The mean of the server's waiting requests over a phase's steady windows (windows.csv's
    ``server_waiting``); None when the server reported none."""
    series = read_windows(results / "windows.csv").by_target.get(target)
    if series is None:
        return None
    values = [v for v, phase in zip(series.server_waiting, series.phase, strict=True) if phase == "steady" and v is not None]
    return statistics.fmean(values) if values else None


#: the LLM demo's table: what a generative comparison is read by
LLM_TABLE = figures(
    "requests",
    "failures",
    "decoupled.first_response_ms.p50",
    "decoupled.first_response_ms.p99",
    "generation.tpot_ms.p50",
    "generation.tpot_ms.p99",
    "generation.itl_ms.p99",
    "generation.output_tokens_per_s",
    "generation.goodput.per_s",
    "generation.goodput.attainment_pct",
    "cold_start_s",
)


def run_llm_demo(settings: LlmDemoSettings) -> int:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (settings.out or Path("results") / f"demo-llm-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    ports = ServerPorts.free()
    servers = LocalServers(out / "servers", ports, models=(LLM_NAME,))
    compared = [llm_server(name) for name in settings.servers]
    phases = [Phase(server.name, "steady") for server in compared]
    steps = 1 + len(phases) + (0 if settings.goodput_pct is None else 1)
    print(
        f"inferload demo --llm: the built-in LLM {LLM_NAME!r}, {settings.users} users, {settings.max_tokens} tokens an answer,"
        f" results in {out}",
        flush=True,
    )
    print(f"[1/{steps}] starting {', '.join(server.label for server in compared)} on 127.0.0.1 ...", flush=True)
    summaries: dict[str, RunSummary] = {}
    cold: dict[str, float | None] = {server.name: None for server in compared}
    capacities: list[Capacity] = []
    signalled: int | None = None
    with ChildProcesses() as children:
        try:
            started = servers.up(which=settings.servers, timeout_s=300.0)
            cold = {server.name: started["servers"][server.name]["cold_start_s"] for server in compared}
            print("      ready: cold start " + ", ".join(f"{s.label} {cold[s.name] or 0:.1f} s" for s in compared), flush=True)
            cold_path = out / "cold_starts.json"
            cold_path.write_text(json.dumps({p.target_name: cold[p.target] for p in phases}))
            for number, (server, phase) in enumerate(zip(compared, phases, strict=True), start=2):
                if children.signals:
                    print(f"interrupted (signal {children.signals[0]}): the remaining phases are not run", flush=True)
                    break
                path = out / f"{phase.target_name}.yaml"
                path.write_text(yaml.safe_dump(steady_scenario(server, settings, ports), sort_keys=False))
                scenario = load_scenario(path)  # the generated scenario goes through the same validation
                summaries[phase.target_name] = run_phase(
                    phase, path, out, cold_path, scenario.duration, f"[{number}/{steps}]", children
                )
            if settings.goodput_pct is not None and summaries and not children.signals:
                print(f"[{steps}/{steps}] capacity under {settings.bound}, open loop ...", flush=True)
                for server, phase in zip(compared, phases, strict=True):
                    if phase.target_name not in summaries:
                        continue
                    achieved = summaries[phase.target_name].targets[phase.target_name].throughput_rps or 1.0
                    target = llm_target(server, f"{server.name}.capacity", settings, ports)
                    slo = {"min_goodput_pct": settings.goodput_pct}
                    answer, cut = capacity_pass(
                        out, target, server.name, round(max(achieved, 1.0), 1), slo, settings.capacity_runs
                    )
                    capacities.append(measured_capacity(server.name, answer, cut, server.config))
                    if cut is not None:
                        signalled = cut
                        break
        finally:
            print("stopping the servers ...", flush=True)
            servers.down()
    if not summaries:
        print("no phase was measured", file=sys.stderr)
        return 128 + children.signals[0] if children.signals else 1
    signal_number = children.signals[0] if children.signals else signalled
    summary = combine(out, settings.warmup_s, LLM_NAME, settings.users, summaries, cold)
    update: dict[str, Any] = {"interrupted": True} if signal_number is not None else {}
    if capacities:
        update["capacity"] = {c.server: DemoCapacity(**c.as_dict(None, settings.bound)) for c in capacities}
    summary = summary.model_copy(update=update)
    report = write_results(out, summary, list(summaries))
    print(
        f"\n{' vs '.join(server.label for server in compared)}: the built-in LLM, the same prompt, {settings.max_tokens} tokens"
        f" an answer, {settings.users} users;"
    )
    print(
        f"steady state after a {settings.warmup_s:g} s warm-up; a good request: TTFT <= {settings.ttft_ms:g} ms and"
        f" TPOT <= {settings.tpot_ms:g} ms; tokens counted with the model's tokenizer:\n"
    )
    print(format_table(summary.targets, LLM_TABLE))
    waiting = {p.target: mean_waiting(out / p.target_name, p.target_name) for p in phases if p.target_name in summaries}
    print(
        "  requests waiting in the server (mean over the steady windows): "
        + ", ".join(f"{name} {'n/a' if value is None else format(value, '.2f')}" for name, value in waiting.items())
    )
    print(
        f"\nresults: {out}/summary.json, windows.csv, one folder per phase" + (f", {report.name}" if report else ""), flush=True
    )
    if capacities:
        print(f"\nmax goodput rate, open loop, each server as started (±{DEMO_CAPACITY_PRECISION_PCT / 2:g} % sought):")
        for capacity in capacities:
            print("  " + capacity.line(settings.bound))
    return exit_code(summary, signal_number)
