"""The reference server (docs/reference-server.md): a real server of ours whose truth is known.

It serves one model over KServe v2 gRPC and HTTP (Triton's binary extension too), TorchServe-style
REST and KServe v1, holds each inference request for a scripted, seeded service time after it
waits for one of N service slots, and records what it really did, per request (CLOCK_MONOTONIC
nanoseconds, the clock of ``time.monotonic_ns()``). The server is Rust (``native/src/refserver``,
in the extension ``inferload._native``); this module is its Python side:

- ``ReferenceConfig``: the configuration (pydantic; the same keys as the JSON the server reads),
  ``load_reference_config(path)`` (YAML or JSON; ``ConfigFileError`` naming the file and key path);
- ``python -m inferload.local.reference_server [--config FILE]``: the server in a process of its
  own (the bench and tests measure the client's CPU, so the server never runs inside the
  client's process there); it prints one JSON line with its ports when ready and serves until
  SIGTERM or SIGINT. Exit 2: a bad configuration; 1: it could not start;
- ``ReferenceServerProcess``: that process started as a child on free loopback ports, waited for,
  its records fetched as numpy arrays (``ReferenceRecords``), reset, stopped (nothing left behind);
- ``parse_records(body)``: the packed records of ``GET /reference/records`` (pure).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferload.errors import ConfigFileError, Problem, ServerError
from inferload.launch import die_with_parent
from inferload.scenario.fields import DType
from inferload.scenario.messages import describe_value, format_key_path

if TYPE_CHECKING:  # the server's own process imports neither (numpy and requests are the client side's)
    import numpy as np
    import requests

#: the longest hold a law may script, in milliseconds (one hour; the server's bound)
MAX_HOLD_MS = 3_600_000.0
#: the largest configuration file read
MAX_CONFIG_BYTES = 1 << 20
LOOPBACK = "127.0.0.1"
GRPC_CODES = Literal[
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
]
HoldMs = Annotated[float, Field(ge=0, le=MAX_HOLD_MS)]
Probability = Annotated[float, Field(ge=0, le=1)]


class _Keys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReferenceTensor(_Keys):
    """One tensor of the model: its per-item ``dims`` (outputs: each >= 1; inputs: -1 = variable)."""

    name: str = Field(min_length=1, max_length=256)
    datatype: DType = "FP32"
    dims: tuple[int, ...] = (16,)


class NoDelay(_Keys):
    """Answer at once."""

    law: Literal["none"] = "none"


class FixedDelay(_Keys):
    """Every request is held ``ms``."""

    law: Literal["fixed"] = "fixed"
    ms: HoldMs


class LognormalDelay(_Keys):
    """``exp(ln(median_ms) + sigma·Z)``, Z standard normal."""

    law: Literal["lognormal"] = "lognormal"
    median_ms: Annotated[float, Field(gt=0, le=MAX_HOLD_MS)]
    sigma: Annotated[float, Field(ge=0, le=10)]


class BimodalDelay(_Keys):
    """``slow_ms`` with probability ``p_slow``, else ``fast_ms``."""

    law: Literal["bimodal"] = "bimodal"
    p_slow: Probability
    fast_ms: HoldMs
    slow_ms: HoldMs


BaseDelay = Annotated[NoDelay | FixedDelay | LognormalDelay | BimodalDelay, Field(discriminator="law")]


class TailDelay(_Keys):
    """The ``base`` law, except ``slow_ms`` with probability ``p``."""

    law: Literal["tail"] = "tail"
    base: BaseDelay
    p: Probability = 0.01
    slow_ms: HoldMs


Delay = Annotated[NoDelay | FixedDelay | LognormalDelay | BimodalDelay | TailDelay, Field(discriminator="law")]
LAWS = ("none", "fixed", "lognormal", "bimodal", "tail")


class ReferenceFailures(_Keys):
    """A share of requests answered with an error instead (seeded like the delays), at once."""

    share: Probability = 0.0
    grpc_code: GRPC_CODES = "UNAVAILABLE"
    http_status: Annotated[int, Field(ge=400, le=599)] = 503
    message: str = "scripted failure"


class ReferenceGeneration(_Keys):
    """How `/v1/chat/completions` and `/v1/completions` stream: `stream_responses` content events,
    each after one more hold of the request's draw (docs/reference-server.md)."""

    #: tokens each content event carries (each the text "é")
    tokens_per_event: Annotated[int, Field(ge=1, le=1_000)] = 1
    #: a role-only chunk (chat) before the first content event
    role_prelude: bool = True
    #: a ": keep-alive" comment before every content event
    keep_alive: bool = False
    #: each content event written in two writes, cut inside a character
    split_events: bool = False
    #: content events written two at a time (the first waits for the second)
    coalesce_events: bool = False
    #: an error event after this many content events, then the end (None: never)
    fail_after_events: Annotated[int, Field(ge=0, le=10_000)] | None = None
    #: the usage tail carries llama.cpp's `timings` (prompt_ms: service start -> first event; predicted_ms: the rest)
    timings: bool = False


