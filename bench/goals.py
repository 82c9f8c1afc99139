"""Issue 20's goals, each with this run's figure, met or missed, and the ratio to the peers of the same
run: the first section of results.md.

The figures come from item 10 (bench/peers.py: the side-by-side table against Triton and the
reference server, the engine's pacing there, the scale-out) and item 11 (the traced per-request
residual at 200 req/s on Triton: a traced target's requests carry per-request ids, which only the
Python transport sends today, so that row is the Python transport's, not the engine's). Fidelity is judged on Triton (the issue's own
table), cost and pacing on the reference server (the generator's own ceiling). "Nothing lost" is
`make test` / `make fallback`, not a bench figure: its row says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RESIDUAL_MAX_MS = 0.25  # at 200 req/s, over gRPC and over HTTP (at or below h2load and hey)
TRACED_P99_MAX_MS = 0.5
SEND_LAG_200_MAX_MS = 0.1
SEND_LAG_80PCT_MAX_MS = 0.25
ACHIEVED_MAX_ERROR = 0.005
CPU_MAX_US = 25.0  # against the reference server, at saturation
CPU_MAX_VS_H2LOAD = 3.0
CPU_MAX_VS_WRK = 2.0
RPS_PER_CORE_MIN = 40_000.0
SCALE_OUT_MIN = 0.9  # N processes give at least 0.9 N times one process's rate
# issue 34's stream goals (item 12, bench/streams.py): TTFT within 50 us + 1 % at 100 streams, p50
# within 1 ms at 1,000, client CPU per streamed token at most 2 us
STREAM_ERROR_US, STREAM_ERROR_SHARE, STREAM_1000_MS, STREAM_CPU_US = 50.0, 0.01, 1.0, 2.0

ENGINE = {"grpc": "inferload engine (grpc)", "http": "inferload engine (http)"}
PEER = {"grpc": "h2load", "http": "hey"}  # the fidelity peers
COST_PEER = {"grpc": ("h2load", CPU_MAX_VS_H2LOAD), "http": ("wrk", CPU_MAX_VS_WRK)}


@dataclass(frozen=True)
class GoalRow:
    """One goal: what it is, this run's figure, the target, the verdict (True met, False missed, None
    not measured) and the ratio to the peer of the same run (text, may be empty)."""

    goal: str
    figure: str
    target: str
    met: bool | None
    peers: str = ""


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("met" if met else "**missed**")


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "–" if value is None else f"{format(value, fmt)}{unit}"


def _table(results: dict[str, Any], server: str) -> dict[str, Any]:
    return (((results.get("peers") or {}).get("servers") or {}).get(server) or {}).get("table") or {}


def _row_of(table: dict[str, Any], tool: str) -> dict[str, Any]:
    return table.get(tool) or {}


def fidelity_rows(results: dict[str, Any]) -> list[GoalRow]:
    table = _table(results, "triton")
    rows = []
    for protocol in ("grpc", "http"):
        engine = _row_of(table, ENGINE[protocol]).get("residual_ms")
        peer = _row_of(table, PEER[protocol]).get("residual_ms")
        met = None if engine is None else (engine <= RESIDUAL_MAX_MS and (peer is None or engine <= peer))
        ratio = f"{PEER[protocol]} {peer:.3f} ms" if peer is not None else ""
        if engine is not None and peer:
            ratio += f"; engine − {PEER[protocol]} {engine - peer:+.3f} ms"
        rows.append(
            GoalRow(
                f"Fidelity, {protocol}: engine's mean − Triton's mean request at 200 req/s",
                _num(engine, ".3f", " ms"),
                f"≤ {RESIDUAL_MAX_MS:g} ms and ≤ {PEER[protocol]}'s",
                met,
                ratio,
            )
        )
    traced = results.get("traced_residual") or {}
    p99 = (traced.get("residual_ms") or {}).get("p99") if traced.get("measured") else None
    rows.append(
        GoalRow(
            "Fidelity: traced per-request residual p99 (the engine: every request carries an id; gRPC, Triton, 200 req/s, open loop)",
            _num(p99, ".3f", " ms"),
            f"≤ {TRACED_P99_MAX_MS:g} ms",
            None if p99 is None else p99 <= TRACED_P99_MAX_MS,
        )
    )
    return rows


def pacing_rows(results: dict[str, Any]) -> list[GoalRow]:
    engine = _row_of(_table(results, "reference"), ENGINE["grpc"])
    at_80 = ((results.get("peers") or {}).get("servers") or {}).get("reference", {}).get("pacing_80pct") or {}
    lag_200 = engine.get("send_lag_p99_ms")
    lag_80 = (at_80.get("send_lag_ms") or {}).get("p99")
    rows = [
        GoalRow(
            "Pacing: engine's send-lag p99 at 200 req/s (reference server)",
            _num(lag_200, ".3f", " ms"),
            f"≤ {SEND_LAG_200_MAX_MS:g} ms",
            None if lag_200 is None else lag_200 <= SEND_LAG_200_MAX_MS,
        ),
        GoalRow(
            "Pacing: engine's send-lag p99 at 80 % of its own ceiling (reference server)",
            _num(lag_80, ".3f", " ms") + (f" at {at_80['rate_rps']:.0f} req/s" if at_80.get("rate_rps") else ""),
            f"≤ {SEND_LAG_80PCT_MAX_MS:g} ms",
            None if lag_80 is None else lag_80 <= SEND_LAG_80PCT_MAX_MS,
        ),
    ]
    for label, ratio in (("200 req/s", engine.get("achieved_ratio")), ("80 %", at_80.get("achieved_ratio"))):
        rows.append(
            GoalRow(
                f"Pacing: achieved / configured rate at {label}",
                _num(ratio, ".4f"),
                f"within {ACHIEVED_MAX_ERROR:.1%}",
                None if ratio is None else abs(ratio - 1) <= ACHIEVED_MAX_ERROR,
            )
        )
    return rows


def cost_rows(results: dict[str, Any]) -> list[GoalRow]:
    table = _table(results, "reference")
    rows = []
    for protocol in ("grpc", "http"):
        engine = _row_of(table, ENGINE[protocol]).get("us_per_request")
        peer_name, peer_max = COST_PEER[protocol]
        peer = _row_of(table, peer_name).get("us_per_request")
        ratio = engine / peer if engine is not None and peer else None
        met = None
        if engine is not None:
            met = engine <= CPU_MAX_US and (ratio is None or ratio <= peer_max)
        rows.append(
            GoalRow(
                f"Cost, {protocol}: engine's client CPU per request at saturation (reference server)",
                _num(engine, ".1f", " µs") + (f" = {1e6 / engine:,.0f} req/s per core" if engine else ""),
                f"≤ {CPU_MAX_US:g} µs (≥ {RPS_PER_CORE_MIN:,.0f} req/s per core), ≤ {peer_max:g}× {peer_name}",
                met,
                "" if ratio is None else f"{ratio:.2f}× {peer_name} ({peer:.1f} µs)",
            )
        )
    return rows


def scale_row(results: dict[str, Any]) -> GoalRow:
    scale = (results.get("peers") or {}).get("scale_out") or {}
    speedup = scale.get("speedup_2_vs_1")
    return GoalRow(
        "Scale-out: engine, `--workers 2` / one process (reference server, saturated)",
        _num(speedup, ".2f", "×"),
        f"≥ {2 * SCALE_OUT_MIN:.1f}× (0.9·N)",
        None if speedup is None else speedup >= 2 * SCALE_OUT_MIN,
        "2 cores: client and server share them, so N = 2 is as far as this machine allows",
    )


def stream_rows(results: dict[str, Any]) -> list[GoalRow]:
    """Issue 34's stream goals from item 12: TTFT error against the script at 100 and 1,000 streams,
    client CPU per streamed token (one token per event there)."""
    runs = {run["streams"]: run for run in (results.get("stream_fidelity") or {}).get("runs", [])}
    rows = []
    at_100 = runs.get(100)
    for key in ("p50", "p99"):
        error = None if at_100 is None else at_100["ttft_error_ms"][key]
        truth = None if at_100 is None else at_100["ttft_ms"]["script"][key]
        limit = None if truth is None else STREAM_ERROR_US / 1000 + STREAM_ERROR_SHARE * truth
        rows.append(
            GoalRow(
                f"TTFT {key} error at 100 streams (reference server, script's TTFT)",
                _num(error, "+.3f", " ms"),
                "≤ 50 µs + 1 %" + ("" if limit is None else f" ({limit:.3f} ms)"),
                None if error is None or limit is None else abs(error) <= limit,
                "vllm-bench: Rust client +28 ms, Python +294 ms at 1,000 streams (its own notes)",
            )
        )
    at_1000 = runs.get(1000)
    error = None if at_1000 is None else at_1000["ttft_error_ms"]["p50"]
    rows.append(
        GoalRow(
            "TTFT p50 error at 1,000 streams",
            _num(error, "+.3f", " ms"),
            f"≤ {STREAM_1000_MS:g} ms",
            None if error is None else abs(error) <= STREAM_1000_MS,
            "the server's own timer lateness is in it: `server_late_ms` in results.json",
        )
    )
    cpu = [run["client_cpu_us_per_event"] for run in runs.values() if run.get("client_cpu_us_per_event") is not None]
    rows.append(
        GoalRow(
            "Client CPU per streamed token (whole `inferload run`, start-up included)",
            _num(min(cpu) if cpu else None, ".2f", " µs"),
            f"≤ {STREAM_CPU_US:g} µs",
            None if not cpu else min(cpu) <= STREAM_CPU_US,
            "the run with the most events; an upper bound",
        )
    )
    return rows


def join_row(results: dict[str, Any]) -> GoalRow:
    """Issue 35's join goal from item 13: the client − server TTFT residual's p99 at 10 % load on llama.cpp."""
    join = results.get("llm_join") or {}
    p99 = (join.get("residual_ms") or {}).get("p99")
    limit = join.get("goal_p99_ms", 0.5)
    return GoalRow(
        "TTFT client − server residual p99 at 10 % load (llama.cpp, every request joined)",
        _num(p99, ".3f", " ms"),
        f"≤ {limit:g} ms",
        None if p99 is None else p99 <= limit,
        "at " + (f"{join['rate_rps']:g} req/s of {join['capacity_rps']:g}" if join else "(not run)"),
    )


def goal_rows(results: dict[str, Any]) -> list[GoalRow]:
    return [
        *fidelity_rows(results),
        *pacing_rows(results),
        *cost_rows(results),
        scale_row(results),
        *stream_rows(results),
        join_row(results),
        GoalRow(
            "Nothing lost: every test on the engine, the fallback subset on the Python path",
            "–",
            "pass",
            None,
            "`make test`, `make fallback`",
        ),
    ]


def goals_section(results: dict[str, Any], soak: dict[str, Any] | None = None) -> list[str]:
    """The table of issue 20's goals for this run, the machine named; rows not measured say so."""
    del soak  # issue 14's soak goal is not one of issue 20's
    machine = results.get("machine") or {}
    load_start = machine.get("load_average_at_start")
    load_end = machine.get("load_average_at_end")
    where = (
        f"{machine.get('cpu_model', '?')}, {machine.get('usable_cores', '?')} cores, load average "
        f"{load_start[0] if load_start else '?'} at the start and {load_end[0] if load_end else '?'} at the end"
    )
    lines = [
        "## Issue 20's goals in this run",
        "",
        f"Machine: {where}." + (" A `--quick` run: one round of short runs." if results.get("quick") else ""),
        "",
        "| goal | figure | target | | the peers, same run |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.goal} | {r.figure} | {r.target} | {verdict(r.met)} | {r.peers} |" for r in goal_rows(results)]
    return lines
