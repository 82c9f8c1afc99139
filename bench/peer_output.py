"""Parsers of the peer tools' own reports (h2load, wrk, hey, AIPerf, GuideLLM, inference-perf): what each tool says it did.

Pure functions of the tool's output text, so unit tests check them on saved captures
(tests/captures/peers/). The request/response tools' give a `ToolReport`: the requests the tool
counts as succeeded and failed, and its own mean latency in milliseconds (None where the output has
none). The streaming tools' (item 12) give a `StreamReport`: the same counts, and the tool's own
TTFT p50 and p99 and inter-token latency p50, in milliseconds, each as that tool defines it:

- AIPerf (profile_export_aiperf.json): ``time_to_first_token`` and ``inter_token_latency``, ms;
- GuideLLM (its JSON report, the first benchmark): ``time_to_first_token_ms`` and
  ``inter_token_latency_ms`` over the successful requests; its ITL is each request's
  (last token − first token) / (output tokens − 1), weighted by output tokens − 1;
- inference-perf (summary_lifecycle_metrics.json): ``time_to_first_token`` and
  ``inter_token_latency`` (every gap between two tokens, pooled) of the successes, in seconds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class PeerOutputError(ValueError):
    """A tool's output lacks the line a figure is read from."""


@dataclass(frozen=True)
class ToolReport:
    """What one tool run says of itself."""

    succeeded: int
    failed: int
    mean_ms: float | None


_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}

# h2load: "requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored, 0 timeout"
_H2LOAD_REQUESTS = re.compile(
    r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout",
    re.M,
)
# h2load: "status codes: 200 2xx, 0 3xx, 0 4xx, 0 5xx"
_H2LOAD_STATUS = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.M)
# h2load: "time for request:   123.00us   1.20ms   234.56us   45.00us    90.00%" (min max mean sd ±sd)
_H2LOAD_TIME = re.compile(r"^time for request:\s+([\d.]+)(ns|us|ms|s)\s+([\d.]+)(ns|us|ms|s)\s+([\d.]+)(ns|us|ms|s)", re.M)

# wrk: "    Latency   312.45us  120.33us   3.20ms   90.12%" (avg stdev max +/-stdev)
_WRK_LATENCY = re.compile(r"^\s+Latency\s+([\d.]+)(us|ms|s|m)\b", re.M)
_WRK_REQUESTS = re.compile(r"^\s+(\d+) requests in ([\d.]+)(us|ms|s|m),", re.M)
_WRK_NON_2XX = re.compile(r"^\s+Non-2xx or 3xx responses: (\d+)", re.M)
_WRK_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")

# hey: "  Average:\t0.0004 secs"; "  [200]\t1234 responses"; "Error distribution:" then "  [12]\tGet ...: EOF"
_HEY_AVERAGE = re.compile(r"^\s+Average:\s+(NaN|[\d.]+) secs", re.M)
_HEY_STATUS = re.compile(r"^\s+\[(\d{3})\]\s+(\d+) responses", re.M)
_HEY_ERRORS = re.compile(r"^\s+\[(\d+)\]\s+\S", re.M)


def _ms(value: str, unit: str) -> float:
    return float(value) * _UNITS_MS[unit]


def parse_h2load(text: str) -> ToolReport:
    """h2load's summary. A gRPC answer is HTTP 200 even when the call failed (grpc-status in the
    trailers, which h2load does not read): only the server's count tells them apart."""
    counts = _H2LOAD_REQUESTS.search(text)
    if counts is None:
        raise PeerOutputError("h2load output has no 'requests: N total, ...' line")
    status = _H2LOAD_STATUS.search(text)
    done, succeeded = int(counts.group(3)), int(counts.group(4))
    if status is not None:
        succeeded = int(status.group(1))
    timing = _H2LOAD_TIME.search(text)
    mean = _ms(timing.group(5), timing.group(6)) if timing else None
    return ToolReport(succeeded=succeeded, failed=max(done - succeeded, 0) + int(counts.group(6)), mean_ms=mean)


def parse_wrk(text: str) -> ToolReport:
    """wrk's summary (one thread: its "Thread Stats" latency average is the run's mean)."""
    total = _WRK_REQUESTS.search(text)
    if total is None:
        raise PeerOutputError("wrk output has no 'N requests in T' line")
    non_2xx = _WRK_NON_2XX.search(text)
    errors = _WRK_SOCKET_ERRORS.search(text)
    failed = int(non_2xx.group(1)) if non_2xx else 0
    if errors is not None:
        failed += sum(int(g) for g in errors.groups()[1:])  # connect errors never became requests
    latency = _WRK_LATENCY.search(text)
    requests = int(total.group(1))
    return ToolReport(
        succeeded=requests - (int(non_2xx.group(1)) if non_2xx else 0),
        failed=failed,
        mean_ms=_ms(latency.group(1), latency.group(2)) if latency else None,
    )


def parse_hey(text: str) -> ToolReport:
    """hey's summary: 2xx responses succeeded, other statuses and transport errors failed."""
    average = _HEY_AVERAGE.search(text)
    if average is None:
        raise PeerOutputError("hey output has no 'Average: X secs' line")
    succeeded = failed = 0
    for code, count in _HEY_STATUS.findall(text):
        if code.startswith("2"):
            succeeded += int(count)
        else:
            failed += int(count)
    _, _, errors = text.partition("Error distribution:")
    failed += sum(int(n) for n in _HEY_ERRORS.findall(errors))
    mean = None if average.group(1) == "NaN" else float(average.group(1)) * 1e3  # NaN: no response at all
    return ToolReport(succeeded=succeeded, failed=failed, mean_ms=mean)