class ReferenceTls(_Keys):
    """TLS on both ports (PEM files)."""

    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)


class ReferenceConfig(_Keys):
    """The reference server's configuration (every key has a default; docs/reference-server.md)."""

    model: str = Field(default="identity", min_length=1, max_length=256, pattern=r"^[^/]+$")
    #: 0: the model does not batch (shapes are the dims); else the batch is the first input's shape[0]
    max_batch_size: Annotated[int, Field(ge=0, le=65_536)] = 8
    #: answer ModelStreamInfer only, like a Triton decoupled model (its config says so)
    decoupled: bool = False
    inputs: tuple[ReferenceTensor, ...] = Field(default=(ReferenceTensor(name="INPUT0"),), min_length=1)
    outputs: tuple[ReferenceTensor, ...] = Field(default=(ReferenceTensor(name="OUTPUT0"),), min_length=1, max_length=64)
    delay: Delay = NoDelay()
    #: draw k of this seed is the k-th request's service time (and whether it fails)
    seed: Annotated[int, Field(ge=0, le=2**64 - 1)] = 0
    #: service slots, first come first served; None: unlimited
    concurrency: Annotated[int, Field(ge=1, le=2**32 - 1)] | None = None
    failures: ReferenceFailures = ReferenceFailures()
    #: ModelStreamInferResponses per streamed request (content events per generation), spaced by the request's service time
    stream_responses: Annotated[int, Field(ge=1, le=10_000)] = 1
    generation: ReferenceGeneration = ReferenceGeneration()
    #: items in a TorchServe-style answer (a JSON list)
    rest_items: Annotated[int, Field(ge=1, le=65_536)] = 1
    #: the server's worker threads
    threads: Annotated[int, Field(ge=1, le=256)] = 1
    host: str = Field(default=LOOPBACK, min_length=1)
    grpc_port: Annotated[int, Field(ge=0, le=65_535)] = 0
    http_port: Annotated[int, Field(ge=0, le=65_535)] = 0
    tls: ReferenceTls | None = None
    #: records kept; beyond that they are counted as dropped
    record_capacity: Annotated[int, Field(ge=0, le=100_000_000)] = 2_000_000

    def to_json(self) -> str:
        """The JSON the server reads."""
        return self.model_dump_json()


def _key_path(loc: Sequence[str | int]) -> str:
    """pydantic's location without the law names a discriminated union inserts (``delay.fixed.ms`` → ``delay.ms``)."""
    kept: list[str | int] = []
    for index, part in enumerate(loc):
        if part in LAWS and index > 0 and loc[index - 1] in ("delay", "base"):
            continue
        kept.append(part)
    return format_key_path(tuple(kept))


