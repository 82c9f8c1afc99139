"""TorchServe's own metrics for any handler, on a capture of the real TorchServe 0.12.0 (default
metrics.yaml) serving a third-party handler that adds no metrics of its own
(tests/captures/torchserve_metrics_third_party.txt: 201 requests), and where its /metrics page is
looked for when a target has no ``metrics_url``."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferload.errors import ScrapeError
from inferload.servermetrics.figures import not_reported, server_figures
from inferload.servermetrics.readers import ServerReader, server_side
from inferload.servermetrics.snapshot import ServerSnapshot
from inferload.servermetrics.torchserve import (
    NOT_REPORTED,
    no_metrics_url_reason,
    parse_torchserve_metrics,
    torchserve_metrics_url,
)

CAPTURE = Path(__file__).resolve().parent.parent / "captures" / "torchserve_metrics_third_party.txt"
MODEL = "bare_number"


def third_party(taken_at: float = 10.0) -> ServerSnapshot:
    return parse_torchserve_metrics(CAPTURE.read_text(), MODEL, taken_at)


def fresh(snap: ServerSnapshot) -> ServerSnapshot:
    return ServerSnapshot(
        snap.server, snap.model, snap.taken_at - 10.0, dict.fromkeys(snap.counters, 0.0), {}, snap.has_batch_stats
    )


def test_a_third_party_handler_gets_torchserves_own_queue_and_request_times() -> None:
    snap = third_party()
    side = server_side(fresh(snap), snap)
    assert side["request_ms_avg"] == pytest.approx(3849556.816 / 201 / 1e3, rel=1e-6)
    assert side["queue_ms_avg"] == pytest.approx(2318825.616 / 201 / 1e3, rel=1e-6)
    assert 0 < side["queue_ms_avg"] < side["request_ms_avg"]


def test_what_torchserve_does_not_report_is_null_with_the_reason() -> None:
    snap = third_party()
    side = server_side(fresh(snap), snap)
    assert side["compute_ms_avg"] is None and side["avg_batch_size"] is None and side["batch_size_histogram"] is None
    assert side["unknown"] == NOT_REPORTED
    assert set(side["unknown"]) == {"compute_ms_avg", "avg_batch_size", "batch_size_histogram"}
    assert "PredictionTime" in side["unknown"]["compute_ms_avg"] and "gauge" in side["unknown"]["compute_ms_avg"]
    assert "batches" in side["unknown"]["avg_batch_size"]


def test_the_gauges_are_not_taken_for_totals() -> None:
    """PredictionTime is on the page (the last batch's time), but no compute figure is made of it."""
    text = CAPTURE.read_text()
    assert 'PredictionTime{ModelName="bare_number"' in text
    snap = third_party()
    assert "compute_us" not in snap.counters and "executions" not in snap.counters and not snap.has_batch_stats


def test_the_rates_still_come_from_torchserves_request_counter() -> None:
    snap = third_party()
    figures = server_figures(fresh(snap), snap)
    assert figures.inferences_per_s == pytest.approx(20.1)  # requests: items are not known without a handler counter
    assert figures.executions_per_s is None and figures.failures_per_s == 0


def test_the_sample_handlers_counters_leave_nothing_unknown() -> None:
    snap = parse_torchserve_metrics((CAPTURE.parent / "torchserve_metrics.txt").read_text(), "cnn", 10.0)
    side = server_side(fresh(snap), snap)
    assert "unknown" not in side and side["compute_ms_avg"] > 0 and side["avg_batch_size"] > 1


def test_a_model_not_shown_yet_has_nothing_unknown_to_tell() -> None:
    snap = parse_torchserve_metrics(CAPTURE.read_text(), "resnet", 10.0)
    assert snap.counters == {} and not_reported(snap) == {}


# --- where the /metrics page is ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8082/metrics"),
        ("http://ts.example:8080", "http://ts.example:8082/metrics"),
        ("https://ts.example:8080", "https://ts.example:8082/metrics"),
        ("http://[::1]:8080", "http://[::1]:8082/metrics"),
    ],
)
def test_at_torchserves_default_inference_port_the_default_metrics_port_is_read(address: str, url: str) -> None:
    assert torchserve_metrics_url(address, None) == url


@pytest.mark.parametrize("address", ["http://127.0.0.1:18080", "http://ts.example:80", "http://127.0.0.1:8082"])
def test_elsewhere_without_metrics_url_nothing_is_guessed(address: str) -> None:
    assert torchserve_metrics_url(address, None) is None
    reason = no_metrics_url_reason(address)
    assert address in reason and "metrics_url" in reason


def test_a_set_metrics_url_always_wins() -> None:
    assert torchserve_metrics_url("http://127.0.0.1:18080", "http://127.0.0.1:9/metrics") == "http://127.0.0.1:9/metrics"


def test_a_reader_for_a_target_with_no_metrics_page_says_why() -> None:
    with pytest.raises(ScrapeError, match=r"no metrics_url, and http://127.0.0.1:18080 is not at TorchServe's default"):
        ServerReader("torchserve-rest", "http://127.0.0.1:18080", "tiny")
