"""The demo's short tuning pass: each server's capacity under a p99 target, as it is configured, and
the configuration that reached it, read back from the server (issue 10, item 7).

For each server the demo's target gets an open-loop capacity search (`inferload.tune.sweep`, coarse:
precision 50 %, 1 s windows, at most 5 runs, no verification runs) into `<out>/capacity/<server>/`;
the server's batching and instance/worker settings are read from its own APIs (Triton's model
config, TorchServe's describe-model), so the line printed says what ran. A full search over settings
is `inferload tune`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inferload.errors import InferloadError
from inferload.local.servers.ports import ServerPorts
from inferload.measure.stability import StabilityRule
from inferload.tune.capacity import CapacitySearch
from inferload.tune.server_config import TorchServeConfigurator, TritonConfigurator
from inferload.tune.stop_rules import StopRules
from inferload.tune.sweep import Sweep, SweepSettings

#: the start rate of the search on each server (req/s): near the sample models' capacity on 2 cores
START_RPS = {"triton": 200.0, "torchserve": 100.0}


@dataclass(frozen=True)
class Capacity:
    server: str
    max_rps: float | None
    first_failing_rps: float | None
    config: str  # the server's settings as it ran, in words
    signalled: int | None = None  # the signal that cut the search short
    #: the search's answer (sweep.json's capacity): estimate, interval, binding constraint, verification, levels
    answer: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, p99_ms: float) -> dict[str, Any]:
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
            "max_rps": self.max_rps,
            "first_failing_rps": self.first_failing_rps,
            "config": self.config,
            "estimate_rps": answer.get("estimate_rps"),
            "interval_rps": answer.get("interval_rps"),
            "binding": binding.get("words"),
            "verification": verification.get("words"),
            "curve": curve or None,
        }

    def line(self, p99_ms: float) -> str:
        low, high = (self.answer.get("interval_rps") or [None, None])[:2]
        estimate = self.answer.get("estimate_rps")
        if estimate is not None and low is not None:
            span = f"[{low:g}, {'∞' if high is None else f'{high:g}'}]"
            return f"{self.server}: {estimate:g} req/s {span} under p99 <= {p99_ms:g} ms ({self.config})"
        if self.max_rps is None:
            return f"{self.server}: no rate met p99 <= {p99_ms:g} ms ({self.config})"
        bound = f", over it at {self.first_failing_rps:g}" if self.first_failing_rps else ""
        return f"{self.server}: at least {self.max_rps:g} req/s under p99 <= {p99_ms:g} ms{bound} ({self.config})"


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


def capacity_pass(out: Path, target: dict[str, Any], server: str, ports: ServerPorts, p99_ms: float) -> Capacity:
    """One server's capacity under p99 <= `p99_ms`, as configured."""
    folder = out / "capacity" / server
    folder.mkdir(parents=True, exist_ok=True)
    scenario = folder / "scenario.yaml"
    data = {
        "name": f"demo-capacity-{server}",
        "duration": "30s",
        "warmup": "1s",
        "window": "1s",
        "targets": [target],
        "shape": {"kind": "constant-rate", "rate": START_RPS[server], "max_in_flight": 64},
    }
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    sweep = Sweep(
        SweepSettings(
            scenario=scenario,
            out=folder,
            rule=StabilityRule(windows=2, tolerance_pct=30.0, max_windows=5),
            rules=StopRules(slo={"p99_ms": p99_ms}, max_unsent_ratio=0.05),
            capacity=CapacitySearch(START_RPS[server], precision_pct=50.0, max_steps=5, verify=False),
            window_s=1.0,
            warmup_s=1.0,
            printer=lambda line: print("      " + line, flush=True),
        )
    )
    sweep.run()
    answer = sweep.capacity or {}
    config = read_config(server, ports, target["model"])
    return Capacity(server, answer.get("max_rps"), answer.get("first_failing_rps"), config, sweep.signalled, answer)
