"""Triton's trace extension: the model's trace settings (read, changed, restored) and the trace
files Triton writes, parsed into `ServerTrace` records.

Triton 2.51 (the nvidia-pytriton binary, checked by hand): the trace *file* is fixed at server start
(``--trace-config triton,file=PATH``); the settings API (``GET/POST /v2/models/<m>/trace/setting``,
or gRPC ``TraceSetting``) changes ``trace_level``, ``trace_rate``, ``trace_count`` and
``log_frequency`` only, and its answer names the file (``trace_file``). With ``log_frequency`` N
Triton writes each N traces to ``PATH.<k>`` (a complete JSON array), and the traces it still holds
when the settings change; with 0 it appends to ``PATH`` itself, only complete at shutdown. So a
run sets ``log_frequency`` and reads the ``PATH.<k>`` files written after it started.

A file is a JSON array of entries ``{"id": n, "model_name", "request_id"}`` and
``{"id": n, "timestamps": [{"name", "ns"}]}``; entries of one request share ``id``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from inferload.errors import ScrapeError
from inferload.measure.trace_join import ServerTrace
from inferload.scenario.tls import TlsSettings, requests_tls
from inferload.servermetrics.triton import grpc_client_options

#: the settings the run changes (and restores)
SETTING_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
#: traces per file while a run traces
LOG_FREQUENCY = 1000
#: timestamps a request has once per response (a decoupled model's over the gRPC stream): the last is kept
LAST_OF_MANY = frozenset({"GRPC_SEND_START", "GRPC_SEND_END", "INFER_RESPONSE_COMPLETE"})


def run_settings(every_nth: int) -> dict[str, Any]:
    """What a run sets: timestamps of one request in ``every_nth``, no count limit, a file per 1,000."""
    return {"trace_level": ["TIMESTAMPS"], "trace_rate": str(every_nth), "trace_count": "-1", "log_frequency": str(LOG_FREQUENCY)}


def restorable(settings: dict[str, Any]) -> dict[str, Any]:
    """The keys a run changes, as they were (to post back after the run)."""
    return {key: settings[key] for key in SETTING_KEYS if key in settings}


def _grpc_plain(settings: dict[str, Any]) -> dict[str, Any]:
    """gRPC answers ``{"settings": {"trace_level": {"value": [...]}}}``: as HTTP's flat form."""
    inner = settings.get("settings", settings)
    flat: dict[str, Any] = {}
    for key, value in inner.items():
        values = value.get("value", []) if isinstance(value, dict) else value
        flat[key] = values if key == "trace_level" else (values[0] if isinstance(values, list) and values else values)
    return flat


class TraceSettingsClient:
    """A model's trace settings on one Triton endpoint, over the target's own protocol."""

    def __init__(self, address: str, protocol: Literal["http", "grpc"], timeout_s: float, tls: TlsSettings | None = None) -> None:
        self.address = address
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.tls = tls

    def get(self, model: str) -> dict[str, Any]:
        return self._call(model, None)

    def update(self, model: str, settings: dict[str, Any]) -> dict[str, Any]:
        return self._call(model, settings)

    def _call(self, model: str, settings: dict[str, Any] | None) -> dict[str, Any]:
        where = f"Triton trace settings of {model!r} at {self.address}"
        try:
            return self._grpc(model, settings) if self.protocol == "grpc" else self._http(model, settings)
        except ScrapeError:
            raise
        except Exception as exc:  # the clients raise their own trees; the run only needs the reason
            raise ScrapeError(f"{where}: {type(exc).__name__}: {str(exc)[:200]}") from None

    def _http(self, model: str, settings: dict[str, Any] | None) -> dict[str, Any]:
        import requests

        base = self.address if "://" in self.address else f"{'https' if self.tls else 'http'}://{self.address}"
        url = f"{base}/v2/models/{urllib.parse.quote(model, safe='')}/trace/setting"
        options = requests_tls(self.tls)
        if settings is None:
            answer = requests.get(url, timeout=self.timeout_s, **options)
        else:
            answer = requests.post(url, json=settings, timeout=self.timeout_s, **options)
        if answer.status_code != 200:
            raise ScrapeError(
                f"Triton trace settings of {model!r} at {self.address}: HTTP {answer.status_code}: {answer.text[:200]}"
            )
        return dict(answer.json())

    def _grpc(self, model: str, settings: dict[str, Any] | None) -> dict[str, Any]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.address, **grpc_client_options(self.tls))
        try:
            if settings is None:
                answer = client.get_trace_settings(model, as_json=True, client_timeout=self.timeout_s)
            else:
                answer = client.update_trace_settings(model, settings, as_json=True, client_timeout=self.timeout_s)
        finally:
            client.close()
        return _grpc_plain(dict(answer))


def trace_files(path: Path, since: float) -> list[Path]:
    """Triton's ``PATH.<k>`` files (and ``PATH``) changed at or after ``since`` (epoch seconds)."""
    candidates = [path, *path.parent.glob(path.name + ".*")]
    found = []
    for candidate in candidates:
        try:
            if candidate.is_file() and candidate.stat().st_mtime >= since:
                found.append(candidate)
        except OSError:
            continue
    return sorted(found)


def json_entries(text: str) -> Iterator[dict[str, Any]]:
    """The entries of a trace file, also of one Triton is still writing (no closing ``]``, a cut entry)."""
    decoder = json.JSONDecoder()
    position = text.find("[")
    if position < 0:
        return
    position += 1
    length = len(text)
    while position < length:
        while position < length and text[position] in " \t\r\n,":
            position += 1
        if position >= length or text[position] == "]":
            return
        try:
            entry, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return  # the cut end of a file being written
        if isinstance(entry, dict):
            yield entry


def parse_traces(entries: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> list[ServerTrace]:
    """Entries grouped by trace id into one record per request (child traces of ensembles included).
    A name seen twice keeps its first time, except those of `LAST_OF_MANY`: a streamed request of a
    decoupled model has a ``GRPC_SEND_START``/``GRPC_SEND_END`` per response, and its span ends at
    the last (its final response, the one the client's time ends at)."""
    models: dict[Any, str] = {}
    request_ids: dict[Any, str] = {}
    stamps: dict[Any, dict[str, int]] = {}
    for entry in entries:
        key = entry.get("id")
        if "model_name" in entry:
            models[key] = str(entry["model_name"])
            request_ids[key] = str(entry.get("request_id", ""))
        for stamp in entry.get("timestamps", []) or []:
            name, ns = stamp.get("name"), stamp.get("ns")
            if isinstance(name, str) and isinstance(ns, int):
                mine = stamps.setdefault(key, {})
                if name in LAST_OF_MANY and name in mine:  # a streamed request's responses: its final send
                    mine[name] = max(mine[name], ns)
                else:
                    mine.setdefault(name, ns)
    return [ServerTrace(models[key], request_ids.get(key, ""), stamps.get(key, {})) for key in models]


def read_traces(path: Path, since: float) -> list[ServerTrace]:
    """Every trace in the files Triton wrote at ``path`` since ``since``; ScrapeError when none can be read."""
    files = trace_files(path, since)
    if not files:
        raise ScrapeError(f"{path}: no trace file written during the run (is the server's trace file on this machine?)")
    traces: list[ServerTrace] = []
    for file in files:
        try:
            text = file.read_text(errors="replace")
        except OSError as exc:
            raise ScrapeError(f"{file}: cannot read Triton's trace file: {exc.strerror}") from None
        traces.extend(parse_traces(json_entries(text)))
    return traces
