"""A Triton target's ``trace`` key: the per-request join with Triton's trace API (the tail anatomy).

``trace: {rate: 0.01}`` turns Triton's tracing on for the target's model during the run (one
request in ``1/rate`` traced, timestamps only) and restores the model's previous trace settings
after; ``slowest: true`` traces every request so that the slowest ones are always among those
joined (costs the server more: see docs/observability.md); ``file`` is Triton's trace file as the
load generator sees it (default: the path Triton reports in its trace settings, readable when the
server runs on this machine). ``trace: {}`` takes the defaults.

``source`` says where the run reads Triton's trace records: ``file`` (default) from the trace file
on this machine; ``influxdb`` from the ``triton_traces`` points the collector sidecar next to a
remote Triton writes (``python -m collectors --scenario ...``; the run must stream to InfluxDB with
the collector's ``--run-id``). With ``influxdb``, ``file`` is the trace file as the collector sees
it (default: the path Triton reports).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictStr, field_validator

from inferload.scenario.fields import FrozenModel, Number
from inferload.scenario.messages import custom_error

#: the share of requests traced when ``rate`` is not given (cost measured in docs/benchmarks-history.md)
DEFAULT_TRACE_RATE = 0.01
#: where a run reads the trace records: the trace file here, or the collector's points in InfluxDB
TraceSource = Literal["file", "influxdb"]


class TraceSpec(FrozenModel):
    """``trace: {rate: 0.01, slowest: false, file: /path/of/trace.json, source: file}``."""

    rate: Annotated[Number, Field(gt=0, le=1)] = DEFAULT_TRACE_RATE
    slowest: StrictBool = False
    file: StrictStr | None = None
    source: TraceSource = "file"

    @field_validator("file")
    @classmethod
    def _file_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise custom_error("expected the path of Triton's trace file (its --trace-config triton,file=...); got ''")
        return value

    @property
    def every_nth(self) -> int:
        """Triton's ``trace_rate``: one request in this many is traced (1 with ``slowest``)."""
        return 1 if self.slowest else max(1, round(1.0 / self.rate))
