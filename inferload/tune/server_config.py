"""Applying a candidate to a running server, and reading back what the server really runs.

Triton (explicit model-control mode, as the local server runs): the model's config is read from
`GET v2/models/<m>/config`, changed (dynamic batching, queue delay, preferred batch sizes,
max_batch_size, instance count) and loaded again
with `POST v2/repository/models/<m>/load` and the config as an override: no restart. TorchServe:
the model is unregistered and registered again from its archive with `batch_size`,
`max_batch_delay` and `initial_workers` (management API; the local server enables it on loopback).
Both read the applied settings back from the server (Triton's model config; TorchServe's describe-
model) and refuse to go on when they differ from what was asked. Before the first change, the
original settings are written to the journal of server changes (`inferload.run.server_changes`);
`restore()` puts them back as found (Triton: unload and load from config.pbtxt; TorchServe: register
as described), only when something was changed, and then forgets the entry, so a tune killed in
between leaves what `inferload restore` needs.

A server that will refuse every candidate is a `ChangesRefused`, said once with what to do: a
TorchServe whose management API has model control off (TorchServe 0.12's default,
``enable_model_api=false``: HTTP 405) or wants its management key (HTTP 400 InvalidKeyException),
a Triton ensemble (its steps batch and run; Triton refuses an ``instance_group`` on it).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inferload.errors import InferloadError, ServerChangeError
from inferload.run.server_changes import (
    ChangeKind,
    JournalEntry,
    ServerJournal,
    restore_torchserve_registration,
    restore_triton_config,
)


# The settings `inferload tune` tries on each server, in the seeds' order.
#
# A candidate is one server configuration: for Triton, dynamic batching on or off, its queue delay,
# its preferred batch sizes, the model's max_batch_size (None keeps the model's own) and its
# instance count; for TorchServe, the batch size, the batch delay and the worker
# count. The loop (`inferload.tune.tune`) tries them in stages: the baseline (no batching, one
# instance/worker), then batching with each delay (the conservative one first), then more
# instances/workers on the best so far; a stage that does not beat the best by the plateau margin ends
# that line of the search.
@dataclass(frozen=True)
class TritonCandidate:
    batching: bool
    max_queue_delay_us: int = 0
    instances: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    #: the model's max_batch_size while batching (None: the model's own)
    max_batch_size: int | None = None

    @property
    def name(self) -> str:
        batching = f"batching {self.max_queue_delay_us} us" if self.batching else "no batching"
        if self.batching and self.max_batch_size is not None:
            batching += f", max batch {self.max_batch_size}"
        if self.batching and self.preferred_batch_sizes:
            batching += f", preferred {'/'.join(str(n) for n in self.preferred_batch_sizes)}"
        return f"{batching}, {self.instances} instance{'s' if self.instances > 1 else ''}"

    def settings(self) -> dict[str, object]:
        return {
            "dynamic_batching": self.batching,
            "max_queue_delay_microseconds": self.max_queue_delay_us if self.batching else None,
            "preferred_batch_size": list(self.preferred_batch_sizes)
            if self.batching and self.preferred_batch_sizes
            else None,  # none asked: the server picks
            "instance_count": self.instances,
            "max_batch_size": self.max_batch_size if self.batching else None,
        }


@dataclass(frozen=True)
class TorchServeCandidate:
    batch_size: int = 1
    max_batch_delay_ms: int = 0
    workers: int = 1

    @property
    def name(self) -> str:
        batching = f"batch {self.batch_size}, delay {self.max_batch_delay_ms} ms" if self.batch_size > 1 else "no batching"
        return f"{batching}, {self.workers} worker{'s' if self.workers > 1 else ''}"

    def settings(self) -> dict[str, object]:
        return {"batch_size": self.batch_size, "max_batch_delay_ms": self.max_batch_delay_ms, "workers": self.workers}


Candidate = TritonCandidate | TorchServeCandidate


@dataclass(frozen=True)
class SearchSpace:
    """What to try (the first delay is the conservative one); each list is tried in its order."""

    triton_delays_us: tuple[int, ...] = (100, 1000)
    triton_instances: tuple[int, ...] = (2,)
    triton_preferred: tuple[int, ...] = ()
    #: max_batch_size values to try with batching (empty: the model's own)
    triton_max_batch_sizes: tuple[int, ...] = ()
    torchserve_batch_sizes: tuple[int, ...] = (8,)
    torchserve_delays_ms: tuple[int, ...] = (5, 20)
    torchserve_workers: tuple[int, ...] = (2,)
    extra: dict[str, object] = field(default_factory=dict)

    def baseline(self, server: str) -> Candidate:
        return TritonCandidate(batching=False) if server == "triton" else TorchServeCandidate()

    def batching(self, server: str, best: Candidate) -> list[Candidate]:
        """Stage 2: batching on, each max batch size and delay (instances/workers as in `best`)."""
        if isinstance(best, TritonCandidate):
            sizes: tuple[int | None, ...] = self.triton_max_batch_sizes or (None,)
            return [
                TritonCandidate(True, d, best.instances, self.triton_preferred, size)
                for size in sizes
                for d in self.triton_delays_us
            ]
        return [
            TorchServeCandidate(size, delay, best.workers)
            for size in self.torchserve_batch_sizes
            for delay in self.torchserve_delays_ms
        ]

    def scale_out(self, best: Candidate) -> list[Candidate]:
        """Stage 3: more instances/workers on the best so far."""
        if isinstance(best, TritonCandidate):
            return [
                TritonCandidate(best.batching, best.max_queue_delay_us, n, best.preferred_batch_sizes, best.max_batch_size)
                for n in self.triton_instances
            ]
        return [TorchServeCandidate(best.batch_size, best.max_batch_delay_ms, n) for n in self.torchserve_workers]


LOAD_TIMEOUT_S = 300.0
#: how long a TorchServe registration's workers may take to be READY after it answered, and how often to look
WORKERS_READY_S, WORKERS_POLL_S = 60.0, 0.5


class ConfigError(InferloadError):
    """The server refused a candidate, or runs something else than was asked."""


class ChangesRefused(ConfigError):
    """The server will refuse every candidate (its settings, not the candidate's): the search of that
    server ends at once, with what to do."""


class HttpRefusal(ConfigError):
    """A call the server answered with an HTTP error: its status, and its error type and message when
    it answered JSON (TorchServe's ``{"code", "type", "message"}``, Triton's ``{"error"}``)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        self.status = status
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            answer = None
        fields = answer if isinstance(answer, dict) else {}
        self.kind = str(fields.get("type") or "")
        self.message = str(fields.get("message") or fields.get("error") or body.strip()[:300])
        self.call = f"{method} {urllib.parse.urlsplit(url).path}"
        super().__init__(f"{method} {url}: HTTP {status}{' ' + self.kind if self.kind else ''}: {self.message}")


def _call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 30.0) -> Any:
    # a Content-Type on a call without a body makes TorchServe read its (empty) body as the registration
    content = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers={**content, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        raise HttpRefusal(method, url, error.code, error.read().decode("utf-8", "replace")) from None
    except (urllib.error.URLError, OSError) as error:
        raise ConfigError(f"{method} {url}: {getattr(error, 'reason', error)}") from None
    return json.loads(text) if text.strip() else {}


def _torchserve_refusal(error: HttpRefusal, url: str, model: str) -> ConfigError:
    """What a TorchServe management API's refusal means, and what to do; other errors as they are."""
    answered = f"{error.call} answered HTTP {error.status}{' ' + error.kind if error.kind else ''}: {error.message}"
    if error.status == 405 or error.kind == "MethodNotAllowedException":
        return ChangesRefused(
            f"TorchServe at {url} refuses to change model {model!r} ({answered}): its management API has model"
            " control off, TorchServe 0.12's default (enable_model_api=false). Start it with enable_model_api=true in"
            " config.properties (or torchserve --enable-model-api) to let inferload tune re-register the model; nothing"
            " was changed"
        )
    if error.kind == "InvalidKeyException" or error.status == 401:
        return ChangesRefused(
            f"TorchServe at {url} wants its management key ({answered}): set the target's token_file to the"
            " key_file.json TorchServe wrote in its working folder (tune sends its management key), or start TorchServe"
            " with disable_token_authorization=true; nothing was changed"
        )
    return error


def write_down(
    journal: ServerJournal, kind: ChangeKind, url: str, model: str, original: dict[str, Any], access: dict[str, Any]
) -> JournalEntry:
    """The original written to the journal before the first change. When it cannot be (another
    inferload changes the same model, a killed one left it changed, the folder is not writable) no
    candidate can be applied, and the server is not the one refusing: ChangesRefused with the journal's words."""
    try:
        return journal.record(kind, url, model, original, access)
    except ServerChangeError as error:
        raise ChangesRefused(f"{error}; nothing was changed") from None


def _triton_ensemble_refusal(config: dict[str, Any], model: str) -> ChangesRefused | None:
    """A Triton ensemble: what can be tuned instead (its steps); None for any other model."""
    scheduling = config.get("ensemble_scheduling")
    if config.get("platform") != "ensemble" and not scheduling:
        return None
    steps = [str(step.get("model_name")) for step in (scheduling or {}).get("step", []) if isinstance(step, dict)]
    named = f": {', '.join(dict.fromkeys(steps))}" if steps else ""
    return ChangesRefused(
        f"model {model!r} is an ensemble (platform: ensemble): Triton batches and runs its steps, each with its own"
        " dynamic_batching and instance_group, so it has none of its own to tune (Triton refuses an instance_group on"
        f" an ensemble). Tune its steps instead{named}: each as the target of a scenario of its own (--triton-url"
        " the same); nothing was changed"
    )


@dataclass
class TritonConfigurator:
    """Model config changes on a Triton's HTTP API (`url`: http://host:8000)."""

    url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    original: dict[str, Any] | None = None
    #: where the original is written before the first change (None: nowhere, for tests of the loop only)
    journal: ServerJournal | None = None
    #: how `inferload restore` reaches the server again (no secrets: see `server_changes.access_headers`)
    access: dict[str, Any] = field(default_factory=dict)
    entry: JournalEntry | None = None
    #: a candidate's config was loaded (restore() then puts the original back)
    changed: bool = False

    def current(self) -> dict[str, Any]:
        """The model's config as the server runs it now."""
        return self.read()

    def fragment_options(self) -> dict[str, Any]:
        """What the config fragment needs beyond the settings (nothing for Triton)."""
        return {}

    def read(self) -> dict[str, Any]:
        config = _call("GET", f"{self.url}/v2/models/{self.model}/config", headers=self.headers)
        if not isinstance(config, dict):
            raise ConfigError(f"{self.url}: the config of model {self.model!r} is not a JSON object")
        return config

    def _load(self, config: dict[str, Any]) -> None:
        body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
        self.changed = True
        _call("POST", f"{self.url}/v2/repository/models/{self.model}/load", body, self.headers, timeout=LOAD_TIMEOUT_S)

    def apply(self, candidate: Candidate) -> dict[str, Any]:
        if not isinstance(candidate, TritonCandidate):
            raise TypeError("a Triton candidate is needed")
        if self.original is None:
            self.original = self.read()
        ensemble = _triton_ensemble_refusal(self.original, self.model)
        if ensemble is not None:
            raise ensemble
        if self.journal is not None and self.entry is None:  # written down before anything changes
            self.entry = write_down(self.journal, "triton-model-config", self.url, self.model, self.original, self.access)
        config = copy.deepcopy(self.original)
        if candidate.batching:
            if int(config.get("max_batch_size", 0)) <= 0:
                raise ConfigError(f"model {self.model!r} has max_batch_size 0: Triton cannot batch it")
            if candidate.max_batch_size is not None:
                config["max_batch_size"] = candidate.max_batch_size
            largest = int(config["max_batch_size"])
            too_big = [n for n in candidate.preferred_batch_sizes if n > largest]
            if too_big:
                raise ConfigError(
                    f"--triton-preferred-batch-sizes: {too_big[0]} is above the max_batch_size {largest} of model {self.model!r}"
                )
            batching: dict[str, Any] = {"max_queue_delay_microseconds": candidate.max_queue_delay_us}
            if candidate.preferred_batch_sizes:
                batching["preferred_batch_size"] = list(candidate.preferred_batch_sizes)
            config["dynamic_batching"] = batching
        else:
            config.pop("dynamic_batching", None)
        kind = (config.get("instance_group") or [{}])[0].get("kind", "KIND_CPU")
        config["instance_group"] = [{"kind": kind, "count": candidate.instances}]
        self._load(config)
        applied = self.applied()
        asked = candidate.settings()
        checked = ("dynamic_batching", "instance_count", "max_queue_delay_microseconds", "max_batch_size", "preferred_batch_size")
        for key in checked:
            if asked[key] is not None and applied[key] != asked[key]:
                why = (
                    " (the model sets it itself: a Python model's auto_complete_config, unless Triton runs with"
                    " --disable-auto-complete-config)"
                    if key == "dynamic_batching" and applied[key]
                    else ""
                )
                raise ConfigError(
                    f"Triton loaded {key}={asked[key]!r} for {self.model!r} but its config then says {key}={applied[key]!r}{why}"
                )
        return applied

    def applied(self) -> dict[str, Any]:
        """What the server runs now, from its model config."""
        config = self.read()
        batching = config.get("dynamic_batching")
        return {
            "dynamic_batching": batching is not None,
            "max_queue_delay_microseconds": int(batching.get("max_queue_delay_microseconds", 0)) if batching else None,
            "preferred_batch_size": [int(n) for n in batching.get("preferred_batch_size", [])] if batching else None,
            "instance_count": sum(int(group.get("count", 1)) for group in config.get("instance_group", [])),
            "max_batch_size": int(config.get("max_batch_size", 0)),
        }

    def restore(self) -> str | None:
        """Put the model's config back as found; what was done (None: nothing was changed)."""
        return _put_back(self, restore_triton_config)


@dataclass
class TorchServeConfigurator:
    """Registration changes on a TorchServe's management API (`url`: http://host:8081)."""

    url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    original: dict[str, Any] | None = None
    journal: ServerJournal | None = None
    access: dict[str, Any] = field(default_factory=dict)
    entry: JournalEntry | None = None
    #: the model was unregistered for a candidate (restore() then registers the original again)
    changed: bool = False

    def current(self) -> dict[str, Any]:
        """The model's registration as the server describes it now."""
        return self.describe()

    def fragment_options(self) -> dict[str, Any]:
        """The registration call's address and key, and the model's own response timeout."""
        timeout = (self.original or {}).get("responseTimeout")
        return {
            "management_url": self.url,
            "response_timeout_s": int(timeout) if timeout is not None else None,
            "management_key": "Authorization" in self.headers,
        }

    def _call(self, method: str, url: str, timeout: float = 30.0) -> Any:
        try:
            return _call(method, url, headers=self.headers, timeout=timeout)
        except HttpRefusal as error:
            raise _torchserve_refusal(error, self.url, self.model) from None

    def describe(self) -> dict[str, Any]:
        described = self._call("GET", f"{self.url}/models/{urllib.parse.quote(self.model)}")
        if not isinstance(described, list) or not described or not isinstance(described[0], dict):
            raise ConfigError(f"{self.url}: describe-model of {self.model!r} answered no model")
        return described[0]

    def _register(self, candidate: TorchServeCandidate) -> None:
        """Unregister the model and register it again from its archive with `candidate`'s settings."""
        if self.original is None:
            self.original = self.describe()
        if self.journal is not None and self.entry is None:  # written down before anything changes
            self.entry = write_down(self.journal, "torchserve-registration", self.url, self.model, self.original, self.access)
        current = self.describe()
        self._call("DELETE", f"{self.url}/models/{urllib.parse.quote(self.model)}/{urllib.parse.quote(current['modelVersion'])}")
        self.changed = True
        query = urllib.parse.urlencode(
            {
                "url": self.original["modelUrl"],
                "model_name": self.model,
                "batch_size": candidate.batch_size,
                "max_batch_delay": candidate.max_batch_delay_ms,
                "initial_workers": candidate.workers,
                "response_timeout": int(self.original.get("responseTimeout", 120)),
                "synchronous": "true",
            }
        )
        self._call("POST", f"{self.url}/models?{query}", timeout=LOAD_TIMEOUT_S)

    def apply(
        self, candidate: Candidate, clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep
    ) -> dict[str, Any]:
        """Register the model with ``candidate``'s settings and read them back. A synchronous
        registration can answer before its workers are READY (seen under load: workers=0 just
        after): the read-back waits up to WORKERS_READY_S for the asked number."""
        if not isinstance(candidate, TorchServeCandidate):
            raise TypeError("a TorchServe candidate is needed")
        self._register(candidate)
        wanted = candidate.settings()
        deadline = clock() + WORKERS_READY_S
        applied = self.applied()
        while applied["workers"] != wanted["workers"] and clock() < deadline:
            pause(WORKERS_POLL_S)
            applied = self.applied()
        for key, asked in wanted.items():
            if applied[key] != asked:
                raise ConfigError(
                    f"TorchServe registered {self.model!r} with {key}={asked!r} but describe-model then says {key}={applied[key]!r}"
                )
        return applied

    def applied(self) -> dict[str, Any]:
        described = self.describe()
        ready = [w for w in described.get("workers", []) if w.get("status") == "READY"]
        return {
            "batch_size": int(described.get("batchSize", 1)),
            "max_batch_delay_ms": int(described.get("maxBatchDelay", 0)),
            "workers": len(ready),
        }

    def restore(self) -> str | None:
        """Register the model again as found; what was done (None: nothing was changed)."""
        return _put_back(self, restore_torchserve_registration)


def _put_back(
    configurator: TritonConfigurator | TorchServeConfigurator,
    restore: Callable[[str, str, dict[str, Any], dict[str, str]], str],
) -> str | None:
    """A configurator's settings put back as found when it changed them (what was done; None:
    nothing was changed), and its journal entry forgotten either way."""
    done = None
    if configurator.original is not None and configurator.changed:
        done = restore(configurator.url, configurator.model, configurator.original, configurator.headers)
        configurator.changed = False
    if configurator.journal is not None and configurator.entry is not None:
        configurator.journal.forget(configurator.entry)
    configurator.entry = None
    return done
