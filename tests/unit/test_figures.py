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


def test_a_streamed_target_adds_its_stream_rows_to_the_table_and_the_report() -> None:
    latency = {"mean": 1.0, "p50": 1.25, "p90": 2.0, "p95": 2.5, "p99": 3.5, "p999": 4.0, "max": 5.0}
    stream = {
        "requests": 100,
        "responses": 400,
        "responses_per_s": 20.0,
        "responses_per_request": 4.0,
        "max_responses_per_request": 4,
        "first_response_ms": latency,
        "inter_response_ms": {**latency, "p99": 0.75},
    }
    lines = format_table({"t": TARGET, "s": {**TARGET, "decoupled": stream}}).splitlines()
    rows = {line.split("  ")[0].strip(): line.split() for line in lines[1:]}
    assert rows["responses / request"][-2:] == ["n/a", "4.00"]
    assert rows["first response p99 (ms)"][-1] == "3.50" and rows["between responses p99 (ms)"][-1] == "0.75"
    assert "responses / request" not in format_table({"t": TARGET})  # no stream: no stream rows
    page = targets_html({"s": {**TARGET, "decoupled": stream}})
    assert '<th>first response p50 (ms)</th><td class="num">1.25</td>' in page


def test_an_open_loop_target_adds_its_rates_to_the_table_and_says_how_many_arrivals_went_unsent() -> None:
    """A replay at 1,000,000 req/s through 8 senders: 3,781 of 2,000,001 arrivals sent."""
    open_loop = {
        "configured_rps": 1_000_000.0,
        "arrivals": 2_000_001,
        "unsent": 1_996_220,
        "achieved_rps": 1890.5,
        "send_lag_ms": {"p50": 1001.98, "p99": 1530.879, "max": 1540.77},
    }
    kept_up = {**open_loop, "unsent": 0, "achieved_rps": 1_000_000.0}
    lines = format_table(
        {"flooded": {**TARGET, "open_loop": open_loop}, "kept_up": {**TARGET, "open_loop": kept_up}}
    ).splitlines()
    rows = {line[:22].strip(): line[22:].split() for line in lines[1:] if not line.startswith("  ")}
    assert list(rows)[-4:] == ["target rate (req/s)", "achieved rate (req/s)", "unsent arrivals", "send lag p99 (ms)"]
    assert rows["achieved rate (req/s)"] == ["1890.5", "1000000.0"] and rows["unsent arrivals"] == ["1996220", "0"]
    notes = [line.strip() for line in lines[1:] if line.startswith("  ")]
    assert notes == [
        "flooded: 1,996,220 of 2,000,001 arrivals unsent (99.8 %): they found every sender busy and the waiting queue"
        " full (shape.max_in_flight, max_queue) or were still waiting at the end; the target rate was not offered"
        " (a max_unsent SLO fails the run on them)"
    ]
    assert "unsent arrivals" not in format_table({"t": TARGET})  # closed loop: no open-loop rows
