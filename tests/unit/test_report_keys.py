"""Each part of a worker's report has a key of its own: two listeners that wrote one key would
overwrite each other's part (the run record's figures and the request log's rows once shared one
after a move, caught in review)."""

from __future__ import annotations

from inferload.run import recorder, trace_run


def test_every_part_of_a_worker_s_report_has_its_own_key() -> None:
    keys = [recorder.RECORD_REPORT_KEY, recorder.ROWS_REPORT_KEY, trace_run.REPORT_KEY]
    assert len(set(keys)) == len(keys), keys
