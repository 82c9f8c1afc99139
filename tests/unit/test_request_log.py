"""requests.csv on a local run: written as ``requests.csv.partial`` while the run goes on, given its
own name once its last row is written (a killed run or a failed folder leaves a name that says the
file is not whole). The failed folders themselves: tests/integration/test_results_kept.py."""

from __future__ import annotations

import csv
from pathlib import Path

from locust.env import Environment

from inferload.run.recorder import COLUMNS, RequestLog


def test_requests_csv_is_partial_until_the_run_ends_and_then_whole(tmp_path: Path) -> None:
    log = RequestLog(Environment(), tmp_path / "requests.csv")
    log.environment.events.request.fire(request_type="infer", name="t", response_time=1.5, response_length=0, exception=None)
    log.flush()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["requests.csv.partial"]
    log.environment.events.request.fire(
        request_type="infer", name="t", response_time=2.5, response_length=0, exception=RuntimeError("no")
    )
    log.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["requests.csv"]
    with (tmp_path / "requests.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == COLUMNS and [row[1:4] for row in rows[1:]] == [["t", "1.500", "ok"], ["t", "2.500", "failure"]]
    log.add_rows([(1.0, "t", 3.0, "ok")])  # a web UI's next run goes on in the whole file
    log.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["requests.csv"]
    with (tmp_path / "requests.csv").open(newline="") as handle:
        assert len(list(csv.reader(handle))) == 4
