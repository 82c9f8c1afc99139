"""`inferload calibrate`: the cases run in order, the roofline found, the certificate written.

Order: a reference server with no delay measures each protocol's loopback floor (`runner.py`; again
on each law's server: the floor depends on how long the client idles) and the generator's ceiling (closed loop, many users, law none); then, one reference server per law,
closed-loop cases and open-loop cases at fixed low rates and at fractions of the ceiling.
docs/calibration.md says what each figure means.

Options are checked before anything starts (exit 2, one line naming the option): the bounds, the
protocols, ``--out`` and the latest certificate's place (``INFERLOAD_HOME`` or ``HOME``) written to.
The whole calibration runs in one `ChildProcesses` block: SIGINT, SIGTERM or SIGHUP is forwarded
to the case's run, which stops; then the reference server stops and the command exits with 128 +
the signal's number, writing no certificate (`runner.CalibrationStopped`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import platform
import shutil
import socket
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from inferload.calibrate.runner import (
    LAWS,
    STREAM_EVENTS,
    STREAM_FLOOR_LAW,
    STREAM_HOLD_MS,
    Case,
    FloorProbe,
    Plan,
    RunLayout,
    StreamCase,
    joined_errors_us,
    judge,
    judge_streams,
    plan,
    probe_floor,
    run_case,
    stop_if_signalled,
    stream_truth,
    true_latencies_ns,
)
from inferload.errors import UsageError
from inferload.launch.child_processes import ChildProcesses
from inferload.local.reference_server import ReferenceServerProcess, reference_config_from_dict
from inferload.results.calibration import (
    Bounds,
    Calibration,
    CaseResult,
    Goal,
    PercentileError,
    Roofline,
    StreamCaseResult,
    default_calibration_path,
    latest_calibration_place,
)
from inferload.run import cli_values
from inferload.run.results_dir import unwritable_problem


# calibration.html: the certificate as a page in the report's style (one self-contained file).
def _cell(value: object) -> str:
    if value is None:
        return "<td>—</td>"
    if isinstance(value, float):
        return f"<td>{value:,.3f}</td>" if abs(value) < 10 else f"<td>{value:,.1f}</td>"
    return f"<td>{escape(str(value))}</td>"


def write_html(calibration: Calibration, path: Path) -> Path:
    from inferload.results.report import STYLE

    c = calibration
    b = c.bounds
    rows = []
    for case in c.cases:
        cells = [_cell(case.name), _cell(case.requests), _cell(case.server_records)]
        for key in ("p50", "p90", "p99", "p999"):
            p = case.percentiles[key]
            text = "—" if p.error_us is None else f"{p.true_ms:.3f} → {p.measured_ms:.3f} ms ({p.error_us:+.0f} µs)"
            cells.append(f'<td class="{"" if p.within else "miss"}">{escape(text)}</td>')
        rate = (
            "—"
            if case.achieved_rps is None
            else f"{case.achieved_rps:.1f} / {case.configured_rps:.1f} ({case.rate_error_pct:+.2f} %)"
        )
        lag = "—" if not case.send_lag_ms else f"{case.send_lag_ms.get('p50')} / {case.send_lag_ms.get('p99')}"
        joined = "—" if not case.joined_error_us else f"{case.joined_error_us.get('p5')} / {case.joined_error_us.get('p50')}"
        cells += [_cell(rate), _cell(lag), _cell(case.unsent), _cell(case.cpu_us_per_request), _cell(joined)]
        cells.append(
            f'<td class="{"ok" if case.within_bounds else "miss"}">{"within" if case.within_bounds else escape("; ".join(case.misses))}</td>'
        )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    roof = "".join(
        f"<tr><td>{escape(p)}</td>{_cell(r.rps_per_process)}{_cell(r.first_failing_rps_per_process)}"
        f"{_cell(', '.join(f'{x:g}' for x in r.tested_rps_per_process))}{_cell(r.ceiling_rps_per_process)}</tr>"
        for p, r in c.roofline.items()
    )
    floor = "".join(
        f"<tr><td>{escape(law)}</td><td>{escape(p)}</td>{_cell(f.get('samples'))}{_cell(f.get('p50_us'))}"
        f"{_cell(f.get('p90_us'))}{_cell(f.get('p99_us'))}</tr>"
        for law, by_protocol in c.floor.items()
        if law != "method"
        for p, f in by_protocol.items()
    )
    goals = "".join(
        f'<tr><td>{escape(g.goal)}</td><td class="{"" if g.met is None else "ok" if g.met else "miss"}">'
        f"{'not judged' if g.met is None else 'met' if g.met else 'missed'}</td><td>{escape(g.figure)}</td></tr>"
        for g in c.goals
    )

    def stream_cell(p: PercentileError) -> str:
        text = "—" if p.error_us is None else f"{p.true_ms:.3f} → {p.measured_ms:.3f} ms ({p.error_us:+.0f} µs)"
        return f'<td class="{"" if p.within else "miss"}">{escape(text)}</td>'

    stream_rows = "".join(
        "<tr>"
        + _cell(case.name)
        + _cell(case.streams)
        + _cell(case.requests)
        + _cell(case.server_records)
        + "".join(stream_cell(p) for p in (*case.ttft.values(), *case.tpot.values(), case.itl_mean))
        + _cell(case.cpu_us_per_event)
        + f'<td class="{"ok" if case.within_bounds else "miss"}">'
        + ("within" if case.within_bounds else escape("; ".join(case.misses)))
        + "</td></tr>"
        for case in c.stream_cases
    )
    streams_section = (
        f"""<h2>Streams (true → measured)</h2>
