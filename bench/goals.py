"""Issue 14's five goals, each with this run's figure and met / missed: the first table of results.md.

The figures come from the items of the same run (1–4 and 8); goal 4 (memory soak) from a soak run
(`make soak`, `bench/soak.py`) whose `soak.json` is given with `--soak-result`, since 30 minutes
do not belong in every bench run.
"""

from __future__ import annotations

from typing import Any

SCALE_OUT_MIN = 0.9  # goal 5: N processes give at least 0.9 N times one process's rate
SOAK_GROWTH_MAX = 0.05  # goal 4: RSS growth after warm-up


def _mark(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**missed**")


def _num(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _cpu_rows(results: dict[str, Any], target_us: float) -> list[tuple[str, str, str, str]]:
    engine = results.get("grpc_engine") or {}
    us = engine.get("us_per_request_median") or {}
    sat, paced = us.get("saturation") or {}, us.get("paced") or {}
    default = sat.get("grpc-inferload")
    best_name, best = min(
        ((name, value) for name, value in sat.items() if name.startswith("grpc-inferload") and value is not None),
        key=lambda item: item[1],
        default=(None, None),
    )
    rows = [
        (
            "1. client CPU per request at saturation, default engine",
            f"{_num(default, '.0f')} µs",
            f"≤ {target_us:g} µs",
            _mark(None if default is None else default <= target_us),
        ),
    ]
    if best_name is not None and best is not None and best_name != "grpc-inferload":
        rows.append(
            (
                f"1. same, best opt-in engine (`{best_name}`)",
                f"{_num(best, '.0f')} µs",
                f"≤ {target_us:g} µs",
                _mark(best <= target_us),
            )
        )
    ceiling, plain = sat.get("grpc-aio-ceiling"), sat.get("grpc-plain")
    if default is not None and ceiling:
        rows.append(
            (
                "1. default engine / raw grpc.aio ceiling, saturation",
                f"{default / ceiling:.2f}",
                "report",
                f"ceiling {ceiling:.0f} µs",
            )
        )
    if default is not None and plain:
        rows.append(
            (
                "1. default engine / plain Locust gRPC user, saturation",
                f"{default / plain:.2f}",
                "≤ 0.5 (2×)",
                _mark(default / plain <= 0.5),
            )
        )
    if paced.get("grpc-inferload") is not None:
        rows.append(
            (
                "1. client CPU per request, paced 250 req/s",
                f"{paced['grpc-inferload']:.0f} µs",
                "lower than ~275 µs",
                _mark(paced["grpc-inferload"] < 275),
            )
        )
    return rows


def _fidelity_row(results: dict[str, Any], target_ms: float) -> tuple[str, str, str, str]:
    half = next((row for row in (results.get("fidelity") or {}).get("loads", []) if row.get("fraction") == 0.5), None)
    gap = None if half is None else (half.get("grpc-inferload") or {}).get("gap_ms")
    return (
        "2. client mean − Triton's mean request at 50 % load",
        f"{_num(gap, '.2f')} ms",
        f"≤ {target_ms:g} ms",
        _mark(None if gap is None else gap <= target_ms),
    )


def _residual_row(results: dict[str, Any], target_ms: float) -> tuple[str, str, str, str]:
    half = next((row for row in (results.get("fidelity") or {}).get("loads", []) if row.get("fraction") == 0.5), None)
    traced = (half or {}).get("traced_residual") or {}
    if not traced.get("measured"):
        return ("2. per-request residual distribution (traced run, 50 %)", "–", "in the report", _mark(None))
    r = traced["residual_ms"]
    figure = f"p50 {r['p50']:.2f} / p90 {r['p90']:.2f} / p99 {r['p99']:.2f} ms, n {r['n']}"
    return (
        "2. per-request residual distribution (traced run, 50 %)",
        figure,
        f"in the report; p50 ≤ {target_ms:g} ms",
        f"in the report; p50 {_mark(r['p50'] <= target_ms)}",
    )


def _open_loop_rows(results: dict[str, Any], lag_ms: float, rate_error: float) -> list[tuple[str, str, str, str]]:
    runs = [r for r in (results.get("open_loop_accuracy") or {}).get("runs", []) if r.get("fraction") == 0.8]
    rows = []
    for r in runs:
        lag = (r.get("send_lag_ms") or {}).get("p99")
        ratio = r.get("achieved_ratio")
        rows.append(
            (
                f"3. {r['kind']} at 80 %: send lag p99",
                f"{_num(lag, '.2f')} ms",
                f"≤ {lag_ms:g} ms",
                _mark(None if lag is None else lag <= lag_ms),
            )
        )
        rows.append(
            (
                f"3. {r['kind']} at 80 %: achieved / configured",
                _num(ratio, ".4f"),
                f"within {rate_error:.0%}",
                _mark(None if ratio is None else abs(ratio - 1) <= rate_error),
            )
        )
    return rows or [("3. open-loop send lag p99 at 80 %", "–", f"≤ {lag_ms:g} ms", _mark(None))]


def _soak_row(soak: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """The worst load-generator process of a soak (bench/soak.py's soak.json; InfluxDB is not ours)."""
    label = "4. RSS growth after warm-up, worst generator process"
    if not soak:
        return (f"{label}, 30-min run", "–", f"< {SOAK_GROWTH_MAX:.0%}", "not in this run (`make soak`, then `--soak-result`)")
    growth = {
        name: p.get("growth_max", p.get("growth"))
        for name, p in (soak.get("processes") or {}).items()
        if name != "influxdb" and p.get("growth_max", p.get("growth")) is not None
    }
    if not growth:
        return (f"{label} ({soak.get('minutes', '?')} min)", "–", f"< {SOAK_GROWTH_MAX:.0%}", _mark(None))
    name, worst = max(growth.items(), key=lambda item: item[1])
    return (
        f"{label} ({soak.get('minutes', '?')} min, {soak.get('workers', '?')} workers)",
        f"{worst:+.2%} ({name})",
        f"< {SOAK_GROWTH_MAX:.0%}",
        _mark(worst < SOAK_GROWTH_MAX),
    )


def _scale_row(results: dict[str, Any]) -> tuple[str, str, str, str]:
    scale = (results.get("grpc_engine") or {}).get("scale_out") or {}
    speedup = scale.get("speedup_2_vs_1")
    return (
        "5. N = 2 processes / N = 1 (closed loop, same Triton)",
        f"{_num(speedup, '.2f')}×",
        f"≥ {2 * SCALE_OUT_MIN:.1f}× (0.9·N)",
        _mark(None if speedup is None else speedup >= 2 * SCALE_OUT_MIN),
    )


def goals_section(results: dict[str, Any], soak: dict[str, Any] | None = None) -> list[str]:
    """The table of issue 14's goals for this run; rows whose items did not run say so."""
    targets = results["targets"]
    rows = [
        *_cpu_rows(results, targets.get("grpc_saturation_us_per_request", 80.0)),
        _fidelity_row(results, targets["fidelity_half_load_ms"]),
        _residual_row(results, targets["fidelity_half_load_ms"]),
        *_open_loop_rows(results, targets["open_loop_send_lag_p99_ms"], targets["open_loop_rate_error"]),
        _soak_row(soak),
        _scale_row(results),
    ]
    lines = ["## Issue 14's goals in this run", "", "| goal | figure | target | |", "|---|---|---|---|"]
    lines += [f"| {goal} | {figure} | {target} | {verdict} |" for goal, figure, target, verdict in rows]
    return lines
