"""The demo's capacity line: one sure answer. The estimate and its interval only when the search
reached the demo's precision (±10 %); otherwise what was measured, "at least" the highest rate that
met the target and the lowest that did not, with why the search stopped."""

from __future__ import annotations

from typing import Any

from inferload.local.demo import Capacity

CONFIG = "dynamic batching, 2 instance(s)"


def answer(**keys: Any) -> dict[str, Any]:
    return {"estimate_rps": 365.0, "interval_rps": [330.0, 390.0], "precision_reached": True, **keys}


def test_a_reached_precision_prints_the_estimate_and_its_interval() -> None:
    capacity = Capacity("triton", 330.0, 400.0, CONFIG, answer=answer())
    assert capacity.line("p99 <= 100 ms") == "triton: 365 req/s [330, 390] under p99 <= 100 ms (dynamic batching, 2 instance(s))"
    assert capacity.as_dict(100)["precision_reached"] is True


def test_an_unreached_precision_prints_only_what_was_measured() -> None:
    wide = answer(interval_rps=[250.0, 538.2], precision_reached=False, ended={"words": "the search made its 7 runs"})
    capacity = Capacity("triton", 250.0, 400.0, CONFIG, answer=wide)
    assert capacity.line("p99 <= 100 ms") == (
        "triton: at least 250 req/s under p99 <= 100 ms, over it at 400; ±10 % not reached: the search made its 7 runs "
        "(dynamic batching, 2 instance(s))"
    )
    assert "538" not in capacity.line("p99 <= 100 ms") and "365" not in capacity.line("p99 <= 100 ms")


def test_an_open_interval_is_never_printed_as_an_answer() -> None:
    open_above = answer(interval_rps=[800.0, None], precision_reached=False, ended={"words": "the budget ran out"})
    line = Capacity("torchserve", 800.0, None, CONFIG, answer=open_above).line("p99 <= 100 ms")
    assert line.startswith("torchserve: at least 800 req/s under p99 <= 100 ms; ±10 % not reached: the budget ran out")


def test_no_passing_rate_says_so() -> None:
    line = Capacity("torchserve", None, 100.0, CONFIG, answer=answer(precision_reached=False)).line("p99 <= 100 ms")
    assert line == "torchserve: no rate met p99 <= 100 ms (dynamic batching, 2 instance(s))"


def test_rates_are_printed_to_four_significant_digits_never_as_an_exponent() -> None:
    """The search's levels are to the millisecond of req/s; the line says as much as the ±10 % means."""
    measured = answer(estimate_rps=317.508, interval_rps=[308.334, 317.508])
    assert (
        Capacity("triton", 300.0, 330.0, CONFIG, answer=measured)
        .line("p99 <= 100 ms")
        .startswith("triton: 317.5 req/s [308.3, 317.5] under")
    )
    fast = answer(estimate_rps=12_345.678, interval_rps=[11_999.5, 12_500.25])
    assert (
        Capacity("triton", 12_000.0, 13_000.0, CONFIG, answer=fast)
        .line("p99 <= 100 ms")
        .startswith("triton: 12,346 req/s [12,000, 12,500] under")
    )