<p>openai-chat streams, one per user, closed loop: {STREAM_EVENTS} content events of one token per request,
{STREAM_HOLD_MS:g} ms apart. The truth: the server's first content event − received, plus a draw of the
{STREAM_FLOOR_LAW} law's HTTP floor (TTFT); (last − first content event) / {STREAM_EVENTS - 1} per request (TPOT); their
mean gap (ITL mean).</p>
<table><tr><th>case</th><th>streams</th><th>requests</th><th>server records</th><th>TTFT p50</th><th>TTFT p90</th>
<th>TTFT p99</th><th>TPOT p50</th><th>TPOT p99</th><th>ITL mean</th><th>client CPU µs/event</th><th>verdict</th></tr>
{stream_rows}</table>"""
        if c.stream_cases
        else ""
    )
    m = c.machine
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>inferload calibration {escape(c.created_at)}</title>
<style>{STYLE}
td.miss {{ color: #b00020; }} td.ok {{ color: #1b7f3b; }}</style></head><body>
<h1>inferload calibration certificate</h1>
<p>{escape(c.created_at)} · transport <b>{escape(c.transport)}</b> · {c.processes} process(es) ·
{"quick" if c.quick else "full"} · {c.elapsed_s:.1f} s</p>
<p>machine {escape(str(m.get("hostname")))}: {escape(str(m.get("cpu_model")))}, {m.get("cpus")} CPUs,
{escape(str(m.get("platform")))}; load average at start {escape(str(m.get("load_average_start")))}, at end
{escape(str(m.get("load_average_end")))} · versions {escape(", ".join(f"{k} {v}" for k, v in c.versions.items()))}</p>
<p>Bounds: a percentile within {b.percentile_pct:g} % of the truth + {b.percentile_us:g} µs; open-loop rate within
{b.rate_pct:g} %; send-lag p99 ≤ {b.send_lag_p99_ms:g} ms. The truth: the reference server's own time per request
(answered − received) plus a draw of the loopback floor below (docs/calibration.md).</p>
<h2>Roofline (req/s per process)</h2>
<table><tr><th>protocol</th><th>roofline</th><th>first failing</th><th>tested</th><th>ceiling (closed loop, no delay)</th></tr>{roof}</table>
<h2>Goals</h2><table><tr><th>goal</th><th>verdict</th><th>figure</th></tr>{goals}</table>
<h2>Loopback floor (µs)</h2>
<table><tr><th>law</th><th>protocol</th><th>samples</th><th>p50</th><th>p90</th><th>p99</th></tr>{floor}</table>
<h2>Cases (true → measured)</h2>
<table><tr><th>case</th><th>requests</th><th>server records</th><th>p50</th><th>p90</th><th>p99</th><th>p999</th>
<th>achieved / configured req/s</th><th>send lag p50 / p99 ms</th><th>unsent</th><th>client CPU µs/req</th><th>joined error p5 / p50 µs</th><th>verdict</th></tr>
{"".join(rows)}</table>
{streams_section}
</body></html>
"""
    path.write_text(page)
    return path


