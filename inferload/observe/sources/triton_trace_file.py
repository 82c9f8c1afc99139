"""Triton's trace file, tailed next to the server: each traced request as a `triton_traces` point.

Triton writes its traces to the file fixed at its start (``--trace-config triton,file=PATH``): with
``log_frequency`` N (a run sets 1,000) each N traces go to a new ``PATH.<k>``, a complete JSON array
written at once; with 0 they go to ``PATH`` itself, complete at shutdown. Every scrape this source
looks at ``PATH`` and ``PATH.<k>``, reads what each file gained since the last scrape (an offset
per file; a half-written entry is kept for the next scrape, never parsed), and ships a file's
requests once its JSON array is closed, so no request is shipped half or twice. The records are
`servermetrics.triton_trace.parse_traces`' (the file join's own), one point each
(`observe.points`).

The files already there at the first scrape and unchanged since the source was made are older
runs': they are not shipped. A file that is
rewritten (Triton restarted and writes ``PATH.0`` again: another inode, a shorter size or another
head) is read again from its start.
"""

from __future__ import annotations

import codecs
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from inferload.errors import ScrapeError
from inferload.observe.points import trace_point
from inferload.observe.sink import Point, seconds_to_ns
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import trace_of
from inferload.servermetrics.triton_trace import TraceSettingsClient, parse_traces


# The collector's ``kind: triton-trace`` source: its YAML entry, the entries a scenario implies,
# and the source built from one (`triton_trace_file.TritonTraceFileSource`).
#
#     sources:
#       - kind: triton-trace
#         file: /var/log/triton/trace.json          # Triton's --trace-config triton,file=...
#       - kind: triton-trace                         # or: ask Triton where its file is
#         address: localhost:8000
#         model: resnet
#
# With ``--scenario`` there is one per Triton server (address) whose traced targets say
# ``trace.source: influxdb``: ``file`` is the target's ``trace.file`` when given, else Triton is asked.
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
        trace = trace_of(target)
        if trace is None or trace.source != "influxdb":
            continue
        key = trace.file or target.address
        if key not in configs:
            configs[key] = TritonTraceSourceConfig(
                kind="triton-trace",
                target=target.name,
                file=trace.file,
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


#: bytes of a file's start kept to tell a rewrite from trailing bytes added to a closed array
HEAD_BYTES = 512
_SKIPPED = " \t\r\n,"


@dataclass
class _TraceFile:
    """What was read of one file: the bytes consumed, the text not parsed yet, the entries held."""

    inode: int
    offset: int = 0
    head: bytes = b""
    mtime_ns: int = 0
    text: str = ""
    opened: bool = False  # the array's "[" seen
    closed: bool = False  # its "]" seen: the entries were shipped
    entries: list[dict[str, Any]] = field(default_factory=list)
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def parse(self) -> None:
        """Take every complete entry out of `text`; stop at a cut entry (the rest of a file being written)."""
        text, position = self.text, 0
        if not self.opened:
            start = text.find("[")
            if start < 0:
                return
            self.opened, position = True, start + 1
        decoder = json.JSONDecoder()
        while True:
            while position < len(text) and text[position] in _SKIPPED:
                position += 1
            if position >= len(text):
                break
            if text[position] == "]":
                self.closed = True
                position = len(text)
                break
            try:
                entry, position = decoder.raw_decode(text, position)
            except json.JSONDecodeError:
                break  # cut: the rest comes with the next read
            if isinstance(entry, dict):
                self.entries.append(entry)
        self.text = text[position:]


def trace_file_names(path: Path) -> list[Path]:
    """``PATH`` and its ``PATH.<k>`` files that exist, ``PATH`` first, then by ``k``."""
    numbered = []
    for candidate in path.parent.glob(path.name + ".*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            numbered.append((int(suffix), candidate))
    found = [path] if path.is_file() else []
    return found + [candidate for _, candidate in sorted(numbered)]


class TritonTraceFileSource:
    """One Triton's trace file (and its ``.<k>`` files) → a `triton_traces` point per traced request.

    `locate` gives the path when it is not known up front (asked of Triton's trace settings on the
    first scrape); a ScrapeError from it makes the collector try again next interval."""

    def __init__(self, path: Path | None, locate: Callable[[], Path] | None = None, label: str | None = None) -> None:
        if path is None and locate is None:
            raise ValueError("a trace file path or a way to locate it is needed")
        self.path = path
        self._locate = locate
        self.name = f"triton-trace:{label or path}"
        self._files: dict[Path, _TraceFile] | None = None  # None until the first scrape's baseline
        self._made_ns = time.time_ns()

    def scrape(self, now: float) -> list[Point]:
        if self.path is None:
            assert self._locate is not None
            self.path = self._locate()
        if self._files is None:  # the files already there belong to earlier runs
            self._files = {}
            for name in trace_file_names(self.path):
                state = self._seen(name)
                if state is not None and state.mtime_ns < self._made_ns:
                    self._files[name] = state
            return []
        points: list[Point] = []
        base_ns = seconds_to_ns(now)
        for name in trace_file_names(self.path):
            state = self._read(name, self._files.get(name))
            if state is None:
                continue
            self._files[name] = state
            if state.closed and state.entries:
                points.extend(self._points(state.entries, base_ns + len(points)))
                state.entries.clear()
        return points

    @staticmethod
    def _seen(name: Path) -> _TraceFile | None:
        """A file as already read to its end (not parsed): an earlier run's."""
        try:
            with name.open("rb") as handle:
                info = os.fstat(handle.fileno())
                head = handle.read(HEAD_BYTES)
        except OSError:
            return None
        return _TraceFile(inode=info.st_ino, offset=info.st_size, head=head, mtime_ns=info.st_mtime_ns, opened=True, closed=True)

    def _read(self, name: Path, state: _TraceFile | None) -> _TraceFile | None:
        """The file's state after reading what it gained; None when it cannot be read now."""
        try:
            with name.open("rb") as handle:
                info = os.fstat(handle.fileno())
                if state is not None and self._rewritten(state, info, handle):
                    state = None
                if state is None:
                    state = _TraceFile(inode=info.st_ino)
                if state.closed or info.st_size == state.offset:
                    state.mtime_ns = info.st_mtime_ns
                    return state
                handle.seek(state.offset)
                data = handle.read()
                state.mtime_ns = os.fstat(handle.fileno()).st_mtime_ns
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                return None  # gone between the listing and the read
            raise ScrapeError(f"{name}: cannot read Triton's trace file: {exc.strerror}") from None
        if len(state.head) < HEAD_BYTES:
            state.head += data[: HEAD_BYTES - len(state.head)]
        state.offset += len(data)
        state.text += state.decoder.decode(data)
        state.parse()
        return state

    @staticmethod
    def _rewritten(state: _TraceFile, info: os.stat_result, handle: Any) -> bool:
        if info.st_ino != state.inode or info.st_size < state.offset:
            return True
        if info.st_mtime_ns == state.mtime_ns or not state.head:
            return False
        position = handle.tell()
        head = handle.read(len(state.head))
        handle.seek(position)
        return bool(head != state.head)

    def _points(self, entries: list[dict[str, Any]], first_ns: int) -> list[Point]:
        by_id: dict[Any, list[dict[str, Any]]] = {}
        for entry in entries:
            by_id.setdefault(entry.get("id"), []).append(entry)
        points: list[Point] = []
        for trace_id, group in by_id.items():
            for trace in parse_traces(group):
                number = trace_id if isinstance(trace_id, int) and not isinstance(trace_id, bool) else -1
                points.append(trace_point(trace, number, str(self.path), first_ns + len(points)))
        return points