def parse_aiperf(text: str) -> ToolReport:
    """AIPerf's profile_export_aiperf.json: request_count, error_request_count, request_latency (ms)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise PeerOutputError(f"AIPerf export is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise PeerOutputError("AIPerf export is not a JSON object")

    def metric(name: str) -> dict[str, object] | None:
        value = data.get(name)
        if isinstance(value, dict):
            return value
        for record in data.get("records", []) if isinstance(data.get("records"), list) else []:
            if isinstance(record, dict) and record.get("tag") == name:
                return record
        return None

    count = metric("request_count")
    latency = metric("request_latency")
    if count is None or latency is None:
        raise PeerOutputError("AIPerf export lacks request_count or request_latency")
    errors = metric("error_request_count")
    mean = latency.get("avg")
    unit = str(latency.get("unit", "ms"))
    return ToolReport(
        succeeded=int(float(str(count.get("avg", 0)))),
        failed=int(float(str(errors.get("avg", 0)))) if errors else 0,
        mean_ms=None if mean is None else float(str(mean)) * _UNITS_MS.get(unit, 1.0),
    )


@dataclass(frozen=True)
class StreamReport:
    """What one streaming tool says of its run (item 12): its counts and its own percentiles (ms)."""

    succeeded: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None


def _json_object(text: str, tool: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise PeerOutputError(f"{tool} report is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise PeerOutputError(f"{tool} report is not a JSON object")
    return data


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_aiperf_stream(text: str) -> StreamReport:
    """AIPerf's profile_export_aiperf.json of a streamed run: ``time_to_first_token`` p50/p99 and
    ``inter_token_latency`` p50 (each with its ``unit``), ``request_count``, ``error_request_count``."""
    data = _json_object(text, "AIPerf")

    def metric(name: str) -> dict[str, Any] | None:
        value = data.get(name)
        if isinstance(value, dict):
            return value
        records = data.get("records")
        for record in records if isinstance(records, list) else []:
            if isinstance(record, dict) and record.get("tag") == name:
                return record
        return None

    def ms(found: dict[str, Any] | None, key: str) -> float | None:
        value = None if found is None else _number(found.get(key))
        return None if value is None or found is None else value * _UNITS_MS.get(str(found.get("unit", "ms")), 1.0)

    count, ttft = metric("request_count"), metric("time_to_first_token")
    if count is None or ttft is None:
        raise PeerOutputError("AIPerf export lacks request_count or time_to_first_token")
    errors, itl = metric("error_request_count"), metric("inter_token_latency")
    return StreamReport(
        succeeded=int(_number(count.get("avg")) or 0),
        failed=int(_number(errors.get("avg")) or 0) if errors else 0,
        ttft_p50_ms=ms(ttft, "p50"),
        ttft_p99_ms=ms(ttft, "p99"),
        itl_p50_ms=ms(itl, "p50"),
    )


def parse_guidellm_stream(text: str) -> StreamReport:
    """GuideLLM's JSON report (`guidellm run --output kind=json`): its first benchmark's metrics over
    the successful requests (ms); failed counts the errored and the incomplete (cut at the end)."""
    data = _json_object(text, "GuideLLM")
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks or not isinstance(benchmarks[0], dict):
        raise PeerOutputError("GuideLLM report has no benchmark")
    metrics = benchmarks[0].get("metrics")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("request_totals"), dict):
        raise PeerOutputError("GuideLLM report's benchmark has no metrics.request_totals")
    totals = metrics["request_totals"]

    def successful(name: str) -> dict[str, Any]:
        summary = metrics.get(name)
        found = summary.get("successful") if isinstance(summary, dict) else None
        return found if isinstance(found, dict) else {}

    ttft, itl = successful("time_to_first_token_ms"), successful("inter_token_latency_ms")
    percentiles = ttft.get("percentiles")
    return StreamReport(
        succeeded=int(_number(totals.get("successful")) or 0),
        failed=int(_number(totals.get("errored")) or 0) + int(_number(totals.get("incomplete")) or 0),
        ttft_p50_ms=_number(ttft.get("median")),
        ttft_p99_ms=_number(percentiles.get("p99")) if isinstance(percentiles, dict) else None,
        itl_p50_ms=_number(itl.get("median")),
    )


def parse_inference_perf_stream(text: str) -> StreamReport:
    """inference-perf's summary_lifecycle_metrics.json: the successes' ``time_to_first_token`` median
    and p99 and ``inter_token_latency`` median (seconds, given here in ms); the failures' count."""
    data = _json_object(text, "inference-perf")
    successes, failures = data.get("successes"), data.get("failures")
    if not isinstance(successes, dict) or not isinstance(failures, dict):
        raise PeerOutputError("inference-perf summary lacks successes or failures")
    found = successes.get("latency")
    latency: dict[str, Any] = found if isinstance(found, dict) else {}

    def ms(name: str, key: str) -> float | None:
        summary = latency.get(name)
        value = _number(summary.get(key)) if isinstance(summary, dict) else None
        return None if value is None else value * 1e3

    return StreamReport(
        succeeded=int(_number(successes.get("count")) or 0),
        failed=int(_number(failures.get("count")) or 0),
        ttft_p50_ms=ms("time_to_first_token", "median"),
        ttft_p99_ms=ms("time_to_first_token", "p99"),
        itl_p50_ms=ms("inter_token_latency", "median"),
    )