FLOOR_METHOD = (
    "a blocking-socket client of calibrate's own (h2c / HTTP/1.1 keep-alive, one request at a time, law none): "
    "write return -> last read return, minus the server's own answered - received, joined by request id"
)


def add_calibrate_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    calibrate = sub.add_parser("calibrate", help=help_text)
    calibrate.add_argument("--quick", action="store_true", help="fewer, shorter cases (about a minute)")
    calibrate.add_argument(
        "--workers",
        type=cli_values.local_workers,
        default=0,
        metavar="N",
        help="each case with N local worker processes (at most 4 per CPU core)",
    )
    calibrate.add_argument(
        "--remote-workers",
        type=cli_values.remote_workers,
        default=0,
        metavar="M",
        help="each case also waits for M `inferload worker`s elsewhere",
    )
    calibrate.add_argument(
        "--server-host",
        default="127.0.0.1",
        help="where the reference server listens and is addressed (default 127.0.0.1; this machine's address for remote workers)",
    )
    calibrate.add_argument("--out", type=Path, help="folder for calibration.json, calibration.html and each case's run")
    calibrate.add_argument(
        "--no-install",
        action="store_true",
        help="do not make this certificate the latest ($INFERLOAD_HOME/calibration.json, "
        "else ~/.cache/inferload/calibration/<host>-<uid>/calibration.json)",
    )
    calibrate.add_argument("--protocols", default="grpc,http", help="comma list of grpc, http (default both)")
    calibrate.add_argument(
        "--streams",
        metavar="LIST",
        help="concurrent streams of the streams cases, a comma list (default 1,100 with --quick, else 1,100,1000; "
        "'none': no streams case); they need http in --protocols",
    )
    defaults = Bounds()
    calibrate.add_argument("--bound-pct", type=float, default=defaults.percentile_pct, help="percentile bound: %% of the truth")
    calibrate.add_argument("--bound-us", type=float, default=defaults.percentile_us, help="percentile bound: plus µs")
    calibrate.add_argument("--rate-bound-pct", type=float, default=defaults.rate_pct, help="achieved-rate bound, %%")
    calibrate.add_argument("--lag-bound-ms", type=float, default=defaults.send_lag_p99_ms, help="send-lag p99 bound, ms")


def certified_transport() -> str:
    """The transport `inferload run` users get here (as `users.engine.transport_in_use`, without Locust)."""
    if os.environ.get("INFERLOAD_TRANSPORT", "native").strip().lower() == "python":
        return "python"
    try:
        native = importlib.import_module("inferload._native")
    except ImportError:
        return "python"
    return "native" if hasattr(native, "Engine") else "python"


def machine_facts() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


def versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {"python": platform.python_version()}
    for name in ("inferload", "locust"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["native_module"] = importlib.util.find_spec("inferload._native") is not None
    return found


def _server(law_name: str, host: str) -> ReferenceServerProcess:
    config = reference_config_from_dict({"max_batch_size": 0, "delay": LAWS[law_name], "host": host, "threads": 1})
    return ReferenceServerProcess(config).start()


def _run_one(
    case: Case,
    server: ReferenceServerProcess,
    out: Path,
    layout: RunLayout,
    floors: dict[tuple[str, str], FloorProbe],
    bounds: Bounds,
    seed: int,
    children: ChildProcesses,
) -> CaseResult:
    server.reset()
    measured = run_case(case, server, out / "cases" / case.name, layout, children=children)
    floor_ns = floors[(case.law_name, case.protocol)].samples_ns
    truth = true_latencies_ns(server, 0, measured["window"], floor_ns, seed)
    joined = joined_errors_us(server, measured["rows"], measured["window"], float(np.median(floor_ns))) if case.joined else None
    result = judge(case, measured, truth, layout, bounds, joined)
    p50, p99 = result.percentiles["p50"], result.percentiles["p99"]
    rate = f" rate {result.achieved_rps:.0f}/{case.rate_rps:.0f}" if case.rate_rps else ""
    lag = f" lag p99 {result.send_lag_ms['p99']} ms" if result.send_lag_ms else ""
    joined_text = f" joined p50 {joined['p50']:+.0f} µs" if joined else ""
    print(
        f"  {case.name:<28} {result.requests:>6} req  p50 {_us(p50.error_us)}  p99 {_us(p99.error_us)}{rate}{lag}{joined_text}"
        f"  {'ok' if result.within_bounds else 'MISS'}",
        flush=True,
    )
    return result


def _streams_server(streams: int, host: str) -> ReferenceServerProcess:
    """The streams cases' reference server: the scripted generation, a slot for every stream."""
    config = reference_config_from_dict(
        {
            "max_batch_size": 0,
            "delay": {"law": "fixed", "ms": STREAM_HOLD_MS},
            "stream_responses": STREAM_EVENTS,
            "concurrency": streams + 8,
            "host": host,
            "threads": 2,
        }
    )
    return ReferenceServerProcess(config).start()


def _run_streams(
    case: StreamCase,
    host: str,
    out: Path,
    layout: RunLayout,
    floor_ns: np.ndarray,
    bounds: Bounds,
    seed: int,
    children: ChildProcesses,
) -> StreamCaseResult:
    with _streams_server(case.streams, host) as server:
        measured = run_case(case, server, out / "cases" / case.name, layout, children=children)
        truth = stream_truth(server, measured["window"], floor_ns, seed)
    result = judge_streams(case, measured, truth, layout, bounds)
    print(
        f"  {case.name:<28} {result.requests:>6} req  TTFT p50 {_us(result.ttft['p50'].error_us)}  p99 "
        f"{_us(result.ttft['p99'].error_us)}  TPOT p50 {_us(result.tpot['p50'].error_us)}  ITL mean "
        f"{_us(result.itl_mean.error_us)}  {'ok' if result.within_bounds else 'MISS'}",
        flush=True,
    )
    return result


def _us(value: float | None) -> str:
    return "     — µs" if value is None else f"{value:+7.0f} µs"


def roofline_of(results: list[CaseResult], protocol: str, ceiling_per_process: float | None) -> Roofline:
    """The highest open-loop rate per process with every lower-or-equal tested rate within its bounds."""
    open_cases = sorted(
        (r for r in results if r.protocol == protocol and r.loop == "open"), key=lambda r: (r.configured_rps or 0.0) / r.processes
    )
    best = first_failing = None
    for result in open_cases:
        per_process = (result.configured_rps or 0.0) / result.processes
        if result.within_bounds and first_failing is None:
            best = per_process
        elif first_failing is None:
            first_failing = per_process
    roofline = Roofline(
        rps_per_process=None if best is None else round(best, 1),
        first_failing_rps_per_process=None if first_failing is None else round(first_failing, 1),
        tested_rps_per_process=[round((r.configured_rps or 0.0) / r.processes, 1) for r in open_cases],
        ceiling_rps_per_process=None if ceiling_per_process is None else round(ceiling_per_process, 1),
    )
    return roofline.model_copy(update={"lowest_tested_rps_per_process": roofline.lowest_tested()})


def goals_of(results: list[CaseResult], ceilings: dict[str, float], elapsed_s: float, quick: bool) -> list[Goal]:
    below_half = [
        r
        for r in results
        if r.loop == "open"
        and r.configured_rps is not None
        and r.configured_rps / r.processes <= 0.5 * ceilings.get(r.protocol, 0.0)
    ]
    worst = max((abs(p.error_us or 0.0) for r in below_half for p in r.percentiles.values()), default=None)
    lag = max((float((r.send_lag_ms or {}).get("p99") or 0.0) for r in below_half), default=None)
    rate = max((abs(r.rate_error_pct or 0.0) for r in below_half), default=None)
    limit_s = 60.0 if quick else 180.0
    return [
        Goal(
            goal="below 50 % of the ceiling: every percentile within its bound, rate within its bound, send-lag p99 within its bound",
            met=all(r.within_bounds for r in below_half) if below_half else None,
            figure=f"{sum(r.within_bounds for r in below_half)} of {len(below_half)} open-loop cases within bounds; worst percentile "
            f"error {worst if worst is None else round(worst)} µs, worst rate error {rate} %, worst send-lag p99 {lag} ms",
        ),
        Goal(
            goal="the roofline reproducible: three calibrations agree within 10 %",
            met=None,
            figure="not judged by one calibration: compare the roofline of three (docs/calibration.md)",
        ),
        Goal(
            goal=f"{'--quick' if quick else 'a full calibration'} within {limit_s:g} s",
            met=elapsed_s <= limit_s,
            figure=f"{elapsed_s:.1f} s",
        ),
    ]


def stream_goals(cases: list[StreamCaseResult]) -> list[Goal]:
    """The streams' fidelity goals (docs/calibration.md), judged where their stream count was run: at
    100 streams every TTFT and TPOT percentile and the ITL's mean within its bound; at 1,000, TTFT p50
    within 1 ms."""
    goals = []
    for case in cases:
        if case.streams == 100:
            figures = [*case.ttft.values(), *case.tpot.values(), case.itl_mean]
            worst = max((abs(p.error_us) for p in figures if p.error_us is not None), default=None)
            goals.append(
                Goal(
                    goal="100 streams: TTFT and TPOT percentiles and the ITL mean within their bounds",
                    met=all(p.within for p in figures),
                    figure=f"{sum(p.within for p in figures)} of {len(figures)} within; worst error "
                    f"{worst if worst is None else round(worst)} µs",
                )
            )
        if case.streams == 1000:
            p50 = case.ttft["p50"].error_us
            goals.append(
                Goal(
                    goal="1,000 streams: TTFT p50 error within 1 ms",
                    met=None if p50 is None else abs(p50) <= 1000.0,
                    figure="not measured" if p50 is None else f"{p50:+.0f} µs",
                )
            )
    return goals


def calibrate(
    plan_: Plan,
    layout: RunLayout,
    out: Path,
    bounds: Bounds,
    host: str = "127.0.0.1",
    protocols: tuple[str, ...] = ("grpc", "http"),
    children: ChildProcesses | None = None,
) -> Calibration:
    """Run every case of ``plan_`` and return the certificate (not yet written). ``children``: the
    command's `ChildProcesses` block (None: one without signal handlers); once it has taken a stop
    signal, CalibrationStopped after the case's run ended, before anything else starts."""
    children = children or ChildProcesses()
    began = time.monotonic()
    created = datetime.now(timezone.utc).isoformat()
    machine = machine_facts()
    transport = certified_transport()
    print(
        f"inferload calibrate: transport {transport}, {layout.processes} process(es), load average {machine['load_average_start']}"
    )
    floors: dict[tuple[str, str], FloorProbe] = {}
    ceilings: dict[str, float] = {}
    results: list[CaseResult] = []
    seed = 0

    def probe(law: str, server: ReferenceServerProcess) -> None:
        # per law: how long a client idles between requests changes what waking up costs it
        for protocol in protocols:
            stop_if_signalled(children)
            floors[(law, protocol)] = probe_floor(server, protocol, plan_.floor_requests, "identity", 16)
            print(f"  floor {law} {protocol}: {floors[(law, protocol)].summary()}", flush=True)

    stop_if_signalled(children)
    with _server("none", host) as server:
        probe("none", server)
        for protocol in protocols:
            case = Case(
                f"{protocol}-closed-none-ceiling",
                protocol,
                "closed",
                "none",
                users=plan_.ceiling_users,
                warmup_s=plan_.warmup_s,
                duration_s=plan_.duration_s,
            )
            result = _run_one(case, server, out, layout, floors, bounds, seed := seed + 1, children)
            results.append(result)
            ceilings[protocol] = (result.throughput_rps or 0.0) / layout.processes
    laws = list(dict.fromkeys([plan_.joined_law, *plan_.closed_laws, plan_.open_law]))
    for law in laws:
        stop_if_signalled(children)
        with _server(law, host) as server:
            probe(law, server)
            for protocol in protocols:
                if law == plan_.joined_law:
                    case = Case(
                        f"{protocol}-closed-{law}-1user",
                        protocol,
                        "closed",
                        law,
                        users=1,
                        warmup_s=plan_.warmup_s,
                        duration_s=plan_.duration_s,
                    )
                    results.append(_run_one(case, server, out, layout, floors, bounds, seed := seed + 1, children))
                if law in plan_.closed_laws:
                    case = Case(
                        f"{protocol}-closed-{law}",
                        protocol,
                        "closed",
                        law,
                        users=plan_.closed_users,
                        warmup_s=plan_.warmup_s,
                        duration_s=plan_.duration_s,
                    )
                    results.append(_run_one(case, server, out, layout, floors, bounds, seed := seed + 1, children))
                if law == plan_.open_law:
                    for rate in plan_.open_rates_rps(ceilings[protocol], layout.processes):
                        case = Case(
                            f"{protocol}-open-{law}-{rate:g}rps",
                            protocol,
                            "open",
                            law,
                            rate_rps=rate,
                            warmup_s=plan_.warmup_s,
                            duration_s=plan_.duration_s,
                        )
                        results.append(_run_one(case, server, out, layout, floors, bounds, seed := seed + 1, children))
    stream_cases: list[StreamCaseResult] = []
    if "http" in protocols:
        for streams in plan_.stream_counts:
            case_ = StreamCase(streams, plan_.stream_warmup_s, plan_.stream_duration_s)
            floor_ns = floors[(STREAM_FLOOR_LAW, "http")].samples_ns
            stream_cases.append(_run_streams(case_, host, out, layout, floor_ns, bounds, seed := seed + 1, children))
    elapsed = time.monotonic() - began
    machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return Calibration(
        schema_="inferload-calibration/1",
        created_at=created,
        elapsed_s=round(elapsed, 1),
        quick=plan_.quick,
        transport=transport,
        processes=layout.processes,
        machine=machine,
        versions=versions(),
        bounds=bounds,
        floor=floor_section(floors),
        cases=results,
        roofline={p: roofline_of(results, p, ceilings.get(p)) for p in protocols},
        goals=goals_of(results, ceilings, elapsed, plan_.quick) + stream_goals(stream_cases),
        stream_cases=stream_cases,
    )


def floor_section(floors: dict[tuple[str, str], FloorProbe]) -> dict[str, dict[str, Any]]:
    """calibration.json's ``floor``: law -> protocol -> the probe's figures, and the method."""
    section: dict[str, dict[str, Any]] = {}
    for (law, protocol), probe in floors.items():
        section.setdefault(law, {})[protocol] = probe.summary()
    return {**section, "method": {"text": FLOOR_METHOD}}


def write_certificate(calibration: Calibration, out: Path, install: bool) -> Path:
    """calibration.json and calibration.html in ``out``; with ``install``, the json copied to the latest's place."""
    from inferload.calibrate.command import write_html

    out.mkdir(parents=True, exist_ok=True)
    path = out / "calibration.json"
    path.write_text(calibration.to_json())
    write_html(calibration, out / "calibration.html")
    if install:
        latest = default_calibration_path()
        latest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, latest)
        print(f"the latest certificate: {latest}")
    return path


