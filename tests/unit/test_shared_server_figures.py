"""Targets on one model of one server read the same counters: read once, the same figures for each,
marked shared (summary.json, SLO notes, console table, report); figures a server does not report
are explained. Pure: fake readings, no servers."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

from inferload.results.figures import format_table, server_side_notes
from inferload.results.report import targets_html
from inferload.results.slo import evaluate, format_checks
from inferload.run import server_side as run_server_side
from inferload.run.server_side import ServerSideReadings
from inferload.servermetrics.readers import reading_groups, reading_version, shared_with
from inferload.servermetrics.snapshot import ServerSnapshot
from tests.support.scenario_factory import scenario, tiny_target

STEADY = {"kind": "steady", "users": 1}


def target(name: str, kind: str, address: str, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    made = tiny_target(name, kind, address, **extra)
    made["model"] = model  # tiny_target names the sample model; the figures here are made up
    return made


def names(targets: list[dict[str, Any]]) -> list[list[str]]:
    return [[t.name for t in group] for group in reading_groups(scenario(STEADY, targets=targets).targets)]


def test_grpc_and_http_targets_on_one_triton_model_are_one_reading() -> None:
    targets = [
        target("grpc", "triton-grpc", "127.0.0.1:8001"),
        target("http", "triton-http", "localhost:8000"),
        target("other-model", "triton-grpc", "127.0.0.1:8001", model="cnn"),
        target("other-host", "triton-grpc", "10.0.0.2:8001"),
    ]
    assert names(targets) == [["grpc", "http"], ["other-model"], ["other-host"]]
    assert shared_with(scenario(STEADY, targets=targets).targets) == {
        "grpc": ("http",),
        "http": ("grpc",),
        "other-model": (),
        "other-host": (),
    }


def test_triton_versions_and_distinct_metrics_urls_keep_targets_apart() -> None:
    targets = [
        target("v1", "triton-grpc", "127.0.0.1:8001", version="1"),
        target("v2", "triton-grpc", "127.0.0.1:8001", version="2"),
        target("v1-http", "triton-http", "127.0.0.1:8000", version="1"),
        target("a", "triton-grpc", "127.0.0.1:8001", model="cnn", metrics_url="http://127.0.0.1:8002/metrics"),
        target("b", "triton-http", "127.0.0.1:9000", model="cnn", metrics_url="http://127.0.0.1:9002/metrics"),
        target("c", "triton-http", "127.0.0.1:8000", model="cnn"),
    ]
    groups = reading_groups(scenario(STEADY, targets=targets).targets)
    assert [[t.name for t in group] for group in groups] == [["v1", "v1-http"], ["v2"], ["a", "c"], ["b"]]
    assert [reading_version(group) for group in groups] == ["1", "2", None, None]


def test_an_unversioned_triton_target_shares_with_every_version_of_its_model() -> None:
    """Triton's unversioned statistics sum every version: a target without a version reads the
    requests of a ``version: 1`` target too, so they are one reading, of every version."""
    targets = [
        target("grpc", "triton-grpc", "127.0.0.1:8001"),
        target("http-v1", "triton-http", "127.0.0.1:8000", version="1"),
        target("http-v2", "triton-http", "127.0.0.1:8000", version="2"),
        target("other", "triton-http", "127.0.0.1:8000", model="cnn", version="1"),
    ]
    groups = reading_groups(scenario(STEADY, targets=targets).targets)
    assert [[t.name for t in group] for group in groups] == [["grpc", "http-v1", "http-v2"], ["other"]]
    assert [reading_version(group) for group in groups] == [None, "1"]


def test_torchserve_targets_share_when_they_read_one_metrics_page_for_one_model() -> None:
    page = "http://127.0.0.1:18082/metrics"
    targets = [
        target("ts-a", "torchserve-rest", "http://127.0.0.1:18080", metrics_url=page),
        target("ts-b", "torchserve-rest", "http://127.0.0.1:18080", metrics_url=page),
        target("ts-cnn", "torchserve-rest", "http://127.0.0.1:18080", metrics_url=page, model="cnn"),
        target("no-page-1", "torchserve-rest", "http://127.0.0.1:18080"),
        target("no-page-2", "torchserve-rest", "http://127.0.0.1:18080"),
    ]
    assert names(targets) == [["ts-a", "ts-b"], ["ts-cnn"], ["no-page-1"], ["no-page-2"]]


# --- summary.json's server_side: read once per group, marked -----------------------------------------


class FakeServer:
    """Readings that grow with every call: two reads of one group would differ."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def snapshot(
        self, kind: str, address: str, model: str, version: str | None = None, metrics_url: str | None = None, **_: Any
    ) -> ServerSnapshot:
        self.reads.append(f"{kind} {address}")
        n = float(len(self.reads))
        counters = {"requests": 10 * n, "request_us": 2000 * n * n, "queued": 10 * n, "queue_us": 300 * n * n}
        counters.update(computed=10 * n, compute_us=900 * n * n, inferences=20 * n, executions=10 * n, failures=0.0)
        return ServerSnapshot("triton", model, n, counters, {2: int(10 * n)})


def run_readings(monkeypatch: pytest.MonkeyPatch, targets: list[dict[str, Any]]) -> tuple[ServerSideReadings, FakeServer]:
    fake = FakeServer()
    monkeypatch.setattr(run_server_side.server_stats, "snapshot", fake.snapshot)
    readings = ServerSideReadings(scenario(STEADY, targets=targets))
    readings.read_all(readings.before)
    readings.on_test_stop()
    return readings, fake


