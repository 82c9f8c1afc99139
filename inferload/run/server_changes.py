"""The journal of server changes: what inferload changed on a server, written down before it changes it.

inferload changes the servers it measures in three ways: `inferload tune` loads each candidate's
model config into Triton (a config override) and registers the model again on TorchServe with each
candidate's batch settings, and a run with ``trace`` turns Triton's tracing on for its models. Each
such change is first written to the journal with what to put back (``original``), and the entry is
removed only once that is back. A process that dies without putting it back (SIGKILL, the machine's
power, a bug) leaves its entry: `inferload restore` puts back what it says, and so does the next
`inferload tune` or `inferload run` against that server (`restore_leftovers`); each says what it
restored.

The journal is one folder: ``$INFERLOAD_JOURNAL_DIR``, else ``$XDG_STATE_HOME/inferload/server-changes``,
else ``~/.local/state/inferload/server-changes``. Each changed thing (a model's config on one Triton,
a model's registration on one TorchServe, a model's trace settings on one Triton) is one JSON file
named by a hash of what it is, written to a temporary file, flushed to disk and renamed: a reader
never sees half an entry. An entry names its owner (pid, the process's start time, the host); an
owner that still runs is never restored under it (another tune on the same server is refused), and
entries from another host are left to that host. No secret is written: Triton's headers are kept
by the names of their environment variables only, TorchServe's key by the path of its key file.

How each kind is put back, and what "as found" means:

- ``triton-model-config``: the model is unloaded and loaded again without a config, so Triton reads
  its ``config.pbtxt`` again (a plain load keeps the last override); if the model's config is then
  not the one found (it was running an override of its own before), the original is loaded as the
  override. Checked: the config Triton serves equals the original (`GET v2/models/<m>/config`).
- ``torchserve-registration``: the model is unregistered (when there) and registered again from its
  archive with the original batch size, delay, workers and timeouts. Checked: describe-model's
  `REGISTRATION_KEYS` equal the original's (``loadedAtStartup`` and the workers' ids and pids
  necessarily change).
- ``triton-trace-settings``: the original trace settings are posted back. Checked: they read back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

import psutil
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from inferload.errors import ServerChangeError
from inferload.paths import write_atomically
from inferload.scenario.headers import HeadersError, read_management_key
from inferload.scenario.input_files import read_limited
from inferload.scenario.messages import custom_error, describe_value

logger = logging.getLogger(__name__)

JOURNAL_ENV = "INFERLOAD_JOURNAL_DIR"
ChangeKind = Literal["triton-model-config", "torchserve-registration", "triton-trace-settings"]
#: describe-model's keys a TorchServe registration is compared on ("as found")
REGISTRATION_KEYS = (
    "modelVersion",
    "modelUrl",
    "minWorkers",
    "maxWorkers",
    "batchSize",
    "maxBatchDelay",
    "responseTimeout",
    "startupTimeout",
)
#: the longest a model load or registration may take (a big model on a busy machine)
LOAD_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 30.0
#: how long a journal file may be (an entry is a few kilobytes; a model config rarely 100 KB)
MAX_ENTRY_BYTES = 4 * 1024 * 1024
#: describe-model's keys a TorchServe registration is put back with: a whole number when present
#: (restoring converts them with int()); the second ones may also be null (then left to TorchServe)
WHOLE_NUMBER_KEYS = ("batchSize", "maxBatchDelay", "minWorkers", "responseTimeout")
NULLABLE_NUMBER_KEYS = ("maxWorkers", "startupTimeout")
#: what an entry's required keys hold, for the line that says one is missing
EXPECTED_KEYS = {
    "kind": f"one of {', '.join(repr(kind) for kind in get_args(ChangeKind))}",
    "server": "the server's address (an http:// or https:// URL of its API)",
    "model": "the model's name",
    "original": "an object: the settings found before the change, to put back",
    "owner": "an object naming the process that made the change (pid, started, host, command)",
    "changed_at": "when the change was made (ISO 8601)",
}


def journal_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The journal's folder (see the module's docstring); absolute, not made here."""
    env = os.environ if environ is None else environ
    if env.get(JOURNAL_ENV):
        return Path(env[JOURNAL_ENV]).expanduser().absolute()
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state).expanduser().absolute() / "inferload" / "server-changes"


