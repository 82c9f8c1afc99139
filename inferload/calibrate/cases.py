"""Calibration cases: what each one runs (a protocol, a loop, a law, a load), and its scenario."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MODEL = "identity"
#: FP32 values per request (the reference server's default input, unbatched)
VALUES = 16
PROTOCOL_KINDS = {"grpc": "kserve-v2-grpc", "http": "kserve-v2-http"}

LAWS: dict[str, dict[str, Any]] = {
    "none": {"law": "none"},
    "fixed": {"law": "fixed", "ms": 2.0},
    "lognormal": {"law": "lognormal", "median_ms": 2.0, "sigma": 0.5},
    "bimodal": {"law": "bimodal", "p_slow": 0.1, "fast_ms": 1.0, "slow_ms": 8.0},
    "tail": {"law": "tail", "base": {"law": "fixed", "ms": 2.0}, "p": 0.01, "slow_ms": 20.0},
}
#: the laws' mean service time (ms), to size the senders of an open-loop case
MEAN_MS = {"none": 0.0, "fixed": 2.0, "lognormal": 2.0 * math.exp(0.5**2 / 2), "bimodal": 0.1 * 8.0 + 0.9 * 1.0, "tail": 2.18}


@dataclass(frozen=True)
class Plan:
    """How long each case runs, and which cases (`plan(quick)`)."""

    quick: bool
    warmup_s: float
    duration_s: float  # warm-up included
    ceiling_users: int = 16
    closed_users: int = 8
    joined_law: str = "fixed"  # one user, closed loop, joined per request
    closed_laws: tuple[str, ...] = ()
    open_law: str = "lognormal"
    open_fractions: tuple[float, ...] = ()  # of the closed-loop ceiling, per process
    floor_requests: int = 300
    protocols: tuple[str, ...] = ("grpc", "http")


def plan(quick: bool) -> Plan:
    if quick:
        return Plan(quick=True, warmup_s=1.0, duration_s=3.0, closed_laws=(), open_law="fixed", open_fractions=(0.1, 0.5))
    return Plan(
        quick=False,
        warmup_s=1.0,
        duration_s=5.0,
        closed_laws=("fixed", "lognormal", "bimodal", "tail"),
        open_fractions=(0.1, 0.25, 0.5, 0.8),
    )


@dataclass(frozen=True)
class Case:
    name: str
    protocol: str
    loop: str  # "closed" | "open"
    law_name: str
    users: int | None = None
    rate_rps: float | None = None  # all processes together
    warmup_s: float = 1.0
    duration_s: float = 3.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def law(self) -> dict[str, Any]:
        return LAWS[self.law_name]

    @property
    def target_kind(self) -> str:
        return PROTOCOL_KINDS[self.protocol]

    @property
    def joined(self) -> bool:
        """One user in closed loop: its requests follow one another, so the k-th the client timed
        is the k-th the server answered (the per-request join)."""
        return self.loop == "closed" and self.users == 1

    def scenario(self, address: str, name: str = "calibration") -> dict[str, Any]:
        """The scenario's data for this case against a reference server at ``address``."""
        target = {
            "name": self.name,
            "kind": self.target_kind,
            "address": address,
            "model": MODEL,
            "inputs": [{"name": "INPUT0", "shape": [VALUES], "dtype": "FP32"}],
            "timeout": "10s",
        }
        shape: dict[str, Any]
        if self.loop == "closed":
            shape = {"kind": "steady", "users": self.users}
        else:
            assert self.rate_rps is not None
            in_flight = self.rate_rps * (MEAN_MS[self.law_name] + 1.0) / 1000.0
            shape = {
                "kind": "constant-rate",
                "rate": round(self.rate_rps, 3),
                "max_in_flight": max(16, min(512, math.ceil(in_flight * 4))),
            }
        return {
            "name": name,
            "duration": f"{self.duration_s:g}s",
            "warmup": f"{self.warmup_s:g}s",
            "targets": [target],
            "shape": shape,
        }
