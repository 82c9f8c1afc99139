"""Why a sweep stops after a step, checked in this order:

1. the step could not run (start checks, a crash);
   **memory** is the limit: the server's peak RSS (with its children) or one GPU's memory used
   passed its ceiling (`--max-server-memory`, `--max-gpu-memory`, MiB);
2. the **load generator** is the limit: one of its processes is near a full core (a gevent process
   runs on one), or, open loop, arrivals were sent late while senders were free by Little's law
   (achieved rate x time in service well below max_in_flight): the rate was not offered;
3. the **SLO** is breached (open-loop latency counts from the intended send time, so an
   overloaded server's queue is in it);
4. **errors** pass their bound;
5. the server is **saturated**: arrivals went unsent (every sender busy, the queue full), or were
   late because every sender was waiting on it; or, open loop, its **queue** grew without bound (the
   p50 rose step after step while less than the offered rate completed);
6. throughput reached a **plateau**.
A saturated generator makes the step's latency its own, and a breach explains a plateau, never
the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferload.tune.step import StepResult

#: the SLO's keys: upper bounds, but ``min_goodput_pct``, the least share (%) of a generative target's
#: requests that met every goodput threshold (its ``generation.goodput``)
SLO_KEYS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "error_rate", "min_goodput_pct")


@dataclass(frozen=True)
class StopRules:
    #: the SLO a step must meet: metric (a StepResult field in SLO_KEYS) -> upper bound
    slo: dict[str, float]
    #: errors: a step with a larger share of failed requests ends the sweep
    max_error_rate: float = 0.01
    #: plateau: achieved throughput grew by less than this (%) over the best earlier step ...
    plateau_pct: float = 5.0
    #: ... for this many steps in a row
    plateau_steps: int = 2
    #: the generator is the limit when a load-generating process is this busy (cores) ...
    max_client_cpu: float = 0.9
    #: ... or (open loop) more than this share of arrivals went unsent ...
    max_unsent_ratio: float = 0.01
    #: ... or (open loop) the send lag's p99 is above this (ms)
    max_send_lag_p99_ms: float = 20.0
    #: memory is the limit when the server's peak RSS (MiB, its process and children) passes this ...
    max_server_memory_mib: float | None = None
    #: ... or the memory used on one GPU (MiB) does
    max_gpu_memory_mib: float | None = None
    #: open loop: the queue grows without bound when the steady p50 rises this many times over a step
    #: (last third of its windows against the first) while less than 97 % of the offered rate completes
    queue_growth_factor: float = 2.0


def slo_breach(step: StepResult, slo: dict[str, float]) -> str | None:
    """What in `step` breaks the SLO, in words; None when it meets every bound."""
    for key, limit in slo.items():
        if key == "min_goodput_pct":
            if step.goodput_pct is None:
                return "goodput was not measured (no request completed)"
            if step.goodput_pct < limit:
                return f"goodput {step.goodput_pct:g} % < {limit:g} % of requests"
            continue
        value = getattr(step, key)
        if value is None:
            return f"{key} was not measured (no request completed)"
        if value > limit:
            unit = "" if key == "error_rate" else " ms"
            return f"{key} {value:g}{unit} > {limit:g}{unit}"
    return None


def memory_limit(step: StepResult, rules: StopRules) -> str | None:
    """Which memory passed its ceiling in this step, in words; None when neither did (or neither is bounded)."""
    server, gpu = step.server_memory_mib, step.gpu_memory_mib
    if rules.max_server_memory_mib is not None and server is not None and server > rules.max_server_memory_mib:
        return f"server memory (RSS) {server:g} MiB > {rules.max_server_memory_mib:g} MiB"
    if rules.max_gpu_memory_mib is not None and gpu is not None and gpu > rules.max_gpu_memory_mib:
        return f"GPU memory used {gpu:g} MiB > {rules.max_gpu_memory_mib:g} MiB"
    return None


def senders_were_busy(step: StepResult) -> bool:
    """Open loop: were (nearly) all senders waiting on the server? Little's law: in flight = rate x time in service."""
    if step.max_in_flight is None or step.achieved_rps is None or step.p50_ms is None:
        return False
    in_service_ms = max(0.0, step.p50_ms - (step.send_lag_p50_ms or 0.0))
    return step.achieved_rps * in_service_ms / 1000.0 >= 0.8 * step.max_in_flight


def too_many_unsent(step: StepResult, rules: StopRules) -> str | None:
    if step.unsent is not None and step.arrivals and step.unsent / step.arrivals > rules.max_unsent_ratio:
        return f"{step.unsent} of {step.arrivals} arrivals went unsent (more than {rules.max_unsent_ratio:.0%})"
    return None


