"""One list of figures behind the console table, report.html, `inferload compare` and the SLO checks."""

from __future__ import annotations

from inferload.results import compare, figures, slo
from inferload.results.figures import BY_NAME, format_table
from inferload.results.report import targets_html

TARGET = {
    "server": "triton",
    "protocol": "grpc",
    "model": "cnn",
    "requests": 8000,
    "failures": 8,
    "error_rate": 0.001,
    "throughput_rps": 399.6,
    "latency_ms": {"mean": 18.0, "p50": 15.2, "p90": 29.4, "p95": 38.6, "p99": 70.719, "p999": 100.2, "max": 333.5},
    "server_side": None,
    "cold_start_s": 8.93,
}


def test_the_console_table_prints_each_figure_with_its_unit_and_n_a_when_missing() -> None:
    lines = format_table({"t": TARGET}).splitlines()
    cells = {line[:20].strip(): line[20:].strip() for line in lines[1:]}
    assert list(cells) == [f.heading() for f in figures.TABLE]
    assert cells["error rate"] == "0.10 %"
    assert cells["p99 (ms)"] == "70.72"
    assert cells["throughput (req/s)"] == "399.6"
    assert cells["queue (ms, server)"] == "n/a"  # no server-side figures
    assert cells["cold start (s)"] == "8.93"


def test_the_report_and_the_console_show_the_same_figure_the_same_way() -> None:
    page = targets_html({"t": TARGET})
    for figure in figures.TABLE:
        if figure.name != "cold_start_s":  # the report puts its unit in the cell: "8.93 s"
            assert f'<th>{figure.heading()}</th><td class="num">{figure.cell(TARGET)}</td>' in page
    assert '<th>cold start</th><td class="num">8.93 s</td>' in page


def test_compare_and_the_slo_checks_take_their_figures_from_the_list() -> None:
    assert [name for name, _, _ in compare.FIGURES] == [f.name for f in figures.COMPARE]
    assert all(path == BY_NAME[name].path for name, path, _ in compare.FIGURES)
    assert set(slo.CHECKS.values()) <= set(BY_NAME)
    # the bound of a check is the figure's better direction
    assert slo.bound("p99_ms") == "<=" and slo.bound("min_throughput_rps") == ">=" and slo.bound("min_avg_batch_size") == ">="
    assert slo.bound("max_unsent") == "<=" and slo.bound("not_a_check") == ""
