"""A run's Triton trace records from InfluxDB (``trace.source: influxdb``): the `triton_traces`
points the collector sidecar next to a remote Triton wrote (`observe.sources.triton_trace_file`).

At the end of the run, once the trace settings are restored (Triton then writes the traces it
held), the collector still has to read the last file and write its points: the count of the run's
points is polled until it has not grown for `QUIET_S` (three of the collector's default 1 s
intervals), at most `DEADLINE_S`. The records are the file join's own (`ServerTrace`), so the run
joins them exactly as it joins the file's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from inferload.measure.trace_join import ServerTrace
from inferload.observe.influx_range import InfluxReader, influxql_string
from inferload.observe.sink import SinkSettings
from inferload.observe.trace_points import MEASUREMENT, trace_from_row

QUIET_S = 3.0
DEADLINE_S = 10.0
POLL_S = 0.5


def settled_count(
    count: Callable[[], int],
    quiet_s: float = QUIET_S,
    deadline_s: float = DEADLINE_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """`count()` once it is above 0 and has not changed for `quiet_s`, or whatever it is at `deadline_s`."""
    start = clock()
    last, since = -1, start
    while True:
        now_count, now = count(), clock()
        if now_count != last:
            last, since = now_count, now
        elif now_count > 0 and now - since >= quiet_s:
            return now_count
        if now - start >= deadline_s:
            return now_count
        sleep(poll_s)


def influx_traces(
    settings: SinkSettings,
    run_id: str,
    model: str,
    quiet_s: float = QUIET_S,
    deadline_s: float = DEADLINE_S,
) -> list[ServerTrace]:
    """The run's traced requests of `model` in InfluxDB, once the collector has written them all
    (ResultsError when InfluxDB cannot be queried)."""
    reader = InfluxReader(settings)
    where = f'"run_id" = {influxql_string(run_id)} AND "model" = {influxql_string(model)}'

    def count() -> int:
        rows = reader.rows(f'SELECT count("trace_id") FROM "{MEASUREMENT}" WHERE {where}')
        return int(rows[0].get("count") or 0) if rows else 0

    try:
        if settled_count(count, quiet_s, deadline_s) == 0:
            return []
        rows = reader.rows(f'SELECT * FROM "{MEASUREMENT}" WHERE {where}')
    finally:
        reader.close()
    return [trace_from_row(row) for row in rows]
