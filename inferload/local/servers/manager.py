"""Start, check and stop the local servers together (each server's `LocalServer` is the `LOCAL` of its
launcher module, named by its `inferload.scenario.kinds.ServerRecord`); state in state.json.

``state_dir/state.json`` holds pids, ports, log paths and cold-start seconds, so that
``status()`` and ``down()`` work from any process (the CLI, a later run, a test).
Cold start = process spawn -> first successful real inference, per model and per server
(the server's figure is its slowest model).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from inferload.errors import ServerError
from inferload.local.models.llm import LLM_NAME
from inferload.local.models.specs import MODEL_NAMES, ModelSpec, get_spec
from inferload.local.servers.ports import LOOPBACK, ServerPorts, check_free, is_port_open
from inferload.local.servers.procs import ProcessRecord, is_alive, log_tail
from inferload.scenario.kinds import SERVER_RECORDS, Server, implementation
from inferload.scenario.messages import format_key_path


# One real inference per model and server: the readiness check of the local servers.
#
# Plain ``urllib`` on purpose: no client library state, works in any process. ``/ping`` and
# ``/v2/health/ready`` are not enough (TorchServe says Healthy before its workers can answer).
class NotReady(Exception):
    """The server did not (yet) answer this probe with a correct output."""


def probe_post(url: str, body: bytes, content_type: str, timeout_s: float) -> bytes:
    """The body of a readiness probe's POST (NotReady for a refusal or no answer)."""
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise NotReady(f"HTTP {exc.code} from {url}: {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NotReady(f"{url}: {exc}") from None


def probe_input(spec: ModelSpec, batch: int = 1) -> np.ndarray:
    """A small deterministic input batch for ``spec`` (values in [0, 1))."""
    size = batch * int(np.prod(spec.input_shape))
    values = (np.arange(size, dtype=np.float32) % 97) / 97.0
    return values.reshape(batch, *spec.input_shape)


def triton_infer(
    http_port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0
) -> np.ndarray:
    """Run ``data`` ([n, *input_shape] FP32) through Triton's HTTP/JSON API; returns outputs."""
    payload = {
        "inputs": [{"name": spec.input_name, "datatype": "FP32", "shape": list(data.shape), "data": data.reshape(-1).tolist()}],
        "outputs": [{"name": spec.output_name}],
    }
    url = f"http://{host}:{http_port}/v2/models/{spec.name}/infer"
    answer = json.loads(probe_post(url, json.dumps(payload).encode(), "application/json", timeout_s))
    try:
        output = next(o for o in answer["outputs"] if o["name"] == spec.output_name)
        result = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    except (KeyError, StopIteration, ValueError) as exc:
        raise NotReady(f"unexpected answer from {url}: {str(answer)[:300]}") from exc
    _check_shape(result, data.shape[0], spec, url)
    return result


def torchserve_infer(
    inference_port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0
) -> np.ndarray:
    """Run ``data`` through TorchServe as raw float32 bytes (octet-stream); returns outputs."""
    url = f"http://{host}:{inference_port}/predictions/{spec.name}"
    raw = np.ascontiguousarray(data, dtype="<f4").tobytes()
    return _json_list_answer(url, raw, "application/octet-stream", timeout_s, data.shape[0], spec)


def bentoml_infer(port: int, spec: ModelSpec, data: np.ndarray, host: str = "127.0.0.1", timeout_s: float = 5.0) -> np.ndarray:
    """Run ``data`` through the BentoML service's API for the model (JSON, the input by name); returns outputs."""
    url = f"http://{host}:{port}/{spec.name}"
    body = json.dumps({spec.input_name: data.tolist()}).encode()
    return _json_list_answer(url, body, "application/json", timeout_s, data.shape[0], spec)


def _json_list_answer(url: str, body: bytes, content_type: str, timeout_s: float, batch: int, spec: ModelSpec) -> np.ndarray:
    """The outputs a server answers ``body`` with as one JSON (nested) list (TorchServe, BentoML)."""
    answer = probe_post(url, body, content_type, timeout_s)
    try:
        result = np.asarray(json.loads(answer), dtype=np.float32)
    except ValueError as exc:
        raise NotReady(f"unexpected answer from {url}: {answer[:300]!r}") from exc
    _check_shape(result, batch, spec, url)
    return result


def _check_shape(result: np.ndarray, batch: int, spec: ModelSpec, url: str) -> None:
    expected = (batch, *spec.output_shape)
    if result.shape != expected:
        raise NotReady(f"{url} answered shape {list(result.shape)}, expected {list(expected)}")


@dataclass(frozen=True)
class LocalServer:
    """One server `inferload servers` runs: how it starts and stops, the models it serves, how one of
    them answers for real (its readiness), and the addresses a scenario target uses (looked up by name,
    never dispatched)."""

    name: str
    #: (state_dir, ports, models, host=) -> the started process's record
    start: Callable[..., ProcessRecord]
    #: (record, state_dir) -> leftover pids killed
    stop: Callable[[ProcessRecord, Path], list[int]]
    #: (port, model, host=, timeout_s=) -> None once the model answered one real request, else NotReady
    #: (a sample model's server: `sample_answers(its inference)`)
    answers: Callable[..., None]
    probe_port: Callable[[ServerPorts], int]
    urls: Callable[[ServerPorts, str], dict[str, str]]
    #: the models it serves whatever sample models are asked for (None: those asked for)
    own_models: tuple[str, ...] | None = None

    def models(self, asked: tuple[str, ...]) -> tuple[str, ...]:
        """The models it serves when ``asked`` (the sample models) are."""
        return asked if self.own_models is None else self.own_models


SERVERS: tuple[str, ...] = ("triton", "torchserve")
#: the name `inferload servers` knows each launcher by -> the server whose record names it
LAUNCHERS: dict[str, Server] = {
    record.local_name or server: server for server, record in SERVER_RECORDS.items() if record.local is not None
}
#: every server `up` can start; those past SERVERS only when asked for (BentoML makes its own venv first)
KNOWN_SERVERS: tuple[str, ...] = tuple(LAUNCHERS)


def local_server(server: str) -> LocalServer:
    """A launcher by its name (the `LOCAL` its server's record names); a ValueError naming the known ones."""
    if server not in LAUNCHERS:
        raise ValueError(f"unknown server {server!r}; expected one of {list(KNOWN_SERVERS)}")
    found: LocalServer = implementation(LAUNCHERS[server], "local")
    return found


def sample_answers(infer: Callable[..., np.ndarray]) -> Callable[..., None]:
    """A sample model's readiness through ``infer`` ((port, spec, data, host=, timeout_s=) -> outputs):
    one real inference of a small input batch, its outputs' shape checked."""

    def answers(port: int, model: str, host: str = LOOPBACK, timeout_s: float = 5.0) -> None:
        spec = get_spec(model)
        infer(port, spec, probe_input(spec), host=host, timeout_s=timeout_s)

    return answers


def probe(server: str, port: int, model: str, timeout_s: float = 5.0, host: str = "127.0.0.1") -> None:
    """One real answer of ``model`` from ``server`` at ``port`` (its `probe_port`), else NotReady."""
    local_server(server).answers(port, model, host=host, timeout_s=timeout_s)


STATE_FILE = "state.json"


class _RecordedProcess(BaseModel):
    pid: int
    start_ticks: int
    started_at: float
    log: str
    command: list[str] = []


class _RecordedServer(BaseModel):
    """A server's entry in state.json (`LocalServers._entry`): what `status` and `down` read."""

    process: _RecordedProcess
    pid: int
    log: str
    logs_dir: str
    ports: dict[str, int]
    urls: dict[str, str]
    ready: bool
    cold_start_s: float | None
    models_cold_start_s: dict[str, float]


class _RecordedState(BaseModel):
    """state.json's shape (`LocalServers._state`), checked as it is read; other keys are let be."""

    version: int = 1
    host: str = LOOPBACK
    ports: dict[str, int] = {}
    models: list[str] = []
    servers: dict[str, _RecordedServer] = {}


#: how long `down` waits for a stopped server's ports to close
PORTS_CLOSE_S = 5.0


@dataclass
class _Pending:
    """A server being brought up: its record and which models have answered."""

    server: str
    record: ProcessRecord
    models: tuple[str, ...]
    answered: dict[str, float] = field(default_factory=dict)  # model -> cold start seconds
    last_error: str = ""


def urls(server: str, ports: ServerPorts, host: str = LOOPBACK) -> dict[str, str]:
    """The addresses a scenario target uses for this server."""
    return local_server(server).urls(ports, host)


def state_dir_problem(state_dir: Path) -> str | None:
    """Why ``state_dir`` cannot be the state folder (a file is in the way), or None."""
    existing = next((path for path in (state_dir, *state_dir.parents) if path.exists()), None)
    if existing is None or existing.is_dir():
        return None
    if existing == state_dir:
        return f"expected a folder; got a file: {state_dir}"
    return f"expected a folder; {existing} is a file: {state_dir}"


class LocalServers:
    """The local real servers of one state dir."""

    def __init__(
        self, state_dir: Path, ports: ServerPorts | None = None, models: tuple[str, ...] = MODEL_NAMES, host: str = LOOPBACK
    ) -> None:
        """``models``: sample models, or the built-in LLM (``LLM_NAME``: Triton and KServe serve it
        behind their generate and OpenAI routes). ``host``: the address the servers bind (loopback by
        default; a test host's address in a network namespace for distributed tests). TorchServe's
        management API stays on loopback."""
        for model in models:
            if model != LLM_NAME:
                get_spec(model)
        self.state_dir = Path(state_dir)
        self.ports = ports if ports is not None else ServerPorts()
        self.models = tuple(models)
        self.host = host

    # ---- state.json -------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    def read_state(self) -> dict[str, Any]:
        """The recorded state ({} when nothing was ever started here); ServerError when state.json is
        not JSON, or not of the shape `_state` writes (naming the first key that is wrong)."""
        problem = state_dir_problem(self.state_dir)
        if problem:
            raise ServerError(f"state dir: {problem}")
        try:
            text = self.state_path.read_text()
        except FileNotFoundError:
            return {}
        try:
            _RecordedState.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            if first["type"] == "json_invalid":
                raise ServerError(f"{self.state_path} is not valid JSON ({first['msg']}); delete it and retry") from None
            where = format_key_path(tuple(first["loc"])) or "the file"
            raise ServerError(
                f"{self.state_path} is not the state inferload writes ({where}: {first['msg']}); delete it and retry"
            ) from None
        state: dict[str, Any] = json.loads(text)  # as written: the keys given, and any others
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_path)

    def _running(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Recorded servers whose main process is still alive."""
        result = {}
        for name, entry in state.get("servers", {}).items():
            record = ProcessRecord.from_dict(entry["process"])
            if is_alive(record.pid, record.start_ticks):
                result[name] = entry
        return result

    # ---- up ---------------------------------------------------------------------------
    def up(self, which: tuple[str, ...] = SERVERS, timeout_s: float = 120.0) -> dict[str, Any]:
        """Start the servers in ``which`` and wait until every model answers a real inference.

        Servers already running from this state dir are left as they are and reported with
        ``already_running: True``. On failure everything this call started is stopped and a
        ServerError carries the server's log tail.
        """
        unknown = [w for w in which if w not in KNOWN_SERVERS]
        if unknown:
            raise ServerError(f"unknown server(s) {unknown}; expected some of {list(KNOWN_SERVERS)}")
        state = self.read_state()
        running = self._running(state)
        if running and state.get("ports") and ServerPorts.from_dict(state["ports"]) != self.ports:
            self.ports = ServerPorts.from_dict(state["ports"])
        servers_state: dict[str, Any] = {k: v for k, v in state.get("servers", {}).items() if k in running}
        to_start = [w for w in which if w not in running]
        for server in to_start:
            check_free(self.ports.for_server(server), self.host)

        pending: list[_Pending] = []
        try:
            for server in to_start:
                record = local_server(server).start(self.state_dir, self.ports, self.models, host=self.host)
                pending.append(_Pending(server, record, local_server(server).models(self.models)))
                servers_state[server] = self._entry(server, record, {}, ready=False)
                self._write_state(self._state(servers_state))
            self._wait_ready(pending, timeout_s)
        except BaseException:
            for p in pending:
                self._stop_one(p.server, p.record)
            self._write_state(self._state({k: v for k, v in servers_state.items() if k in running}))
            raise

        for p in pending:
            servers_state[p.server] = self._entry(p.server, p.record, p.answered, ready=True)
        self._write_state(self._state(servers_state))
        report = {
            name: dict(entry, already_running=name not in to_start) for name, entry in servers_state.items() if name in which
        }
        return {"state_dir": str(self.state_dir), "ports": self.ports.to_dict(), "models": list(self.models), "servers": report}

    def _state(self, servers: dict[str, Any]) -> dict[str, Any]:
        return {"version": 1, "host": self.host, "ports": self.ports.to_dict(), "models": list(self.models), "servers": servers}

    def _entry(self, server: str, record: ProcessRecord, answered: dict[str, float], ready: bool) -> dict[str, Any]:
        return {
            "process": record.to_dict(),
            "pid": record.pid,
            "log": record.log,
            "logs_dir": str(self.state_dir / server),
            "ports": self.ports.for_server(server),
            "urls": urls(server, self.ports, self.host),
            "ready": ready,
            "cold_start_s": round(max(answered.values()), 3) if answered else None,
            "models_cold_start_s": {m: round(s, 3) for m, s in answered.items()},
        }

    def _wait_ready(self, pending: list[_Pending], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [p for p in pending if len(p.answered) < len(p.models)]
            if not waiting:
                return
            for p in waiting:
                if not is_alive(p.record.pid, p.record.start_ticks):
                    raise ServerError(f"{p.server} exited during startup; log {p.record.log}:\n{log_tail(p.record.log)}")
                for model in p.models:
                    if model in p.answered:
                        continue
                    try:
                        probe(p.server, local_server(p.server).probe_port(self.ports), model, timeout_s=5.0, host=self.host)
                    except NotReady as exc:
                        p.last_error = str(exc)
                        break  # models load together: try the others on the next round
                    p.answered[model] = time.time() - p.record.started_at
            if time.monotonic() >= deadline:
                slow = ", ".join(
                    f"{p.server} (models {[m for m in p.models if m not in p.answered]}; "
                    f"last error: {p.last_error}; log {p.record.log})"
                    for p in waiting
                )
                raise ServerError(f"not ready within {timeout_s:.0f}s: {slow}")
            time.sleep(0.2)

    # ---- down / status ----------------------------------------------------------------
    def _stop_one(self, server: str, record: ProcessRecord) -> list[int]:
        return local_server(server).stop(record, self.state_dir)

    def down(self) -> dict[str, Any]:
        """Stop every server recorded in state.json (in parallel); returns what was stopped."""
        state = self.read_state()
        records = {server: ProcessRecord.from_dict(entry["process"]) for server, entry in state.get("servers", {}).items()}
        was_running = {server: is_alive(r.pid, r.start_ticks) for server, r in records.items()}
        with ThreadPoolExecutor(max_workers=max(1, len(records))) as pool:
            futures = {server: pool.submit(self._stop_one, server, r) for server, r in records.items()}
            killed = {server: f.result() for server, f in futures.items()}
        result = {
            server: {"pid": r.pid, "was_running": was_running[server], "killed_leftovers": killed[server]}
            for server, r in records.items()
        }
        ports = ServerPorts.from_dict(state["ports"]) if state.get("ports") else self.ports
        if state:
            self._write_state({**state, "servers": {}})
        # only the stopped servers' ports: another server's default (BentoML's 3000 is Grafana's too) is none of ours;
        # a process whose leader has exited can hold its sockets a moment longer while its other threads end
        ours = [p for server in records for p in ports.for_server(server).values()]
        deadline = time.monotonic() + PORTS_CLOSE_S
        while (still_open := [p for p in ours if is_port_open(p)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if records and still_open:
            raise ServerError(f"servers stopped but ports {still_open} still accept connections")
        return {"state_dir": str(self.state_dir), "stopped": result}

    def status(self) -> dict[str, Any]:
        """Per recorded server: running, pid, ports, urls, log and cold start."""
        state = self.read_state()
        servers: dict[str, Any] = {}
        for server, entry in state.get("servers", {}).items():
            record = ProcessRecord.from_dict(entry["process"])
            running = is_alive(record.pid, record.start_ticks)
            ports_open = {name: is_port_open(port) for name, port in entry["ports"].items()}
            servers[server] = {
                "running": running,
                "ports_open": ports_open,
                **{
                    k: entry[k]
                    for k in ("pid", "log", "logs_dir", "ports", "urls", "cold_start_s", "models_cold_start_s", "ready")
                },
            }
        return {
            "state_dir": str(self.state_dir),
            "ports": state.get("ports", self.ports.to_dict()),
            "models": state.get("models", list(self.models)),
            "servers": servers,
            "running": any(s["running"] for s in servers.values()),
        }
