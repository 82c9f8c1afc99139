"""Applying a candidate to a running server, and reading back what the server really runs.

Triton (explicit model-control mode, as the local server runs): the model's config is read from
`GET v2/models/<m>/config`, changed (dynamic batching, queue delay, preferred batch sizes,
max_batch_size, instance count) and loaded again
with `POST v2/repository/models/<m>/load` and the config as an override: no restart. TorchServe:
the model is unregistered and registered again from its archive with `batch_size`,
`max_batch_delay` and `initial_workers` (management API; the local server enables it on loopback).
Both read the applied settings back from the server (Triton's model config; TorchServe's describe-
model) and refuse to go on when they differ from what was asked. `restore()` puts the original back.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from inferload.errors import InferloadError
from inferload.tune.candidates import Candidate, TorchServeCandidate, TritonCandidate

LOAD_TIMEOUT_S = 300.0


class ConfigError(InferloadError):
    """The server refused a candidate, or runs something else than was asked."""


def _call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 30.0) -> Any:
    # a Content-Type on a call without a body makes TorchServe read its (empty) body as the registration
    content = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers={**content, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace")[:300]
        raise ConfigError(f"{method} {url}: HTTP {error.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ConfigError(f"{method} {url}: {getattr(error, 'reason', error)}") from None
    return json.loads(text) if text.strip() else {}


@dataclass
class TritonConfigurator:
    """Model config changes on a Triton's HTTP API (`url`: http://host:8000)."""

    url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    original: dict[str, Any] | None = None

    def read(self) -> dict[str, Any]:
        config = _call("GET", f"{self.url}/v2/models/{self.model}/config", headers=self.headers)
        if not isinstance(config, dict):
            raise ConfigError(f"{self.url}: the config of model {self.model!r} is not a JSON object")
        return config

    def _load(self, config: dict[str, Any]) -> None:
        body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
        _call("POST", f"{self.url}/v2/repository/models/{self.model}/load", body, self.headers, timeout=LOAD_TIMEOUT_S)

    def apply(self, candidate: Candidate) -> dict[str, Any]:
        if not isinstance(candidate, TritonCandidate):
            raise TypeError("a Triton candidate is needed")
        if self.original is None:
            self.original = self.read()
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
                raise ConfigError(f"Triton runs {key}={applied[key]!r} for {self.model!r}; {asked[key]!r} was loaded")
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

    def restore(self) -> None:
        if self.original is not None:
            self._load(self.original)


@dataclass
class TorchServeConfigurator:
    """Registration changes on a TorchServe's management API (`url`: http://host:8081)."""

    url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    original: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        described = _call("GET", f"{self.url}/models/{urllib.parse.quote(self.model)}", headers=self.headers)
        if not isinstance(described, list) or not described or not isinstance(described[0], dict):
            raise ConfigError(f"{self.url}: describe-model of {self.model!r} answered no model")
        return described[0]

    def _register(self, candidate: TorchServeCandidate) -> None:
        """Unregister the model and register it again from its archive with `candidate`'s settings."""
        if self.original is None:
            self.original = self.describe()
        current = self.describe()
        _call(
            "DELETE",
            f"{self.url}/models/{urllib.parse.quote(self.model)}/{urllib.parse.quote(current['modelVersion'])}",
            headers=self.headers,
        )
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
        _call("POST", f"{self.url}/models?{query}", headers=self.headers, timeout=LOAD_TIMEOUT_S)

    def apply(self, candidate: Candidate) -> dict[str, Any]:
        if not isinstance(candidate, TorchServeCandidate):
            raise TypeError("a TorchServe candidate is needed")
        self._register(candidate)
        applied = self.applied()
        for key, asked in candidate.settings().items():
            if applied[key] != asked:
                raise ConfigError(f"TorchServe runs {key}={applied[key]!r} for {self.model!r}; {asked!r} was registered")
        return applied

    def applied(self) -> dict[str, Any]:
        described = self.describe()
        ready = [w for w in described.get("workers", []) if w.get("status") == "READY"]
        return {
            "batch_size": int(described.get("batchSize", 1)),
            "max_batch_delay_ms": int(described.get("maxBatchDelay", 0)),
            "workers": len(ready),
        }

    def restore(self) -> None:
        original = self.original
        if original is not None:
            self._register(
                TorchServeCandidate(
                    int(original.get("batchSize", 1)), int(original.get("maxBatchDelay", 0)), int(original.get("minWorkers", 1))
                )
            )
