"""The collector's ``kind: triton-trace`` source: its YAML entry, the entries a scenario implies,
and the source built from one (`triton_trace_file.TritonTraceFileSource`).

    sources:
      - kind: triton-trace
        file: /var/log/triton/trace.json          # Triton's --trace-config triton,file=...
      - kind: triton-trace                         # or: ask Triton where its file is
        address: localhost:8000
        model: resnet

With ``--scenario`` there is one per Triton server (address) whose traced targets say
``trace.source: influxdb``: ``file`` is the target's ``trace.file`` when given, else Triton is asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from inferload.errors import ScrapeError
from inferload.observe.sources.triton_trace_file import TritonTraceFileSource
from inferload.scenario.model import Scenario
from inferload.servermetrics.triton_trace import TraceSettingsClient


class TritonTraceSourceConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["triton-trace"]
    target: str | None = None  # the scenario target it was made for (a name in messages only)
    file: str | None = None  # Triton's trace file on the collector's machine
    address: str | None = None  # else: Triton's host:port, whose trace settings name the file
    protocol: Literal["http", "grpc"] = "http"
    model: str | None = None  # a model of that Triton (the settings API is per model)

    @model_validator(mode="after")
    def _file_or_address(self) -> TritonTraceSourceConfig:
        if self.file is not None and not self.file.strip():
            raise ValueError("file: expected the path of Triton's trace file (its --trace-config triton,file=...); got ''")
        if self.file is None and (self.address is None or self.model is None):
            raise ValueError("give file (Triton's --trace-config triton,file=PATH), or address and model to ask Triton for it")
        return self


def trace_sources(scenario: Scenario) -> list[TritonTraceSourceConfig]:
    """One ``triton-trace`` source per Triton server whose traced targets take their traces from InfluxDB."""
    configs: dict[str, TritonTraceSourceConfig] = {}
    for target in scenario.targets:
        if target.server != "triton" or target.trace is None or target.trace.source != "influxdb":
            continue
        key = target.trace.file or target.address
        if key not in configs:
            configs[key] = TritonTraceSourceConfig(
                kind="triton-trace",
                target=target.name,
                file=target.trace.file,
                address=target.address,
                protocol=target.protocol,
                model=target.model,
            )
    return list(configs.values())


def build_trace_source(config: TritonTraceSourceConfig, timeout_s: float) -> TritonTraceFileSource:
    if config.file is not None:
        return TritonTraceFileSource(Path(config.file), label=config.target)
    address, model = config.address, config.model
    assert address is not None and model is not None  # the validator's rule

    def locate() -> Path:
        settings = TraceSettingsClient(address, config.protocol, timeout_s).get(model)
        reported = str(settings.get("trace_file") or "")
        if not reported:
            raise ScrapeError(
                f"Triton at {address} has no trace file: start it with --trace-config triton,file=PATH (and level=OFF)"
            )
        return Path(reported)

    return TritonTraceFileSource(None, locate, label=config.target or f"{address}/{model}")
