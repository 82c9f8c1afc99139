"""The `latency_histograms` InfluxDB measurement: each window's HDR histogram, next to its figures.

One point per window per target per series, at the same time and with the same tags as that
window's `requests` point (run_id, target, server, protocol, model, worker: `all` for every worker
merged, else a worker's id). A window in which no request finished has none. Fields:

- `hdr`: the histogram as `inferload.measure.hdr` sends it between processes (HdrHistogram's
  compressed V2 encoding in base64; "" when nothing succeeded). InfluxDB 1.x keeps a string field
  up to 64 KiB, so a longer encoding is cut into `hdr`, `hdr_2`, `hdr_3`, ... of `MAX_FIELD_CHARS`
  each; `hdr_parts` says how many (1 almost always: a few hundred bytes to a few KB at 1 s windows);
- `successes`, `failures`, `sum_ms`, `min_ms`, `max_ms`: the exact totals the histogram lacks;
- `window_s`: the window's length.

`line_from_row` turns a row read back with `SELECT *` into the line form of histograms.jsonl
(`inferload.results.histograms`), so the same code merges windows from either place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferload.measure.hdr import WindowStats
from inferload.measure.trace_join import ServerTrace
from inferload.observe.sink import FieldValue, Point, seconds_to_ns

# Triton's traced requests as InfluxDB points (`triton_traces`) and back.
#
# The collector sidecar next to a remote Triton ships each traced request it reads from the trace
# file (`observe.sources.triton_trace_file`); a run whose target has ``trace.source: influxdb`` reads
# them back (`run.trace_from_influx`) and joins them as it joins the file's records. One point per
# traced request:
#
#     tags    run_id, model, trace_file (the file the collector read, so two servers never collide)
#     fields  trace_id (int: Triton's trace id), request_id (str: the client's id, "" when none),
#             and each of Triton's timestamps under its own name (int ns on the server's clock:
#             REQUEST_START, QUEUE_START, COMPUTE_START, ..., GRPC_SEND_END)
#     time    when the collector read it (ns), plus the request's index in that read: unique points
TRACE_MEASUREMENT = "triton_traces"
#: the columns of a row that are not Triton timestamps
NOT_STAMPS = frozenset({"time", "run_id", "model", "trace_file", "trace_id", "request_id"})


def trace_point(trace: ServerTrace, trace_id: int, trace_file: str, time_ns: int) -> Point:
    """One traced request as a `triton_traces` point (the collector adds `run_id`)."""
    fields: dict[str, FieldValue] = {"trace_id": trace_id, "request_id": trace.request_id}
    fields.update({name: int(ns) for name, ns in trace.timestamps.items()})
    return Point(TRACE_MEASUREMENT, {"model": trace.model, "trace_file": trace_file}, fields, time_ns)


def trace_from_row(row: Mapping[str, Any]) -> ServerTrace:
    """A `triton_traces` row of an InfluxQL ``SELECT *`` back as the record the join reads."""
    stamps = {
        str(name): int(value)
        for name, value in row.items()
        if name not in NOT_STAMPS and isinstance(value, int | float) and not isinstance(value, bool)
    }
    request_id = row.get("request_id")
    return ServerTrace(str(row.get("model", "")), "" if request_id is None else str(request_id), stamps)


HISTOGRAM_MEASUREMENT = "latency_histograms"
MAX_FIELD_CHARS = 60_000  # under InfluxDB 1.x's 64 KiB limit on a string field


def part_names(parts: int) -> list[str]:
    """`hdr`, `hdr_2`, ... : the fields that hold the encoding's parts, in order."""
    return ["hdr"] + [f"hdr_{n}" for n in range(2, parts + 1)]


def histogram_point(
    run_id: str,
    target_tags: Mapping[str, str],
    index: int,
    window_s: float,
    stats: WindowStats,
    worker: str,
    max_field_chars: int = MAX_FIELD_CHARS,
) -> Point | None:
    """The `latency_histograms` point of one window (pure); None when no request finished in it."""
    if stats.requests == 0:
        return None
    wire = stats.to_wire()
    encoded: str = wire["h"]
    chunks = [encoded[i : i + max_field_chars] for i in range(0, len(encoded), max_field_chars)] or [""]
    fields: dict[str, float | int | str | None] = dict(zip(part_names(len(chunks)), chunks, strict=True))
    fields.update(
        {
            "hdr_parts": len(chunks),
            "successes": int(wire["s"]),
            "failures": int(wire["f"]),
            "sum_ms": float(wire["sum"]),
            "min_ms": float(wire["min"]),
            "max_ms": float(wire["max"]),
            "window_s": float(window_s),
        }
    )
    tags = {"run_id": run_id, "worker": worker, **target_tags}
    return Point(HISTOGRAM_MEASUREMENT, tags, fields, seconds_to_ns(index * window_s))


def line_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A `SELECT *` row (columns by name; `time` in ns) as a histograms.jsonl line.

    Raises ValueError naming what is missing or malformed."""
    try:
        parts = int(row["hdr_parts"])
        names = part_names(parts)
        missing = [name for name in names if not isinstance(row.get(name), str)]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing (hdr_parts is {parts})")
        return {
            "start": int(row["time"]) / 1e9,
            "window_s": float(row["window_s"]),
            "target": str(row["target"]),
            "worker": str(row["worker"]),
            "h": "".join(row[name] for name in names),
            "s": int(row["successes"]),
            "f": int(row["failures"]),
            "sum": float(row["sum_ms"]),
            "min": float(row["min_ms"]),
            "max": float(row["max_ms"]),
        }
    except KeyError as error:
        raise ValueError(f"{HISTOGRAM_MEASUREMENT} point without the field {error}") from None
    except TypeError as error:
        raise ValueError(f"{HISTOGRAM_MEASUREMENT} point with a malformed field: {error}") from None