def test_targets_on_one_model_get_one_reading_the_same_figures_and_the_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    targets = [
        target("grpc", "triton-grpc", "127.0.0.1:8001"),
        target("http", "triton-http", "127.0.0.1:8000"),
        target("alone", "triton-grpc", "127.0.0.1:8001", model="cnn"),
    ]
    readings, fake = run_readings(monkeypatch, targets)
    assert fake.reads == ["triton-grpc 127.0.0.1:8001", "triton-grpc 127.0.0.1:8001"] * 2  # one per group, twice
    grpc, http, alone = (readings.figures[n] for n in ("grpc", "http", "alone"))
    assert grpc is not None and http is not None and alone is not None
    assert grpc["scope"] == http["scope"] == "model"
    assert grpc["shared_with"] == ["http"] and http["shared_with"] == ["grpc"]
    unmarked = {k: v for k, v in grpc.items() if k != "shared_with"}
    assert unmarked == {k: v for k, v in http.items() if k != "shared_with"}  # the same figures
    assert "scope" not in alone and "shared_with" not in alone


def test_without_a_warm_up_the_servers_are_read_as_the_run_starts_before_any_user_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Locust fires test_start before it starts a user: a reading made then counts none of the run's
    requests, where one left to a greenlet would count those sent before it ran (thousands a second
    on the engine)."""
    fake = FakeServer()
    monkeypatch.setattr(run_server_side.server_stats, "snapshot", fake.snapshot)
    grpc = target("grpc", "triton-grpc", "127.0.0.1:8001")
    readings = ServerSideReadings(scenario(STEADY, targets=[grpc]))
    readings.on_test_start()
    assert list(readings.before) == ["grpc"] and fake.reads == ["triton-grpc 127.0.0.1:8001"]

    warmed = ServerSideReadings(scenario(STEADY, targets=[grpc], warmup=0.05))
    warmed.on_test_start()
    assert warmed.before == {}  # read when the warm-up ends, by a greenlet that has not run yet
    for _ in range(100):  # the hub runs it 0.05 s on (within 5 s on however busy a machine)
        gevent.sleep(0.05)
        if warmed.before:
            break
    assert list(warmed.before) == ["grpc"]


def test_a_torchserve_target_with_no_metrics_page_is_not_read_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    readings, fake = run_readings(monkeypatch, [target("ts", "torchserve-rest", "http://127.0.0.1:18080")])
    assert fake.reads == [] and readings.figures == {"ts": None}
    assert "metrics_url" in readings.errors["ts"]
    with caplog.at_level("WARNING"):
        readings.warn_unreadable()  # what on_test_start says first
    assert "target 'ts': no server-side figures: no metrics_url" in caplog.text


# --- what readers are told -----------------------------------------------------------------------------


def shared_summary() -> dict[str, dict[str, Any]]:
    side: dict[str, Any] = {"queue_ms_avg": 0.5, "compute_ms_avg": 2.0, "request_ms_avg": 3.0, "avg_batch_size": 2.0}
    side["batch_size_histogram"] = {"2": 10}
    target: dict[str, Any] = {"model": "tiny", "latency_ms": {"mean": 4.0}, "residual_ms": 1.0, "requests": 10, "failures": 0}
    return {
        "grpc": {**target, "server_side": {**side, "scope": "model", "shared_with": ["http"]}},
        "http": {**target, "server_side": {**side, "scope": "model", "shared_with": ["grpc"]}},
    }


def test_slo_checks_on_a_shared_figure_say_it_covers_all_the_models_targets() -> None:
    targets = [
        target("grpc", "triton-grpc", "127.0.0.1:8001", slo={"max_queue_ms": 1, "max_residual_ms": 5, "p99_ms": 100}),
        target("http", "triton-http", "127.0.0.1:8000"),
    ]
    checks = {c.metric: c for c in evaluate(scenario(STEADY, targets=targets), shared_summary())}
    assert checks["max_queue_ms"].passed and checks["max_queue_ms"].note is not None
    assert "model 'tiny'" in checks["max_queue_ms"].note and "http too" in checks["max_queue_ms"].note
    assert checks["max_residual_ms"].note is not None and "its server figure covers" in checks["max_residual_ms"].note
    assert checks["p99_ms"].note is None  # a client figure is this target's own
    table = format_checks(list(checks.values()))
    assert "note: grpc max_queue_ms: the figure covers all targets of model 'tiny' on this server together" in table
    assert checks["p99_ms"].model_dump() == {"target": "grpc", "metric": "p99_ms", "limit": 100.0, "value": None, "passed": False}


def test_an_slo_on_a_figure_the_server_does_not_report_fails_with_the_reason() -> None:
    summary = shared_summary()
    side = summary["grpc"]["server_side"]
    side.update(compute_ms_avg=None, shared_with=None, unknown={"compute_ms_avg": "no totals, only gauges"})
    targets = [target("grpc", "torchserve-rest", "http://127.0.0.1:8080", slo={"max_compute_ms": 5})]
    (check,) = evaluate(scenario(STEADY, targets=targets), summary)
    assert not check.passed and check.note == "not reported by this server: no totals, only gauges"


def test_the_console_table_and_the_report_mark_shared_figures_and_explain_unknown_ones() -> None:
    summary = shared_summary()
    summary["http"]["server_side"]["unknown"] = {"avg_batch_size": "not exported"}
    table = format_table(summary)
    assert "grpc: server-side figures cover all targets of model 'tiny' on its server together (shared with http)" in table
    assert "http: avg batch (server): not reported by this server: not exported" in table
    page = targets_html(summary)
    assert "<th>server figures</th>" in page and "model-wide, shared with http" in page
    assert server_side_notes("x", {"server_side": None}) == []
