"""Generations' figures merge exactly over workers (`inferload.measure.generation_record`): each
worker's steady totals on the wire, merged on the master, give the counts summed, the most tokens of
one generation the largest, the good ones (goodput) summed, the histograms the union; N's source is
named, or `mixed`."""

from __future__ import annotations

from inferload.measure.generation_record import GenerationRecord, GenerationTotals
from inferload.measure.run_record import RunRecord
from inferload.results.summary import generation_figures


def worker(tpot_ms: list[float], counts: list[int]) -> dict:
    totals = GenerationTotals()
    for value in tpot_ms:
        totals.tpot.record_success(value)
        totals.itl.record_success(value)
        totals.ttst.record_success(value * 2)
    totals.counts.add_wire(counts)
    return {"steady": {"chat": totals.to_wire()}}


def test_two_workers_merge_into_one_target_s_totals() -> None:
    record = GenerationRecord()
    record.merge_wire(worker([1.0, 2.0], [2, 20, 12, 2, 0, 0, 1]))
    record.merge_wire(worker([3.0, 4.0], [2, 16, 9, 2, 0, 0, 2]))
    totals = record.steady["chat"]
    assert totals.counts.to_wire() == [4, 36, 12, 4, 0, 0, 3, 0, 0, 0, 0]
    assert totals.counts.token_source == "usage"
    assert totals.tpot.successes == 4 and (totals.tpot.latency_ms()["max"] or 0.0) >= 4.0


def test_the_tokenizer_s_counts_beside_usage_s_merge_and_give_their_difference() -> None:
    record = GenerationRecord()
    # [generations, tokens, most, by usage, tokenizer, events, good, compared, differing, by tokenizer, by usage]
    record.merge_wire(worker([1.0], [2, 20, 10, 2, 0, 0, 0, 2, 1, 21, 20]))
    record.merge_wire(worker([1.0], [1, 10, 10, 1, 0, 0, 0, 1, 0, 10, 10]))
    # an engine that sends no comparison adds none
    record.merge_wire(worker([1.0], [1, 10, 10, 1, 0, 0, 0]))
    block = generation_figures(record, "chat", steady_s=1.0)
    assert block is not None and block.token_count is not None
    assert block.token_count.model_dump() == {
        "compared": 3,
        "differing": 1,
        "tokenizer_tokens": 31,
        "usage_tokens": 30,
        "difference_pct": 100.0 / 30,
    }
    # no generation compared: no block
    assert generation_figures(GenerationRecord(), "chat", steady_s=1.0) is None
    plain = GenerationRecord()
    plain.merge_wire(worker([1.0], [1, 10, 10, 1, 0, 0, 0]))
    only = generation_figures(plain, "chat", steady_s=1.0)
    assert only is not None and only.token_count is None


def test_generations_counted_two_ways_are_mixed_and_none_counted_has_no_source() -> None:
    record = GenerationRecord()
    record.merge_wire(worker([1.0], [1, 8, 8, 1, 0, 0]))
    record.merge_wire(worker([1.0], [1, 5, 5, 0, 0, 1]))
    assert record.steady["chat"].counts.token_source == "mixed"
    assert GenerationTotals().counts.token_source is None


def test_a_run_record_carries_generations_through_a_worker_s_report() -> None:
    on_worker, on_master = RunRecord(window_s=1.0, warmup_s=0.0), RunRecord(window_s=1.0, warmup_s=0.0)
    on_worker.generations.merge_wire(worker([2.0, 2.0, 2.0], [3, 30, 10, 3, 0, 0]))
    on_master.merge_wire(on_worker.drain_to_wire())
    assert on_worker.generations.steady == {}  # drained
    block = generation_figures(on_master.generations, "chat", steady_s=10.0)
    assert block is not None
    assert (block.generations, block.output_tokens, block.output_tokens_per_request) == (3, 30, 10.0)
    assert block.output_tokens_per_s == 3.0 and block.token_source == "usage"
    assert block.tpot_ms.p50 is not None and 1.9 <= block.tpot_ms.p50 <= 2.1
    assert generation_figures(on_master.generations, "other", steady_s=10.0) is None