def reference_config_from_dict(data: object, label: str = "reference config") -> ReferenceConfig:
    """``data`` as YAML or JSON gives it, validated; ``ConfigFileError`` lists every problem."""
    if not isinstance(data, Mapping):
        raise ConfigFileError([Problem(label, "", f"expected a mapping of configuration keys; got {describe_value(data)}")])
    try:
        return ReferenceConfig.model_validate(data)
    except ValidationError as error:
        problems = []
        errors = error.errors()
        for item in errors:
            loc = tuple(item["loc"])
            if item["type"] == "too_short" and any(
                tuple(o["loc"])[: len(loc)] == loc and len(o["loc"]) > len(loc) for o in errors
            ):
                continue  # pydantic's echo of a bad item: "at least 1 item after validation"
            message = item["msg"]
            if item["type"] == "extra_forbidden":
                message = "unknown key"
            elif item["type"] != "missing":
                message = f"{message}; got {describe_value(item.get('input'))}"
            problems.append(Problem(label, _key_path(item["loc"]), message))
        raise ConfigFileError(problems) from None


def load_reference_config(path: str | Path) -> ReferenceConfig:
    """A YAML (or JSON) configuration file, validated (``ConfigFileError`` names the file and key path)."""
    path = Path(path)
    label = str(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigFileError(
                [Problem(label, "", f"the file is over {MAX_CONFIG_BYTES} bytes; expected a small configuration")]
            )
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigFileError([Problem(label, "", f"cannot read it: {error.strerror or error}")]) from None
    except UnicodeDecodeError:
        raise ConfigFileError([Problem(label, "", "not UTF-8 text; expected YAML or JSON")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigFileError([Problem(label, "", f"invalid YAML: {str(error).splitlines()[0]}")]) from None
    return reference_config_from_dict({} if data is None else data, label)


# -- the records


@dataclass(frozen=True)
class ReferenceRecords:
    """What the server did, one entry per inference request (arrays of one length; times are
    CLOCK_MONOTONIC ns). ``status`` codes name ``statuses`` (ok, failed: scripted, cancelled:
    the client went away), ``protocol`` codes name ``protocols``."""

    seq: np.ndarray
    received_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    answered_ns: np.ndarray
    #: a streamed generation's first and last content events handed to the transport (0: not a stream, or none sent)
    first_event_ns: np.ndarray
    last_event_ns: np.ndarray
    hold_ns: np.ndarray
    batch: np.ndarray
    protocol: np.ndarray
    status: np.ndarray
    #: the request ids, packed: record i's is ``id_bytes[id_offsets[i]:id_offsets[i + 1]]`` (``ids`` decodes them)
    id_offsets: np.ndarray
    id_bytes: bytes
    protocols: tuple[str, ...]
    statuses: tuple[str, ...]
    #: the index this fetch started at, the one to ask from next, records in the buffer, not kept
    after: int
    next: int
    total: int
    dropped: int

    def __len__(self) -> int:
        return int(self.seq.size)

    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        """Every record's request id ("" when it had none), decoded on first use."""
        if not self.id_bytes:
            return ("",) * len(self)
        bounds = self.id_offsets.tolist()
        blob = self.id_bytes
        return tuple(blob[bounds[i] : bounds[i + 1]].decode("utf-8", "replace") for i in range(len(self)))

    @property
    def queue_ns(self) -> np.ndarray:
        """Waiting for a slot: service start − received."""
        import numpy as np

        return self.start_ns.astype(np.int64) - self.received_ns.astype(np.int64)

    @property
    def service_ns(self) -> np.ndarray:
        """Held: service end − service start (≥ the scripted hold)."""
        import numpy as np

        return self.end_ns.astype(np.int64) - self.start_ns.astype(np.int64)

    def with_status(self, name: str) -> np.ndarray:
        """A mask of the records whose status is ``name`` (ok, failed, cancelled)."""
        return self.status == self.statuses.index(name)

    def with_protocol(self, name: str) -> np.ndarray:
        """A mask of the records that came over ``name`` (grpc, grpc-stream, http, rest, v1)."""
        return self.protocol == self.protocols.index(name)

    def most_in_service(self) -> int:
        """The most requests in service at once ([start, end) intervals; an end frees its slot
        before a start at the same nanosecond takes it)."""
        import numpy as np

        served = self.end_ns > self.start_ns
        starts, ends = self.start_ns[served], self.end_ns[served]
        if starts.size == 0:
            return 0
        times = np.concatenate([ends, starts])
        steps = np.concatenate([np.full(ends.size, -1, np.int64), np.ones(starts.size, np.int64)])
        order = np.lexsort((steps, times))  # by time, then ends (-1) first
        return int(np.cumsum(steps[order]).max())


RECORDS_MAGIC = b"IFLREC01"


def parse_records(body: bytes) -> ReferenceRecords:
    """The packed answer of ``GET /reference/records`` (docs/reference-server.md) as arrays."""
    import numpy as np

    if len(body) < 16 or body[:8] != RECORDS_MAGIC:
        raise ServerError("the reference server's records answer does not start with IFLREC01: not its records")
    header_length = int.from_bytes(body[8:16], "little")
    header = json.loads(body[16 : 16 + header_length])
    data = memoryview(body)[16 + header_length :]
    columns = {
        column["name"]: np.frombuffer(data, dtype=np.dtype(column["dtype"]), count=column["count"], offset=column["offset"])
        for column in header["columns"]
    }
    return ReferenceRecords(
        seq=columns["seq"],
        received_ns=columns["received_ns"],
        start_ns=columns["start_ns"],
        end_ns=columns["end_ns"],
        answered_ns=columns["answered_ns"],
        first_event_ns=columns["first_event_ns"],
        last_event_ns=columns["last_event_ns"],
        hold_ns=columns["hold_ns"],
        batch=columns["batch"],
        protocol=columns["protocol"],
        status=columns["status"],
        id_offsets=columns["id_offsets"],
        id_bytes=columns["id_bytes"].tobytes(),
        protocols=tuple(header["protocols"]),
        statuses=tuple(header["statuses"]),
        after=int(header["after"]),
        next=int(header["next"]),
        total=int(header["total"]),
        dropped=int(header["dropped"]),
    )


# -- the server in a child process


def _read_line(stream: Any, deadline: float) -> bytes | None:
    """One line from a pipe before ``deadline`` (monotonic); None when it closes or time runs out."""
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                return None
            line += chunk
            if b"\n" in line:
                return line.split(b"\n", 1)[0]
    return None


@dataclass
class ReferenceServerProcess:
    """``python -m inferload.local.reference_server`` as a child process (it gets SIGTERM if this
    process dies), on free loopback ports unless the configuration names them.

    ``start()`` waits until it serves (``ServerError`` with its log's tail otherwise);
    ``records()``, ``stats()``, ``reset()`` talk to it over HTTP; ``stop()`` ends it and removes
    its folder (config and log) unless one was given. A context manager too.
    """

    config: ReferenceConfig = field(default_factory=ReferenceConfig)
    #: where its config and log go (a temporary folder, removed at stop, when None)
    folder: Path | None = None
    #: with TLS: the CA that signed its certificate (default: the certificate itself, self-signed)
    ca_file: Path | None = None
    #: a command prefix it runs under (``ip netns exec NAME``: it serves on another network host;
    #: ``records()``, ``stats()`` and ``reset()`` then need a route from this process to its address)
    launcher: Sequence[str] = ()
    grpc_port: int = field(default=0, init=False)
    http_port: int = field(default=0, init=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _own_folder: Path | None = field(default=None, init=False, repr=False)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def grpc_address(self) -> str:
        """``host:port``, the form tritonclient.grpc and the gRPC targets take."""
        return f"{self._host}:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        """``host:port``, the form tritonclient.http and triton-http targets take."""
        return f"{self._host}:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.config.tls else 'http'}://{self._host}:{self.http_port}"

    @property
    def _host(self) -> str:
        return LOOPBACK if self.config.host in ("0.0.0.0", "::") else self.config.host

    @property
    def log_path(self) -> Path:
        return self._folder / "reference-server.log"

    @property
    def _folder(self) -> Path:
        folder = self.folder or self._own_folder
        if folder is None:
            raise ServerError("the reference server has not been started")
        return folder

    def start(self, timeout_s: float = 30.0) -> ReferenceServerProcess:
        if self._process is not None:
            raise ServerError(f"the reference server is already running (pid {self._process.pid})")
        if self.folder is None:
            self._own_folder = Path(tempfile.mkdtemp(prefix="inferload-reference-"))
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
        config_path = self._folder / "reference-server.json"
        config_path.write_text(self.config.to_json())
        command = [sys.executable, "-m", "inferload.local.reference_server", "--config", str(config_path)]
        if sys.platform.startswith("linux"):  # SIGTERM to it when this process dies
            command = [sys.executable, "-I", "-S", str(Path(die_with_parent.__file__)), str(os.getpid()), *command]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [*self.launcher, *command], stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL
            )
        assert self._process.stdout is not None
        line = _read_line(self._process.stdout, time.monotonic() + timeout_s)
        self._process.stdout.close()
        if line is None:
            self.stop()
            raise ServerError(f"the reference server did not start within {timeout_s:g} s: {self._log_tail()}")
        ready = json.loads(line)
        self.grpc_port, self.http_port = int(ready["grpc_port"]), int(ready["http_port"])
        return self

    @property
    def _verify(self) -> str | bool:
        if self.config.tls is None:
            return True
        return str(self.ca_file or self.config.tls.cert_file)

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-5:]) or "its log is empty"

    def _request(self, method: str, path: str, timeout_s: float, stream: bool = False) -> requests.Response:
        import requests

        try:
            response = requests.request(method, self.http_url + path, timeout=timeout_s, verify=self._verify, stream=stream)
        except requests.RequestException as error:
            raise ServerError(f"the reference server at {self.http_url} did not answer {method} {path}: {error}") from None
        if response.status_code != 200:
            raise ServerError(f"the reference server answered {method} {path} with HTTP {response.status_code}")
        return response

    def records(self, after: int = 0, limit: int | None = None, timeout_s: float = 60.0) -> ReferenceRecords:
        """The records from index ``after`` on (at most ``limit``)."""
        query = f"?after={after}" + (f"&limit={limit}" if limit is not None else "")
        response = self._request("GET", "/reference/records" + query, timeout_s, stream=True)
        with response:  # read whole in one call: `.content` reads 10 KiB at a time, 5x slower for 50 MB
            return parse_records(response.raw.read(decode_content=True))

    def stats(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """Counts (received, failed, rejected, recorded, dropped, in service, most in service) and the config."""
        answer: dict[str, Any] = self._request("GET", "/reference/stats", timeout_s).json()
        return answer

    def reset(self, timeout_s: float = 10.0) -> None:
        """Records and counts start afresh, and the draws from k = 0 again (between runs, not during one)."""
        self._request("POST", "/reference/reset", timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        if self._own_folder is not None:
            shutil.rmtree(self._own_folder, ignore_errors=True)
            self._own_folder = None

    def __enter__(self) -> ReferenceServerProcess:
        return self.start() if self._process is None else self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()


# -- the process itself

NATIVE_MISSING = (
    "inferload: the reference server needs the native extension inferload._native, which is not built here"
    " (`make build` builds it where cargo is; a wheel built that way carries it)"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferload.local.reference_server",
        description="The reference server: prints one JSON line with its ports when ready, serves until SIGTERM or SIGINT.",
    )
    parser.add_argument("--config", type=Path, help="the configuration (YAML or JSON; every key has a default)")
    arguments = parser.parse_args(argv)
    try:
        config = load_reference_config(arguments.config) if arguments.config else ReferenceConfig()
    except ConfigFileError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    try:
        native = importlib.import_module("inferload._native")
    except ImportError:
        sys.stderr.write(f"{NATIVE_MISSING}\n")
        return 1
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    # blocked before the server's threads start: they inherit the mask, and sigwait below takes them
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    label = str(arguments.config) if arguments.config else "the default configuration"
    try:
        server = native.ReferenceServer(config.to_json())
    except ValueError as error:
        sys.stderr.write(f"{label}: {error}\n")
        return 2
    except OSError as error:
        sys.stderr.write(f"inferload: the reference server could not start: {error}\n")
        return 1
    sys.stdout.write(server.ready_line() + "\n")
    sys.stdout.flush()
    signal.sigwait(stop_signals)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
