"""results.json -> results.md: one table per benchmark, targets marked met or missed."""

from __future__ import annotations

from typing import Any

from bench.goals import goals_section
from bench.trace_cost import markdown as trace_cost_markdown


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def machine_section(m: dict[str, Any]) -> list[str]:
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    return [
        f"- CPU: {m['cpu_model']}, {m['usable_cores']} usable cores ({m['logical_cores']} logical), "
        f"{m['memory_gib']} GiB memory, {m['os']}",
        f"- Python {m['python']}; {packages}",
        f"- load average at start: {', '.join(str(x) for x in m['load_average_at_start'])}"
        + (f"; at end: {', '.join(str(x) for x in m['load_average_at_end'])}" if m.get("load_average_at_end") else ""),
    ]


def client_cpu_section(c: dict[str, Any], targets: dict[str, float]) -> list[str]:
    us = c["us_per_request_median"]
    r = c["ratios"]
    lines = [
        f"## 1. Client CPU per request ({c['requests']} requests at {c['rate_rps']:g} req/s, {c['users']} users; "
        f"median of {c['rounds']} interleaved rounds; wrk: closed loop, {c['users']} connections)",
        "",
        "| client | CPU µs / request |",
        "|---|---|",
    ]
    lines += [f"| {variant} | {_fmt(value)} |" for variant, value in us.items()]
    g, rest = r["grpc_inferload_vs_plain"], r["rest_inferload_vs_plain"]
    lines += [
        "",
        "| ratio | value | target |",
        "|---|---|---|",
        f"| Triton gRPC: inferload / plain Locust gRPC user | {_fmt(g, 2)} | ≤ {targets['grpc_cpu_ratio']} {_mark(None if g is None else g <= targets['grpc_cpu_ratio'])} |",
        f"| Triton HTTP: inferload / plain FastHttpUser | {_fmt(r['http_inferload_vs_plain'], 2)} | – |",
        f"| TorchServe REST: inferload / plain FastHttpUser | {_fmt(rest, 2)} | ≤ {targets['rest_cpu_ratio']} {_mark(None if rest is None else rest <= targets['rest_cpu_ratio'])} |",
        f"| TorchServe REST: inferload / wrk (ceiling) | {_fmt(r['rest_inferload_vs_wrk'], 2)} | – |",
    ]
    return lines


def max_section(m: dict[str, Any]) -> list[str]:
    lines = [
        f"## 2. Max requests/s of one worker process (closed loop, {m['users']} users, {m['seconds']:g} s)",
        "",
        "| user class | req/s | client CPU (cores) | server CPU (cores) | machine idle | limit |",
        "|---|---|---|---|---|---|",
    ]
    for variant, r in m["variants"].items():
        lines.append(
            f"| {variant} | {_fmt(r['rps'], 0)} | {_fmt(r['client_core_util'], 2)} | "
            f"{_fmt(r['server_core_util'], 2)} | {_fmt(r['machine_idle_frac'] * 100, 0)} % | {r['limit']} |"
        )
    return lines


def fidelity_section(f: dict[str, Any], target_ms: float) -> list[str]:
    lines = [
        f"## 3. Fidelity over gRPC (client mean latency − Triton's own mean request duration; {f['users']} users, "
        f"{f['seconds']:g} s per load)",
        "",
        "| load | req/s | client mean ms | Triton request ms | gap ms | target |",
        "|---|---|---|---|---|---|",
    ]
    for row in f["loads"]:
        for variant, note in (
            ("grpc-inferload", ""),
            ("grpc-inferload-python", " (Python transport)"),
            ("grpc-plain", " (plain user)"),
        ):
            r = row.get(variant)
            if r is None:
                continue
            target = ""
            if row["fraction"] == 0.5 and variant == "grpc-inferload":
                target = f"≤ {target_ms} {_mark(None if r['gap_ms'] is None else r['gap_ms'] <= target_ms)}"
            label = f"{row['fraction'] * 100:.0f} %{note}"
            lines.append(
                f"| {label} | {_fmt(r['rps'], 0)} | {_fmt(r['client_mean_ms'], 3)} | "
                f"{_fmt(r['server_request_ms_avg'], 3)} | {_fmt(r['gap_ms'], 3)} | {target} |"
            )
    for row in f["loads"]:
        traced = row.get("traced_residual")
        if traced and traced.get("measured"):
            r = traced["residual_ms"]
            lines += [
                "",
                f"Per-request residual (client latency − Triton's span to its response send), a traced "
                f"`inferload run` at {traced['rate_rps']:g} req/s ({row['fraction'] * 100:.0f} %): n {r['n']}, "
                f"min {r['min']:.3f}, p50 {r['p50']:.3f}, p90 {r['p90']:.3f}, p99 {r['p99']:.3f}, max {r['max']:.3f}, "
                f"mean {r['mean']:.3f} ms (the run's summary `residual_ms`: {_fmt(traced.get('summary_residual_ms'), 3)} ms).",
            ]
        elif traced:
            lines += ["", f"Per-request residual: not measured ({traced.get('note')})."]
    return lines