def test_each_window_holds_its_generations_tokens_and_tpot_and_a_quiet_window_says_zero() -> None:
    from inferload.observe.influx_export import tokens_point
    from inferload.results.summary import generation_window

    tpot = GenerationTotals()
    for value in (2.0, 4.0):
        tpot.tpot.record_success(value)
    record = GenerationRecord()
    # window 7: 2 generations judged for goodput, 1 good; window 9: 1 generation of an unjudged target
    counts = [[7, "chat", [2, 24, 1, 2]], [9, "plain", [1, 8, 0, 0]]]
    itl = GenerationTotals()
    for value in (1.0, 1.0, 3.0):
        itl.itl.record_success(value)
    record.merge_wire({"tpot": [[7, "chat", tpot.tpot.to_wire()]], "itl": [[7, "chat", itl.itl.to_wire()]], "counts": counts})
    row = generation_window(record, 7, "chat", window_s=2.0)
    assert row["output_tokens"] == 24 and row["output_tokens_per_s"] == 12.0
    assert row["tpot_p50_ms"] is not None and 1.9 <= row["tpot_p50_ms"] <= 2.1
    assert row["tpot_p99_ms"] is not None and 3.9 <= row["tpot_p99_ms"] <= 4.1
    assert row["goodput_per_s"] == 0.5 and generation_window(record, 9, "plain", 2.0)["goodput_per_s"] is None
    assert row["itl_p50_ms"] is not None and 0.99 <= row["itl_p50_ms"] <= 1.01
    assert row["itl_p99_ms"] is not None and 2.99 <= row["itl_p99_ms"] <= 3.01
    assert generation_window(record, 8, "chat", 2.0) == {
        "output_tokens": 0,
        "output_tokens_per_s": 0.0,
        "tpot_p50_ms": None,
        "tpot_p99_ms": None,
        "goodput_per_s": None,
        "itl_p50_ms": None,
        "itl_p99_ms": None,
    }
    assert set(generation_window(record, 7, "other", 2.0).values()) == {None}
    window = record.window((7, "chat"))
    assert window is not None and (window.generations, window.output_tokens, window.good, window.judged) == (2, 24, 1, 2)
    point = tokens_point("run", {"target": "chat"}, 7, 2.0, window)
    assert point.measurement == "tokens" and point.fields["output_tokens_per_s"] == 12.0
    longest = point.fields["itl_max_ms"]
    assert isinstance(longest, float) and 2.99 <= longest <= 3.01
    assert (point.fields["good"], point.fields["goodput_per_s"]) == (1, 0.5)
    unjudged = record.window((9, "plain"))
    assert unjudged is not None and "goodput_per_s" not in tokens_point("run", {"target": "plain"}, 9, 2.0, unjudged).fields
    assert point.time_ns == 14 * 10**9


def test_a_server_s_own_times_merge_over_workers_into_the_generation_s_server_block() -> None:
    record = GenerationRecord()
    for prefill, residual in ((10.0, 1.0), (30.0, 3.0)):
        totals = GenerationTotals()
        totals.server_prefill.record_success(prefill)
        totals.server_decode.record_success(2.0)
        totals.ttft_residual.record_success(residual)
        totals.counts.add_wire([1, 8, 8, 1, 0, 0, 0])
        record.merge_wire({"steady": {"chat": totals.to_wire()}})
    block = generation_figures(record, "chat", steady_s=1.0)
    assert block is not None and block.server is not None
    assert block.server.generations == 2
    assert block.server.prefill_ms.max is not None and 29.9 <= block.server.prefill_ms.max <= 30.1
    assert block.server.ttft_residual_ms.mean == 2.0 and block.server.decode_ms_per_token.p50 == 2.0
    # a server that sent no times: no server block
    plain = GenerationRecord()
    plain.merge_wire(worker([1.0], [1, 8, 8, 1, 0, 0]))
    block = generation_figures(plain, "chat", steady_s=1.0)
    assert block is not None and block.server is None and "server" not in block.model_dump()
