"""calibration.html: the certificate as a page in the report's style (one self-contained file)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from inferload.results.calibration import Calibration


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
</body></html>
"""
    path.write_text(page)
    return path