def open_loop_section(o: dict[str, Any], targets: dict[str, float]) -> list[str]:
    lines = ["## 4. Open-loop arrival accuracy (gRPC, real `locust` command)", ""]
    if not o.get("measured"):
        return [*lines, f"**{o['note']}**"]
    error, lag_target = targets["open_loop_rate_error"], targets["open_loop_send_lag_p99_ms"]
    lines += [
        f"Capacity {_fmt(o['capacity_rps'], 0)} req/s ({o['capacity_from']}); {o['max_in_flight']} senders; "
        f"{o['warmup_s']} s warm-up excluded, {o['steady_s']} s measured; Poisson seed {o['seed']}. "
        "*expected by seed* = the arrivals `inferload.traffic.arrivals` itself draws for that seed over the same "
        "steady window (the Poisson draw's own randomness); *sent / expected* = the generator's timing error.",
        "",
        "| shape | load | configured req/s | achieved req/s | achieved / configured | expected by seed (/ configured) "
        "| sent / expected | unsent | send lag p50 / p99 / max ms | machine idle | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in o["runs"]:
        ratio, lag = r["achieved_ratio"], r["send_lag_ms"]
        rate_ok = None if ratio is None else abs(ratio - 1) <= error
        lag_ok = None if lag["p99"] is None else lag["p99"] <= lag_target
        lines.append(
            f"| {r['kind']} | {r['fraction'] * 100:.0f} % | {_fmt(r['configured_rps'], 0)} | {_fmt(r['achieved_rps'], 1)} | "
            f"{_fmt(ratio, 4)} | {r['expected_arrivals']} ({_fmt(r['expected_ratio'], 4)}) | {_fmt(r['sent_vs_expected'], 4)} | "
            f"{r['unsent']} | {_fmt(lag['p50'], 3)} / {_fmt(lag['p99'], 3)} / {_fmt(lag['max'], 1)} | "
            f"{_fmt((r['machine_idle_frac'] or 0) * 100, 0)} % | "
            f"rate ±{error * 100:g} % {_mark(rate_ok)}; lag p99 ≤ {lag_target:g} ms {_mark(lag_ok)} |"
        )
    for r in o["runs"]:
        p = r.get("profile")
        if p and p.get("samples"):
            top = "; ".join(f"{frame} {share * 100:.1f} %" for frame, share in p["self"][:8])
            files = "; ".join(f"{name} {share * 100:.0f} %" for name, share in p["inclusive_by_file"][:10])
            lines += [
                "",
                f"py-spy, {r['kind']} at {r['fraction'] * 100:.0f} % ({p['samples']} samples, {p['raw']}): "
                f"self: {top}. Inclusive by file: {files}.",
            ]
    return lines


def streaming_section(s: dict[str, Any], targets: dict[str, float]) -> list[str]:
    lines = ["## 5. Streaming cost (InfluxDB 1.x sink)", ""]
    if not s.get("measured"):
        return [*lines, f"**{s['note']}**"]
    sink = s["sink"]
    pps = sink["points_per_s"]
    cost = s["throughput_cost"]
    return [
        *lines,
        "| figure | value | target |",
        "|---|---|---|",
        f"| sink points/s into a real InfluxDB ({sink['points_written']} points, batches of {sink['batch_size']}) | "
        f"{_fmt(pps, 0)} | ≥ {targets['sink_points_per_s']:,} {_mark(pps >= targets['sink_points_per_s'])} |",
        f"| generator req/s, streaming off / on | {_fmt(s['rps']['off'], 0)} / {_fmt(s['rps']['on'], 0)} | |",
        f"| throughput cost of streaming | {_fmt(cost * 100 if cost is not None else None, 1)} % | "
        f"≤ {targets['streaming_cost'] * 100:g} % {_mark(None if cost is None else cost <= targets['streaming_cost'])} |",
        f"| CPU µs/request off / on | {_fmt(s['us_per_request']['off'])} / {_fmt(s['us_per_request']['on'])} | |",
    ]


def data_set_section(d: dict[str, Any], targets: dict[str, float]) -> list[str]:
    limit = targets["data_set_cpu_cost"]
    lines = [
        f"## 7. Data-set rotation cost ({d['samples']:,} samples vs a fixed payload, {d['requests']} requests at "
        f"{d['rate_rps']:g} req/s, {d['users']} users, median of {d['rounds']} rounds)",
        "",
        "| variant | CPU µs/request fixed | CPU µs/request data set | cost | target |",
        "|---|---|---|---|---|",
    ]
    for variant, us in d["us_per_request_median"].items():
        cost = d["cpu_cost"][variant]
        lines.append(
            f"| {variant} | {_fmt(us['fixed'])} | {_fmt(us['data set'])} | {_fmt(cost * 100 if cost is not None else None, 1)} % | "
            f"≤ {limit * 100:g} % {_mark(None if cost is None else cost <= limit)} |"
        )
    return lines


def grpc_engine_section(g: dict[str, Any], target_us: float) -> list[str]:
    lines = [
        f"## 8. gRPC send path (CPU µs per request, median of {g['rounds']} interleaved rounds; paced: "
        f"{g['loads']['paced']['rate_rps']:g} req/s, {g['loads']['paced']['users']} users; saturation: closed loop, "
        f"{g['loads']['saturation']['users']} users)",
        "",
        "| client | paced µs/req | saturation µs/req | saturation req/s |",
        "|---|---|---|---|",
    ]
    us, rps = g["us_per_request_median"], g["rps_median"]
    for variant in us["paced"]:
        lines.append(
            f"| {variant} | {_fmt(us['paced'][variant])} | {_fmt(us['saturation'][variant])} | {_fmt(rps['saturation'][variant], 0)} |"
        )
    sat = us["saturation"].get("grpc-inferload")
    lines += [
        "",
        "| ratio | paced | saturation |",
        "|---|---|---|",
        *(
            f"| {name.replace('_', ' ')} | {_fmt(g['ratios']['paced'][name], 2)} | {_fmt(g['ratios']['saturation'][name], 2)} |"
            for name in g["ratios"]["saturation"]
        ),
        "",
        f"Saturation CPU per request ≤ {target_us:g} µs: {_fmt(sat)} µs {_mark(None if sat is None else sat <= target_us)}.",
    ]
    scale = g.get("scale_out")
    if scale:
        lines += [
            "",
            f"Scale-out (closed loop, {scale['users_per_process']} users per process, {scale['seconds']:g} s), "
            f"2 vs 1: {_fmt(scale['speedup_2_vs_1'], 2)}×",
            "",
            "| processes | total req/s | per process req/s | client cores | server cores | machine idle |",
            "|---|---|---|---|---|---|",
        ]
        for n, row in scale["processes"].items():
            lines.append(
                f"| {n} | {_fmt(row['total_rps'], 0)} | {row['per_process_rps']} | {row['client_core_util']} | "
                f"{_fmt(row['server_core_util'], 2)} | {_fmt(row['machine_idle_frac'] * 100, 0)} % |"
            )
    return lines


def profile_section(p: dict[str, Any]) -> list[str]:
    lines = ["## Profiles (py-spy, self time share of samples)", ""]
    for variant, summary in p.items():
        if "error" in summary:
            lines.append(f"- {variant}: {summary['error']}")
            continue
        top = "; ".join(f"{frame} {share * 100:.1f} %" for frame, share in summary["self"][:8])
        lines.append(f"- **{variant}** ({summary['samples']} samples, {summary['raw']}): {top}")
    return lines


def peers_section(p: dict[str, Any]) -> list[str]:
    """Item 10: the side-by-side table, one per server, and the engine's pacing and scale-out."""
    d = p["durations"]
    lines = [
        f"## 10. The peers side by side ({p['in_flight']} in flight at saturation; median of {p['rounds']} round(s))",
        "",
        f"Black box: CPU = the tool's process tree (wait4 rusage); requests = the server's own count; CPU per "
        f"request and req/s = difference over difference of a {d['short_s']:g} s and a {d['long_s']:g} s run. "
        f"Residual = the tool's own mean − the server's mean request duration in a {d['paced_s']:g} s run at "
        f"{p['fidelity_rps']:g} req/s (wrk cannot pace). Load average {p['load_start'][0]} at the start"
        + (f", {p['load_end'][0]} at the end." if p.get("load_end") else "."),
    ]
    if p.get("missing"):
        lines += ["", "Not run: " + "; ".join(f"{tool} ({why})" for tool, why in p["missing"].items())]
    for server, measured in p["servers"].items():
        lines += ["", f"**{server}**", ""]
        if "error" in measured:
            lines.append(f"failed: {measured['error']}")
            continue
        lines += [
            "| client | protocol | CPU µs / request | req/s saturated | residual at 200 req/s | send-lag p99 | failures |",
            "|---|---|---|---|---|---|---|",
        ]
        for tool, row in measured["table"].items():
            residual = row.get("residual_ms")
            lag = row.get("send_lag_p99_ms")
            lines.append(
                f"| {tool} | {row['protocol']} | {_fmt(row['us_per_request'])} | {_fmt(row['rps'], 0)} | "
                f"{'–' if residual is None else f'{residual:.3f} ms'} | {'–' if lag is None else f'{lag:.3f} ms'} | "
                f"{row['failures']}{' (' + '; '.join(row['errors'][:2]) + ')' if row['errors'] else ''} |"
            )
        at_80 = measured.get("pacing_80pct")
        if at_80:
            lag = at_80.get("send_lag_ms") or {}
            lines += [
                "",
                f"Engine at 80 % of its own ceiling ({at_80['ceiling_rps']:.0f} req/s): {at_80['rate_rps']} req/s, "
                f"achieved ratio {at_80.get('achieved_ratio')}, send lag p50 {lag.get('p50')} / p99 {lag.get('p99')} "
                f"/ max {lag.get('max')} ms.",
            ]
    scale = p.get("scale_out")
    if scale:
        rates = {tool: r.get("rps") for tool, r in scale["rps"].items()}
        lines += [
            "",
            f"Scale-out ({scale['server']}): "
            + ", ".join(f"{t} {v} req/s" for t, v in rates.items())
            + f"; speedup {scale['speedup_2_vs_1']}.",
        ]
    return lines


def stream_section(streams: dict[str, Any]) -> list[str]:
    """Item 12: inferload's TTFT, gaps and whole-stream time against the reference server's script and
    records, per number of concurrent streams."""
    lines = [
        f"## 12. Stream fidelity (reference server: {streams['events_per_request']} events a request, one every"
        f" {streams['hold_ms']:g} ms, {streams['steady_s']} s steady)",
        "",
        "| streams | requests | TTFT p50 / p99 (ms) | error p50 / p99 | gap p50 error | stream p50 error"
        " | server late p50 | CPU µs / event |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in streams["runs"]:
        ttft, error = run["ttft_ms"]["inferload"], run["ttft_error_ms"]
        lines.append(
            f"| {run['streams']} | {run['requests']} | {ttft['p50']} / {ttft['p99']} | {error['p50']} / {error['p99']}"
            f" | {run['gap_error_ms']['p50']} | {run['stream_error_ms']['p50']} | {run['server_late_ms']['p50']}"
            f" | {run['client_cpu_us_per_event']} |"
        )
    return lines


def render_markdown(results: dict[str, Any]) -> str:
    targets = results["targets"]
    lines = [
        f"# inferload bench {results['started_at']}",
        "",
        *goals_section(results, results.get("soak")),
        "",
        *machine_section(results["machine"]),
        "",
        f"Model `{results['model']}` on the real local Triton (and TorchServe for items 1–7) and the reference server (loopback).",
        "",
    ]
    if results.get("item_errors"):
        lines += [
            "Items that failed (the others' figures are kept): "
            + "; ".join(f"{k}: {v}" for k, v in results["item_errors"].items()),
            "",
        ]
    if "peers" in results:
        lines += [*peers_section(results["peers"]), ""]
    if "stream_fidelity" in results:
        lines += [*stream_section(results["stream_fidelity"]), ""]
    if "traced_residual" in results:
        t = results["traced_residual"]
        if t.get("measured"):
            r = t["residual_ms"]
            lines += [
                f"## 11. Traced per-request residual (the engine: every request carries an id; gRPC, Triton, open loop, {t['rate_rps']:g} req/s)",
                "",
                f"p50 {r['p50']} / p90 {r['p90']} / p99 {r['p99']} / max {r['max']} ms over {r['n']} joined requests.",
                "",
            ]
        else:
            lines += ["## 11. Traced per-request residual", "", f"not measured: {t.get('note')}", ""]
    if "client_cpu" in results:
        lines += [*client_cpu_section(results["client_cpu"], targets), ""]
    if "max_throughput" in results:
        lines += [*max_section(results["max_throughput"]), ""]
    if "fidelity" in results:
        lines += [*fidelity_section(results["fidelity"], targets["fidelity_half_load_ms"]), ""]
    if "open_loop_accuracy" in results:
        lines += [*open_loop_section(results["open_loop_accuracy"], targets), ""]
    if "streaming" in results:
        lines += [*streaming_section(results["streaming"], targets), ""]
    if "data_set" in results:
        lines += [*data_set_section(results["data_set"], targets), ""]
    if "grpc_engine" in results:
        lines += [*grpc_engine_section(results["grpc_engine"], targets.get("grpc_saturation_us_per_request", 80.0)), ""]
    if "trace_cost" in results:
        lines += [*trace_cost_markdown(results["trace_cost"], targets["trace_cost"]), ""]
    if "profiles" in results:
        lines += [*profile_section(results["profiles"]), ""]
    if "elapsed_s" in results:
        lines.append(f"Bench wall time: {results['elapsed_s']} s.")
    return "\n".join(lines) + "\n"