#: the most concurrent streams one streams case runs
MAX_STREAMS = 10_000


def stream_counts_of(text: str) -> tuple[int, ...] | None:
    """``--streams``' counts ('none': none); None when it is not a comma list of counts in 1..MAX_STREAMS."""
    if text.strip() == "none":
        return ()
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        return None
    return counts if counts and all(1 <= count <= MAX_STREAMS for count in counts) else None


def usage_problem(args: argparse.Namespace, out: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the options, on one line naming the option (None: nothing): the counts, the
    protocols and the bounds; ``out`` (``--out`` or its default) not a folder that can be written;
    unless ``--no-install``, the latest certificate's folder (`latest_calibration_place` under
    ``environ``) not one either, named by its variable (``INFERLOAD_HOME`` or ``HOME``). Folders
    made to check are removed again."""
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    if not protocols or any(p not in ("grpc", "http") for p in protocols):
        return f"--protocols: expected a comma list of grpc, http; got {args.protocols!r}"
    if getattr(args, "streams", None) is not None and stream_counts_of(args.streams) is None:
        return f"--streams: expected a comma list of stream counts from 1 to {MAX_STREAMS:,}, or 'none'; got {args.streams!r}"
    for flag, value in (
        ("--bound-pct", args.bound_pct),
        ("--bound-us", args.bound_us),
        ("--rate-bound-pct", args.rate_bound_pct),
        ("--lag-bound-ms", args.lag_bound_ms),
    ):
        if not value >= 0:
            return f"{flag}: expected 0 or more; got {value:g}"
    out_problem = unwritable_problem(out, "the certificate", keep=False)
    if out_problem:
        return f"--out: {out_problem}; expected a folder that can be written"
    if not args.no_install:
        variable, latest = latest_calibration_place(environ)
        latest_problem = unwritable_problem(latest.parent, "the latest certificate", keep=False)
        if latest_problem:
            return f"{variable}: {latest_problem}; expected a folder that can be written (or give --no-install)"
    return None


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Exit 0 with the certificate written (misses are figures in it); a usage error raises UsageError
    (exit 2) before anything starts; a stop signal, CalibrationStopped (128 + its number) once the
    case's run and the reference server have stopped."""
    out = args.out or Path("results") / f"calibration-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    problem = usage_problem(args, out)
    if problem is not None:
        raise UsageError(problem)
    protocols = tuple(p.strip() for p in args.protocols.split(",") if p.strip())
    bounds = Bounds(
        percentile_pct=args.bound_pct,
        percentile_us=args.bound_us,
        rate_pct=args.rate_bound_pct,
        send_lag_p99_ms=args.lag_bound_ms,
    )
    layout = RunLayout(args.workers, args.remote_workers)
    with ChildProcesses(warm=True) as children:
        plan_ = plan(args.quick)
        if getattr(args, "streams", None) is not None:
            plan_ = dataclasses.replace(plan_, stream_counts=stream_counts_of(args.streams) or ())
        calibration = calibrate(plan_, layout, out, bounds, args.server_host, protocols, children)
        stop_if_signalled(children)
    path = write_certificate(calibration, out, install=not args.no_install)
    for protocol, roof in calibration.roofline.items():
        print(
            f"roofline {protocol}: {roof.rps_per_process} req/s per process (lowest tested {roof.lowest_tested()}, "
            f"first failing {roof.first_failing_rps_per_process}; ceiling {roof.ceiling_rps_per_process})"
        )
    for goal in calibration.goals:
        verdict = "not judged" if goal.met is None else "met" if goal.met else "MISSED"
        print(f"goal {verdict}: {goal.goal}: {goal.figure}")
    print(f"certificate: {path} (and calibration.html); {calibration.elapsed_s:.1f} s", file=sys.stdout)
    return 0