def too_late(step: StepResult, rules: StopRules) -> str | None:
    if step.send_lag_p99_ms is not None and step.send_lag_p99_ms > rules.max_send_lag_p99_ms:
        return f"send lag p99 {step.send_lag_p99_ms:g} ms > {rules.max_send_lag_p99_ms:g} ms"
    return None


def cpu_bound(step: StepResult, rules: StopRules) -> str | None:
    """The busiest load-generating process was near a full core: more load from it is impossible."""
    if step.client_cpu_per_worker is not None and step.client_cpu_per_worker >= rules.max_client_cpu:
        return (
            f"the client used {step.client_cpu_per_worker:.2f} cores per load-generating process (limit {rules.max_client_cpu:g})"
        )
    return None


def generator_limit(step: StepResult, rules: StopRules) -> str | None:
    """Why the load generator, not the server, bounds this step; None when it does not.

    An arrival goes unsent only when every sender is busy and the queue is full, which is the
    server's doing (or a stall): that is saturation. Late arrivals with senders to spare are the
    generator's own lag."""
    if step.client_cpu_per_worker is not None and step.client_cpu_per_worker >= rules.max_client_cpu:
        return (
            f"the client used {step.client_cpu_per_worker:.2f} cores per load-generating process (limit {rules.max_client_cpu:g})"
        )
    late = too_late(step, rules)
    if late and not too_many_unsent(step, rules) and not senders_were_busy(step):
        return f"{late} while senders were free"
    return None


def saturation(step: StepResult, rules: StopRules) -> str | None:
    """Open loop: the server did not keep up: arrivals unsent (every sender busy, the queue full), or late
    because every sender was waiting on the server."""
    unsent = too_many_unsent(step, rules)
    late = too_late(step, rules)
    if unsent or (late and senders_were_busy(step)):
        return (
            f"the server did not keep up with {step.level:g} req/s: {unsent or late}; the {step.max_in_flight} senders were busy"
        )
    return None


def queue_growth(step: StepResult, rules: StopRules) -> str | None:
    """Open loop: the queue in front of the server grew without bound during the step (the latency,
    counted from the intended send times, kept rising while the server completed less than offered)."""
    if step.arrivals is None or step.p50_trend is None or step.achieved_rps is None:
        return None
    if step.p50_trend >= rules.queue_growth_factor and step.achieved_rps < 0.97 * step.level:
        return (
            f"the queue grows without bound at {step.level:g} req/s: the p50 rose {step.p50_trend:.1f}x over the step"
            f" while {step.achieved_rps:.0f} req/s completed"
        )
    return None


def plateau(steps: Sequence[StepResult], rules: StopRules) -> str | None:
    """Throughput stopped growing: each of the last `plateau_steps` gained < plateau_pct over the best before it."""
    if len(steps) <= rules.plateau_steps:
        return None
    for offset in range(rules.plateau_steps):
        current = steps[-1 - offset]
        earlier = [s.achieved_rps for s in steps[: len(steps) - 1 - offset] if s.achieved_rps is not None]
        if current.achieved_rps is None or not earlier:
            return None
        best = max(earlier)
        if current.achieved_rps > best * (1 + rules.plateau_pct / 100.0):
            return None
    best_step = max((s for s in steps if s.achieved_rps is not None), key=lambda s: s.achieved_rps or 0.0)
    return (
        f"throughput plateau: {rules.plateau_steps} steps in a row gained less than {rules.plateau_pct:g} %"
        f" over {best_step.achieved_rps:g} req/s (level {best_step.level:g})"
    )


def stop_reason(steps: Sequence[StepResult], rules: StopRules) -> tuple[str, str] | None:
    """(rule, explanation) when the sweep should stop after its last step; None to go on."""
    last = steps[-1]
    if last.exit_code == 2 or last.requests is None:
        return "failed", f"the step's run failed (exit {last.exit_code}); see its run.log"
    memory = memory_limit(last, rules)
    if memory:
        return "memory", f"memory is the limit: {memory}"
    limit = generator_limit(last, rules)
    if limit:
        return "generator", f"the load generator is the limit: {limit}"
    breach = slo_breach(last, {k: v for k, v in rules.slo.items() if k != "error_rate"})
    if breach:
        return "slo", f"SLO breached: {breach}"
    if last.error_rate is not None and last.error_rate > min(rules.max_error_rate, rules.slo.get("error_rate", 1.0)):
        return "errors", f"error rate {last.error_rate:.2%} > {min(rules.max_error_rate, rules.slo.get('error_rate', 1.0)):.2%}"
    saturated = saturation(last, rules)
    if saturated:
        return "saturated", saturated
    growing = queue_growth(last, rules)
    if growing:
        return "queue", growing
    flat = plateau(steps, rules)
    if flat:
        return "plateau", flat
    return None