class Owner(BaseModel):
    """The process that made a change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int
    #: the process's start time (psutil), so a reused pid is not taken for the owner
    started: float
    host: str
    command: str

    @classmethod
    def this_process(cls) -> Owner:
        return cls(
            pid=os.getpid(),
            started=psutil.Process().create_time(),
            host=socket.gethostname(),
            command=" ".join(["inferload", *sys.argv[1:]])[:300],
        )

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def state(self) -> Literal["running", "gone", "elsewhere"]:
        """Whether the owner still runs here ("elsewhere": another host, which cannot be told from here)."""
        if self.host != socket.gethostname():
            return "elsewhere"
        try:
            process = psutil.Process(self.pid)
            same = abs(process.create_time() - self.started) < 1.0
            dead = process.status() == psutil.STATUS_ZOMBIE  # killed, not yet reaped (a container's PID 1 may never)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return "gone"
        return "running" if same and not dead else "gone"


class JournalEntry(BaseModel):
    """One change: what was changed, what to put back, how to reach it again, and who changed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    kind: ChangeKind
    #: Triton's HTTP API URL (model config), TorchServe's management URL, or the traced Triton's address
    server: str
    model: str
    original: dict[str, Any]
    #: how to reach the server again without secrets: "protocol", "tls" (paths), "token_file",
    #: "headers_from_env" (header name -> environment variable)
    access: dict[str, Any] = {}
    owner: Owner
    changed_at: str

    @field_validator("server")
    @classmethod
    def _server(cls, value: str, info: ValidationInfo) -> str:
        """An http:// or https:// URL with a host (a trace entry's may also be a plain ``host:port``):
        a journal file naming another scheme (``file://``) never reaches a URL opener."""
        if info.data.get("kind") == "triton-trace-settings" and "://" not in value:
            return value
        problem = http_url_problem(value)
        if problem:
            raise custom_error(problem)
        return value

    @field_validator("original", mode="before")
    @classmethod
    def _original(cls, value: object, info: ValidationInfo) -> object:
        """An object; a TorchServe registration's keys that are put back with the types restoring needs."""
        if not isinstance(value, dict):
            raise custom_error(f"expected {EXPECTED_KEYS['original']}; got {describe_value(value)}")
        if info.data.get("kind") != "torchserve-registration":
            return value
        model_url = value.get("modelUrl")
        if "modelUrl" in value and (not isinstance(model_url, str) or not model_url.strip()):
            raise custom_error(f"modelUrl: expected the archive the model was registered from; got {describe_value(model_url)}")
        for key in (*WHOLE_NUMBER_KEYS, *NULLABLE_NUMBER_KEYS):
            if key not in value or (value[key] is None and key in NULLABLE_NUMBER_KEYS):
                continue
            number = value[key]
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                allowed = " or null" if key in NULLABLE_NUMBER_KEYS else ""
                raise custom_error(f"{key}: expected a whole number >= 0{allowed}; got {describe_value(number)}")
        return value

    @field_validator("access")
    @classmethod
    def _access(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The keys restoring reads, each of the type it needs (other keys are kept and not read)."""
        token_file = value.get("token_file")
        if token_file is not None and (not isinstance(token_file, str) or not token_file.strip()):
            raise custom_error(f"token_file: expected the path of TorchServe's key file; got {describe_value(token_file)}")
        from_env = value.get("headers_from_env")
        if from_env is not None and (
            not isinstance(from_env, dict)
            or not all(isinstance(name, str) and isinstance(variable, str) for name, variable in from_env.items())
        ):
            raise custom_error(
                f"headers_from_env: expected an object of header names to environment variables; got {describe_value(from_env)}"
            )
        if value.get("protocol") not in (None, "http", "grpc"):
            raise custom_error(f"protocol: expected 'http' or 'grpc'; got {describe_value(value['protocol'])}")
        if value.get("tls") is not None:
            from inferload.scenario.tls import TlsSettings

            try:
                TlsSettings.model_validate(value["tls"])
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in ("tls", *first["loc"]))
                raise custom_error(f"{where}: {first['msg']}") from None
        return value

    @property
    def key(self) -> str:
        return entry_key(self.kind, self.server, self.model)

    def describe(self) -> str:
        what = {
            "triton-model-config": "the model config on Triton",
            "torchserve-registration": "the registration on TorchServe",
            "triton-trace-settings": "the trace settings on Triton",
        }[self.kind]
        return f"model {self.model!r}: {what} at {self.server}"

    def left_by(self) -> str:
        return f"left by `{self.owner.command}` (pid {self.owner.pid} on {self.owner.host}, {self.changed_at})"


def http_url_problem(url: str) -> str | None:
    """Why `url` is no http:// or https:// URL with a host (a valid port when it has one), or None."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() not in ("http", "https"):
        scheme = f"the scheme {parsed.scheme!r}" if parsed.scheme else "no scheme"
        return f"expected an http:// or https:// URL; got {describe_value(url)} ({scheme})"
    try:
        _ = parsed.port  # a port out of range or not a number raises
    except (ValueError, RecursionError):
        return f"expected an http:// or https:// URL with a port in 1..65535; got {describe_value(url)}"
    if not parsed.hostname:
        return f"expected an http:// or https:// URL with a host; got {describe_value(url)}"
    return None


def entry_key(kind: str, server: str, model: str) -> str:
    return hashlib.sha256(f"{kind}\0{server.rstrip('/')}\0{model}".encode()).hexdigest()[:24]


def same_host(address_a: str, address_b: str) -> bool:
    """Whether two addresses (``host:port`` or URLs) name one host: how a run's targets find the
    leftovers of a tune that reached the same server through another port."""
    return _host(address_a) == _host(address_b)


def _host(address: str) -> str:
    parsed = urllib.parse.urlsplit(address if "://" in address else f"//{address}")
    host = (parsed.hostname or address).lower()
    return "127.0.0.1" if host in ("localhost", "::1", "0.0.0.0") else host


class ServerJournal:
    """The journal's folder: entries written before a change, removed once it is put back."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else journal_dir()

    def path_of(self, kind: str, server: str, model: str) -> Path:
        return self.folder / f"{kind}-{entry_key(kind, server, model)}.json"

    # -- writing --------------------------------------------------------------------------
    def record(
        self, kind: ChangeKind, server: str, model: str, original: dict[str, Any], access: dict[str, Any] | None = None
    ) -> JournalEntry:
        """Write down a change before it is made; the entry (this process's own, when it has one already).

        ServerChangeError when the journal cannot be written (then the change must not be made), when
        another running process changes the same thing, or when a dead process left it changed and it
        was not restored first."""
        path = self.path_of(kind, server, model)
        existing = self._read(path)
        if isinstance(existing, JournalEntry):
            if existing.owner.is_this_process():
                return existing
            if existing.owner.state() == "running":
                raise ServerChangeError(
                    f"{existing.describe()} is being changed by another inferload: `{existing.owner.command}` "
                    f"(pid {existing.owner.pid}); wait for it to end"
                )
            raise ServerChangeError(
                f"{existing.describe()} was {existing.left_by()} and is not restored yet: run `inferload restore`"
            )
        try:
            entry = JournalEntry(
                kind=kind,
                server=server.rstrip("/"),
                model=model,
                original=original,
                access=access or {},
                owner=Owner.this_process(),
                changed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
        except ValidationError as error:
            raise ServerChangeError(
                f"model {model!r} on {server}: the change cannot be written down ({validation_problem(error)}), so it is not made"
            ) from None
        try:
            write_atomically(path, entry.model_dump_json(indent=2) + "\n")
        except OSError as error:
            raise ServerChangeError(
                f"cannot write the journal of server changes in {self.folder} ({error.strerror or error}), so "
                f"{entry.describe()} is left as it is: make the folder writable or set {JOURNAL_ENV}"
            ) from None
        return entry

    def forget(self, entry: JournalEntry) -> None:
        """The change is put back: its entry goes."""
        with contextlib.suppress(FileNotFoundError):
            self.path_of(entry.kind, entry.server, entry.model).unlink()

    # -- reading --------------------------------------------------------------------------
    def entries(self) -> list[JournalEntry | str]:
        """Every entry, oldest first; a file that is not an entry as a line naming it and saying why
        (one that is no regular file, such as a FIFO or a device, is skipped without being read)."""
        if not self.folder.is_dir():
            return []
        found: list[tuple[int, JournalEntry | str]] = []
        for path in sorted(self.folder.glob("*.json")):
            read = self._read(path)
            if read is not None:
                with contextlib.suppress(OSError):
                    found.append((path.stat().st_mtime_ns, read))
        return [entry for _, entry in sorted(found, key=lambda item: item[0])]

    def _read(self, path: Path) -> JournalEntry | str | None:
        """The entry in `path`; None when nothing is there (an entry forgotten meanwhile); else a line
        naming the file and why it is no entry. Only a regular file of at most `MAX_ENTRY_BYTES` is
        read, opened without waiting: a FIFO, a device or a folder is never opened for reading."""
        if not os.path.lexists(path):
            return None
        try:
            raw = read_limited(path, MAX_ENTRY_BYTES)
        except ValueError as error:
            if not os.path.lexists(path):
                return None
            return f"{error}; skipped (not a journal entry)"
        try:
            return JournalEntry.model_validate_json(raw)
        except ValidationError as error:
            return f"{path}: not a journal entry ({validation_problem(error)})"

    def leftovers(self, match: Callable[[JournalEntry], bool] | None = None) -> list[JournalEntry]:
        """Entries of processes that are gone (on this host), optionally only those `match` accepts."""
        return [
            entry
            for entry in self.entries()
            if isinstance(entry, JournalEntry)
            and entry.owner.state() == "gone"
            and not entry.owner.is_this_process()
            and (match is None or match(entry))
        ]

    # -- putting back ---------------------------------------------------------------------
    def restore(self, entry: JournalEntry) -> str:
        """Put back what `entry` says and forget it; what was done. ServerChangeError (entry kept) when it cannot."""
        done = RESTORERS[entry.kind](entry)
        self.forget(entry)
        return done

    def restore_leftovers(self, match: Callable[[JournalEntry], bool] | None, say: Callable[[str], None]) -> int:
        """Put back every leftover `match` accepts, newest first (two changes of one thing are undone in the
        reverse order they were made), saying what for each; how many could not be put back."""
        failed = 0
        for entry in reversed(self.leftovers(match)):
            say(f"inferload: restoring {entry.describe()}, {entry.left_by()} ...")
            try:
                say(f"inferload: restored {entry.describe()}: {self.restore(entry)}")
            except ServerChangeError as error:
                failed += 1
                say(f"inferload: could not restore {entry.describe()}: {error} (the journal keeps it: {self.folder})")
        return failed


def validation_problem(error: ValidationError) -> str:
    """``key: what is wrong`` of a journal entry's first validation error (a missing key: what it holds)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the file"
    if first["type"] == "missing" and len(first["loc"]) == 1:
        return f"{where}: missing; expected {EXPECTED_KEYS.get(str(first['loc'][0]), 'a value')}"
    return f"{where}: {first['msg']}"


# -- the servers' APIs ---------------------------------------------------------------------------
def http_json(
    method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float = CALL_TIMEOUT_S
) -> tuple[int, Any]:
    """(status, JSON answer or text) of one call; ServerChangeError when `url` is no http:// or https://
    URL (nothing is opened then) or the server cannot be reached."""
    problem = http_url_problem(url)
    if problem:
        raise ServerChangeError(f"{method} {url}: refused: {problem}")
    # a Content-Type on a call without a body makes TorchServe read its (empty) body as the registration
    content = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers={**content, **dict(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as error:
        raise ServerChangeError(f"{method} {url}: {getattr(error, 'reason', error)}") from None
    try:
        return status, json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):
        return status, text[:300]


def _ok(method: str, url: str, status: int, answer: Any) -> Any:
    if status >= 300:
        raise ServerChangeError(f"{method} {url}: HTTP {status}: {str(answer)[:300]}")
    return answer


def access_headers(access: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers an entry's server needs, read again now: header names from environment variables, and
    TorchServe's management key from its key file (none when the file holds no management key).

    ServerChangeError naming the key file when it cannot be read: it is read only when it is a regular
    file of at most `MAX_SMALL_FILE_BYTES` (a FIFO or ``/dev/zero`` is refused, not read), and must be JSON."""
    env = os.environ if environ is None else environ
    headers = {name: env[variable] for name, variable in (access.get("headers_from_env") or {}).items() if env.get(variable)}
    token_file = access.get("token_file")
    if token_file:
        try:
            key = read_management_key(Path(str(token_file)))
        except HeadersError as error:
            raise ServerChangeError(str(error)) from None
        if key:
            headers["Authorization"] = f"Bearer {key}"
    return headers


def triton_config(url: str, model: str, headers: Mapping[str, str]) -> dict[str, Any] | None:
    """The model's config as Triton serves it, or None when the model is not loaded."""
    path = f"{url}/v2/models/{urllib.parse.quote(model, safe='')}/config"
    status, answer = http_json("GET", path, headers=headers)
    if status in (400, 404):
        return None
    config = _ok("GET", path, status, answer)
    if not isinstance(config, dict):
        raise ServerChangeError(f"GET {path}: not a JSON object")
    return config


def triton_load(url: str, model: str, headers: Mapping[str, str], config: dict[str, Any] | None = None) -> None:
    """Load the model (explicit model control): with `config` as the override, or from its config.pbtxt."""
    body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
    path = f"{url}/v2/repository/models/{urllib.parse.quote(model, safe='')}/load"
    _ok("POST", path, *http_json("POST", path, json.dumps(body).encode(), headers, timeout=LOAD_TIMEOUT_S))


def triton_unload(url: str, model: str, headers: Mapping[str, str]) -> None:
    path = f"{url}/v2/repository/models/{urllib.parse.quote(model, safe='')}/unload"
    _ok("POST", path, *http_json("POST", path, b"{}", headers))


def restore_triton_config(url: str, model: str, original: dict[str, Any], headers: Mapping[str, str]) -> str:
    """Put a Triton model's config back as found (see the module's docstring); what was done."""
    triton_unload(url, model, headers)
    triton_load(url, model, headers)  # waits for the unload, then reads config.pbtxt again
    if triton_config(url, model, headers) == original:
        return "unloaded and loaded again from its config.pbtxt (the config is as found)"
    triton_load(url, model, headers, original)  # it ran an override of its own before
    if triton_config(url, model, headers) != original:
        raise ServerChangeError(f"Triton at {url} serves another config for {model!r} than the one found, after loading it")
    return "loaded again with the config found (an override, as before)"


def torchserve_description(url: str, model: str, headers: Mapping[str, str]) -> dict[str, Any] | None:
    """describe-model's answer for the model's default version, or None when it is not registered."""
    path = f"{url}/models/{urllib.parse.quote(model, safe='')}"
    status, answer = http_json("GET", path, headers=headers)
    if status == 404:
        return None
    described = _ok("GET", path, status, answer)
    if not isinstance(described, list) or not described or not isinstance(described[0], dict):
        raise ServerChangeError(f"GET {path}: describe-model answered no model")
    return dict(described[0])


def torchserve_register(url: str, model: str, settings: Mapping[str, Any], headers: Mapping[str, str]) -> None:
    """Register the model from its archive with `settings` (batch_size, max_batch_delay, initial_workers,
    response_timeout, ...: the management API's own names), unregistering its current version first."""
    current = torchserve_description(url, model, headers)
    if current is not None:
        version = urllib.parse.quote(str(current.get("modelVersion", "")), safe="")
        path = f"{url}/models/{urllib.parse.quote(model, safe='')}/{version}"
        _ok("DELETE", path, *http_json("DELETE", path, headers=headers))
    query = urllib.parse.urlencode({"model_name": model, **settings, "synchronous": "true"})
    path = f"{url}/models?{query}"
    _ok("POST", path, *http_json("POST", path, headers=headers, timeout=LOAD_TIMEOUT_S))


def registration(described: Mapping[str, Any]) -> dict[str, Any]:
    """describe-model's `REGISTRATION_KEYS` (what "as found" compares)."""
    return {key: described.get(key) for key in REGISTRATION_KEYS}


def restore_torchserve_registration(url: str, model: str, original: dict[str, Any], headers: Mapping[str, str]) -> str:
    """Register a TorchServe model again as found (see the module's docstring); what was done."""
    current = torchserve_description(url, model, headers)
    if current is not None and registration(current) == registration(original):
        return "its registration was already as found"
    if not isinstance(original.get("modelUrl"), str) or not original["modelUrl"]:
        raise ServerChangeError(
            f"the registration found for {model!r} has no modelUrl (the archive to register it from): register it on"
            f" TorchServe at {url} by hand, then remove its journal entry"
        )
    settings: dict[str, Any] = {
        "url": original["modelUrl"],
        "batch_size": int(original.get("batchSize", 1)),
        "max_batch_delay": int(original.get("maxBatchDelay", 0)),
        "initial_workers": int(original.get("minWorkers", 1)),
        "response_timeout": int(original.get("responseTimeout", 120)),
    }
    if original.get("startupTimeout") is not None:
        settings["startup_timeout"] = int(original["startupTimeout"])
    torchserve_register(url, model, settings, headers)
    if original.get("maxWorkers") not in (None, original.get("minWorkers")):
        query = urllib.parse.urlencode(
            {"min_worker": original.get("minWorkers"), "max_worker": original["maxWorkers"], "synchronous": "true"}
        )
        path = f"{url}/models/{urllib.parse.quote(model, safe='')}?{query}"
        _ok("PUT", path, *http_json("PUT", path, headers=headers, timeout=LOAD_TIMEOUT_S))
    after = torchserve_description(url, model, headers)
    if after is None or registration(after) != registration(original):
        got = registration(after) if after else "not registered"
        raise ServerChangeError(f"TorchServe at {url} runs {got} for {model!r} after registering it as {registration(original)}")
    startup = (
        "; TorchServe now says loadedAtStartup: false (a model registered through its management API is not"
        " one it loads at its next start: that is its config.properties' load_models)"
        if original.get("loadedAtStartup") is True and after.get("loadedAtStartup") is not True
        else ""
    )
    return (
        f"registered again with batch size {settings['batch_size']}, delay {settings['max_batch_delay']} ms, "
        f"{settings['initial_workers']} worker(s){startup}"
    )


def restore_trace_settings(address: str, model: str, original: dict[str, Any], access: Mapping[str, Any]) -> str:
    """Post a Triton model's trace settings back; what was done."""
    from inferload.errors import ScrapeError
    from inferload.scenario.tls import TlsSettings
    from inferload.servermetrics.triton_trace import SETTING_KEYS, TraceSettingsClient

    tls = TlsSettings.model_validate(access["tls"]) if access.get("tls") else None
    client = TraceSettingsClient(address, access.get("protocol", "http"), 10.0, tls)
    try:
        client.update(model, original)
        now = client.get(model)
    except ScrapeError as error:
        raise ServerChangeError(str(error)) from None
    differs = [key for key in SETTING_KEYS if key in original and str(now.get(key)) != str(original[key])]
    if differs:
        raise ServerChangeError(f"Triton at {address} reads back other trace settings for {model!r}: {differs}")
    return "trace settings posted back: " + ", ".join(f"{key}={original[key]}" for key in SETTING_KEYS if key in original)


def _restore_triton(entry: JournalEntry) -> str:
    return restore_triton_config(entry.server, entry.model, entry.original, access_headers(entry.access))


def _restore_torchserve(entry: JournalEntry) -> str:
    return restore_torchserve_registration(entry.server, entry.model, entry.original, access_headers(entry.access))


def _restore_trace(entry: JournalEntry) -> str:
    return restore_trace_settings(entry.server, entry.model, entry.original, entry.access)


RESTORERS: dict[str, Callable[[JournalEntry], str]] = {
    "triton-model-config": _restore_triton,
    "torchserve-registration": _restore_torchserve,
    "triton-trace-settings": _restore_trace,
}
