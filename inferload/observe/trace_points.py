"""Triton's traced requests as InfluxDB points (`triton_traces`) and back.

The collector sidecar next to a remote Triton ships each traced request it reads from the trace
file (`observe.sources.triton_trace_file`); a run whose target has ``trace.source: influxdb`` reads
them back (`run.trace_from_influx`) and joins them as it joins the file's records. One point per
traced request:

    tags    run_id, model, trace_file (the file the collector read, so two servers never collide)
    fields  trace_id (int: Triton's trace id), request_id (str: the client's id, "" when none),
            and each of Triton's timestamps under its own name (int ns on the server's clock:
            REQUEST_START, QUEUE_START, COMPUTE_START, ..., GRPC_SEND_END)
    time    when the collector read it (ns), plus the request's index in that read: unique points
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferload.measure.trace_join import ServerTrace
from inferload.observe.sink import FieldValue, Point

MEASUREMENT = "triton_traces"
#: the columns of a row that are not Triton timestamps
NOT_STAMPS = frozenset({"time", "run_id", "model", "trace_file", "trace_id", "request_id"})


def trace_point(trace: ServerTrace, trace_id: int, trace_file: str, time_ns: int) -> Point:
    """One traced request as a `triton_traces` point (the collector adds `run_id`)."""
    fields: dict[str, FieldValue] = {"trace_id": trace_id, "request_id": trace.request_id}
    fields.update({name: int(ns) for name, ns in trace.timestamps.items()})
    return Point(MEASUREMENT, {"model": trace.model, "trace_file": trace_file}, fields, time_ns)


def trace_from_row(row: Mapping[str, Any]) -> ServerTrace:
    """A `triton_traces` row of an InfluxQL ``SELECT *`` back as the record the join reads."""
    stamps = {
        str(name): int(value)
        for name, value in row.items()
        if name not in NOT_STAMPS and isinstance(value, int | float) and not isinstance(value, bool)
    }
    request_id = row.get("request_id")
    return ServerTrace(str(row.get("model", "")), "" if request_id is None else str(request_id), stamps)
