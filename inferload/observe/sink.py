"""The InfluxDB sink: line protocol, the v1 and v2 writers, and the non-blocking background writer.

settings = SinkSettings(url="http://127.0.0.1:8086", database="inferload")
sink = open_sink(settings)          # a started BackgroundWriter
sink.submit([Point("requests", {"run_id": "r1"}, {"count": 3}, time_ns)])
stats = sink.close()                # SinkStats: points_written, points_dropped, ...
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from urllib3.exceptions import HTTPError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from inferload.errors import InferloadError, UsageError, mask_secrets
from inferload.servermetrics.http_client import bounded_session, connection_problem

# InfluxDB line protocol: a `Point` and its encoding, as pure functions.
#
#     measurement,tag1=a,tag2=b field1=1.5,field2=3i,text="hi" 1700000000000000000
#
# Tags with empty values and fields that are None or not finite are left out (InfluxDB rejects
# them); a point left without any field encodes to None and is not written. Timestamps are integer
# nanoseconds since the epoch (the v1 and v2 APIs' default precision).
FieldValue = float | int | bool | str | None


@dataclass(frozen=True)
class Point:
    """One InfluxDB point. `time_ns` is nanoseconds since the epoch."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    time_ns: int = field(default=0)


def seconds_to_ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


_MEASUREMENT_ESCAPES = str.maketrans({",": "\\,", " ": "\\ ", "\n": "\\n"})
_KEY_ESCAPES = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ ", "\n": "\\n"})


def escape_measurement(name: str) -> str:
    return name.translate(_MEASUREMENT_ESCAPES)


def escape_key(text: str) -> str:
    """Tag keys, tag values and field keys."""
    return text.translate(_KEY_ESCAPES)


@lru_cache(maxsize=4096)
def _series_head(measurement: str, tags: tuple[tuple[str, str], ...]) -> str:
    """`measurement,tag=value,...`: the same for every point of a series, so made once."""
    head = escape_measurement(measurement)
    for key, value in tags:
        head += f",{escape_key(key)}={escape_key(value)}"
    return head


@lru_cache(maxsize=4096)
def _field_key(key: str) -> str:
    return escape_key(key) + "="


def encode_field_value(value: FieldValue) -> str | None:
    """The field value as line protocol text, or None when it cannot be written."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    raise TypeError(f"field values must be float, int, bool or str; got {type(value).__name__}")


def encode_point(point: Point) -> str | None:
    """One line (no trailing newline), or None when the point has no writable field."""
    fields = []
    for key, value in point.fields.items():
        text = encode_field_value(value)
        if text is not None:
            fields.append(_field_key(key) + text)
    if not fields:
        return None
    tags = tuple(sorted((k, str(v)) for k, v in point.tags.items() if v is not None and v != ""))
    return f"{_series_head(point.measurement, tags)} {','.join(fields)} {int(point.time_ns)}"


def encode_points(points: Iterable[Point]) -> list[str]:
    """The lines of the points that have something to write."""
    lines = []
    for point in points:
        line = encode_point(point)
        if line is not None:
            lines.append(line)
    return lines


# What a failed write says: whether trying again can help, and a message without secrets.
class SinkError(InferloadError):
    """A write to InfluxDB failed. `retryable` is False when the same batch would fail again
    (bad request, authentication, unknown database): that batch is dropped."""

    def __init__(self, message: str, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


def is_retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


ENV_VARS = {
    "url": "INFLUX_URL",
    "api": "INFLUX_API",
    "database": "INFLUX_DB",
    "org": "INFLUX_ORG",
    "token": "INFLUX_TOKEN",
    "username": "INFLUX_USER",
    "password": "INFLUX_PASSWORD",
}
#: the settings whose values are never echoed in a message
SECRET_KEYS = ("token", "password")
#: each setting's command-line option (Locust's, the collector's, `inferload report`'s)
OPTIONS = {
    "url": "--influx-url",
    "api": "--influx-api",
    "database": "--influx-db",
    "org": "--influx-org",
    "token": "--influx-token",
    "username": "--influx-user",
    "password": "--influx-password",
}


class SinkSettingsError(UsageError):
    """InfluxDB settings that are not valid, whichever gave them (an option, an INFLUX_* variable, a
    config file, ``attach(influx_url=...)``): ``.problems`` holds (setting, what was expected) pairs;
    the message names each setting by its option and variable."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{setting_name(key)}: {message}" for key, message in problems))


def setting_name(key: str) -> str:
    """A setting as a user gives it: ``--influx-url (or INFLUX_URL)``."""
    return f"{OPTIONS[key]} (or {ENV_VARS[key]})" if key in OPTIONS else key


# Where and how points are written: one frozen settings object for every writer.
class SinkSettings(BaseModel):
    """An InfluxDB to write to.

    api ``v1``: ``POST {url}/write?db={database}`` (InfluxDB 1.x, 2.x through a DBRP mapping, 3.x);
    auth is ``Authorization: Token <token>`` when a token is given, else HTTP basic with
    username/password, else none. api ``v2``: influxdb-client's write API into bucket
    ``database`` of ``org`` with the token (or ``username:password`` on a 1.8+ server).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    api: Literal["v1", "v2"] = "v1"
    database: str = "inferload"
    retention_policy: str | None = None
    org: str | None = None
    token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    batch_size: int = Field(default=5000, ge=1)
    flush_interval_s: float = Field(default=0.5, gt=0)
    max_buffer_points: int = Field(default=100_000, ge=1)
    timeout_s: float = Field(default=5.0, gt=0)
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=10.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """An http(s) URL with a host and, when given, a port in 1..65535; the message never shows a
        password the URL holds."""
        shown = mask_secrets(value, ())
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL like 'http://127.0.0.1:8086'; got {shown!r}")
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            port = 0
        if not parts.hostname or port == 0:
            raise ValueError(
                f"expected an http:// or https:// URL with a host (and a port from 1 to 65535, if any) like"
                f" 'http://127.0.0.1:8086'; got {shown!r}"
            )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _v2_needs_org_and_credentials(self) -> SinkSettings:
        if self.api == "v2":
            if not self.org:
                raise ValueError("api v2 needs an org (--influx-org or INFLUX_ORG)")
            if self.token is None and not (self.username and self.password):
                raise ValueError("api v2 needs a token (--influx-token or INFLUX_TOKEN) or username and password")
        return self

    def secrets(self) -> list[str]:
        """The values to mask wherever text may be shown."""
        values = []
        for secret in (self.token, self.password):
            if secret is not None and secret.get_secret_value():
                values.append(secret.get_secret_value())
        return values

    def describe(self) -> str:
        """Where points go, safe to log."""
        return f"InfluxDB {self.api} at {mask_secrets(self.url, ())}, database/bucket {self.database!r}"


def settings_from_mapping(values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> SinkSettings | None:
    """SinkSettings from option values (None entries skipped), with INFLUX_* environment
    variables filling what is missing; None when no URL is given anywhere; SinkSettingsError when
    a value is not valid."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    for key, var in ENV_VARS.items():
        if key not in merged and env.get(var):
            merged[key] = env[var]
    if not merged.get("url"):
        return None
    try:
        return SinkSettings.model_validate(merged)
    except ValidationError as error:
        raise SinkSettingsError([_settings_problem(item) for item in error.errors(include_url=False)]) from None


def _settings_problem(item: Any) -> tuple[str, str]:
    """One of pydantic's errors on SinkSettings as (setting, what was expected; what came), the value
    of a secret setting left out."""
    from inferload.scenario.messages import describe_value

    key = ".".join(map(str, item["loc"])) or "settings"
    message = str(item["msg"]).removeprefix("Value error, ")  # our validators' own words: they name the value
    if item["type"] == "value_error":
        return key, message
    if item["type"] == "extra_forbidden":
        return key, f"unknown setting; expected one of {', '.join(ENV_VARS)}"
    expected = message.replace("Input should be ", "expected ", 1)
    return key, expected + ("" if key in SECRET_KEYS else f"; got {describe_value(item.get('input'))}")


# The v2 write API through influxdb-client (InfluxDB 2.x, 3.x, and 1.8+'s v2 endpoints).
#
# Only the client's synchronous write is used: batching, retries and the bounded buffer are ours
# (`BackgroundWriter`), so the client's reactivex threads never run and `close()` never waits.
class V2Writer:
    """Writes line protocol bodies synchronously; raises SinkError on any failure."""

    def __init__(self, settings: SinkSettings) -> None:
        # influxdb-client (and its reactivex) is imported only where the v2 API is chosen
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.settings = settings
        if settings.token is not None:
            token = settings.token.get_secret_value()
        else:
            password = settings.password.get_secret_value() if settings.password is not None else ""
            token = f"{settings.username}:{password}"
        bucket = settings.database
        if settings.retention_policy:
            bucket = f"{bucket}/{settings.retention_policy}"
        self._bucket = bucket
        self._org: str = settings.org or ""  # SinkSettings requires an org for the v2 API
        self._client = InfluxDBClient(
            url=settings.url,
            token=token,
            org=self._org,
            timeout=int(settings.timeout_s * 1000),
            retries=False,
        )
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)

    def write(self, body: bytes, timeout_s: float | None = None) -> None:
        from influxdb_client import WritePrecision
        from influxdb_client.rest import ApiException

        url = f"{self.settings.url}/api/v2/write"
        try:
            self._write_api.write(
                bucket=self._bucket,
                org=self._org,
                record=body,
                write_precision=WritePrecision.NS,  # type: ignore[arg-type]  # the library's constant is a str
            )
        except ApiException as exc:
            status = int(exc.status or 0)
            detail = (exc.body or exc.reason or "").strip()[:300] if isinstance(exc.body or exc.reason, str) else ""
            raise SinkError(
                self._mask(f"{url} answered HTTP {status}: {detail}"),
                retryable=status == 0 or is_retryable_status(status),
                status=status or None,
            ) from None
        except (HTTPError, OSError) as exc:
            # urllib3's NewConnectionError (refused, unreachable) is a ConnectTimeoutError too
            if isinstance(exc, (Urllib3Timeout, TimeoutError)) and not isinstance(exc, NewConnectionError):
                raise SinkError(f"{self._mask(url)}: no answer within {self.settings.timeout_s:g} s", retryable=True) from None
            raise SinkError(self._mask(f"cannot reach {url}: {connection_problem(exc)}"), retryable=True) from None

    def close(self) -> None:
        self._client.close()

    def _mask(self, text: str) -> str:
        return mask_secrets(text, self.settings.secrets())


# The v1 write API: `POST /write?db=...` with line protocol. Every InfluxDB generation serves it
# (1.x natively, 2.x through its compatibility API and a DBRP mapping, 3.x natively).
class V1Writer:
    """Writes line protocol bodies synchronously; raises SinkError on any failure."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._session = bounded_session()
        self._params = {"db": settings.database}
        if settings.retention_policy:
            self._params["rp"] = settings.retention_policy
        self._headers = {"Content-Type": "text/plain; charset=utf-8"}
        if settings.token is not None:
            self._headers["Authorization"] = f"Token {settings.token.get_secret_value()}"
        elif settings.username and settings.password is not None:
            self._session.auth = (settings.username, settings.password.get_secret_value())

    def write(self, body: bytes, timeout_s: float | None = None) -> None:
        url = f"{self.settings.url}/write"
        try:
            response = self._session.post(
                url,
                params=self._params,
                data=body,
                headers=self._headers,
                timeout=timeout_s or self.settings.timeout_s,
            )
        except requests.Timeout:
            raise SinkError(
                f"{self._mask(url)}: no answer within {timeout_s or self.settings.timeout_s:g} s", retryable=True
            ) from None
        except requests.RequestException as exc:
            raise SinkError(self._mask(f"cannot reach {url}: {connection_problem(exc)}"), retryable=True) from None
        if response.status_code >= 300:
            detail = response.text.strip()[:300]
            raise SinkError(
                self._mask(f"{url} answered HTTP {response.status_code}: {detail}"),
                retryable=is_retryable_status(response.status_code),
                status=response.status_code,
            )

    def close(self) -> None:
        self._session.close()

    def _mask(self, text: str) -> str:
        return mask_secrets(text, self.settings.secrets())


logger = logging.getLogger(__name__)


class Writer(Protocol):
    """Writes one line protocol body, or raises SinkError."""

    def write(self, body: bytes, timeout_s: float | None = None) -> None: ...

    def close(self) -> None: ...


@dataclass
class SinkStats:
    """What happened to the points handed to a BackgroundWriter."""

    points_written: int = 0
    points_dropped: int = 0  # buffer full, rejected by the server, or still unsent at close
    points_pending: int = 0
    write_errors: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# A background writer: callers hand it points and never wait; it writes them in batches.
#
# `submit()` only encodes and appends to a bounded buffer under a lock (no I/O). A writer thread
# takes up to `batch_size` lines every `flush_interval_s` and writes them. A failed write that may
# succeed later (connection refused, timeout, HTTP 429/5xx) is retried with exponential backoff
# while new points keep arriving; past `max_buffer_points` the oldest buffered points are dropped
# and counted. A batch the server rejects for good (HTTP 4xx) is dropped and counted.
#
# It uses `threading`: a real thread in the collector, and a greenlet under Locust, whose gevent
# monkey patching turns `threading.Thread`, `Event` and `Lock` into their gevent versions (sockets
# are patched too, so a write there waits only its own greenlet).
class BackgroundWriter:
    """Bounded, batched, retrying writes on a background thread (or greenlet)."""

    def __init__(
        self,
        writer: Writer,
        batch_size: int = 5000,
        flush_interval_s: float = 0.5,
        max_buffer_points: int = 100_000,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        name: str = "influx-writer",
    ) -> None:
        self._writer = writer
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._max_buffer = max_buffer_points
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._name = name
        self._buffer: deque[str] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats = SinkStats()
        self._backoff_s = 0.0
        self._logged_failure = False

    # -- the callers' side ------------------------------------------------------------------
    def submit(self, points: Iterable[Point]) -> None:
        """Queue points for writing; never blocks on I/O."""
        lines = encode_points(points)
        if not lines:
            return
        with self._lock:
            self._buffer.extend(lines)
            overflow = len(self._buffer) - self._max_buffer
            if overflow > 0:
                for _ in range(overflow):
                    self._buffer.popleft()
                self._stats.points_dropped += overflow

    def stats(self) -> SinkStats:
        with self._lock:
            snapshot = SinkStats(**asdict(self._stats))
            snapshot.points_pending = len(self._buffer)
        return snapshot

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 5.0) -> SinkStats:
        """Stop the background loop, try to write what is left within `timeout_s`, count the rest
        as dropped, and return the final figures."""
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self._thread = None
        while time.monotonic() < deadline and self._write_one_batch(deadline - time.monotonic()):
            pass
        with self._lock:
            left = len(self._buffer)
            self._buffer.clear()
            self._stats.points_dropped += left
        if left:
            logger.warning("InfluxDB: %d points still unsent at close were dropped", left)
        self._writer.close()
        return self.stats()

    # -- the background side ----------------------------------------------------------------
    def flush_once(self, timeout_s: float | None = None) -> bool:
        """Write one batch now (the loop's step; tests call it directly). True when the batch was
        written or nothing was pending, False when the write failed."""
        return self._write_one_batch(timeout_s) or not self._buffer

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._backoff_s or self._flush_interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                break
            while self._buffer and not self._stopping.is_set():
                if not self._write_one_batch(None):
                    break
                if len(self._buffer) < self._batch_size:
                    break

    def _write_one_batch(self, timeout_s: float | None) -> bool:
        with self._lock:
            if not self._buffer:
                return False
            count = min(self._batch_size, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(count)]
        body = ("\n".join(batch) + "\n").encode("utf-8")
        try:
            self._writer.write(body, timeout_s=timeout_s if timeout_s and timeout_s > 0 else None)
        except SinkError as exc:
            self._on_failure(batch, exc)
            return False
        with self._lock:
            self._stats.points_written += count
        if self._logged_failure:
            logger.info("InfluxDB: writing again")
            self._logged_failure = False
        self._backoff_s = 0.0
        return True

    def _on_failure(self, batch: list[str], exc: SinkError) -> None:
        with self._lock:
            self._stats.write_errors += 1
            self._stats.last_error = str(exc)
            if exc.retryable:
                room = self._max_buffer - len(self._buffer)
                keep = batch[-room:] if room > 0 else []
                self._buffer.extendleft(reversed(keep))
                self._stats.points_dropped += len(batch) - len(keep)
            else:
                self._stats.points_dropped += len(batch)
        self._backoff_s = min(self._backoff_max_s, (self._backoff_s * 2) or self._backoff_initial_s)
        if not self._logged_failure:
            what = "retrying with backoff" if exc.retryable else f"{len(batch)} points dropped"
            logger.warning("InfluxDB write failed (%s): %s", what, exc)
            self._logged_failure = True


__all__ = [
    "BackgroundWriter",
    "Point",
    "SinkError",
    "SinkSettings",
    "SinkSettingsError",
    "SinkStats",
    "Writer",
    "encode_point",
    "encode_points",
    "make_writer",
    "mask_secrets",
    "open_sink",
    "seconds_to_ns",
    "settings_from_mapping",
]


def make_writer(settings: SinkSettings) -> Writer:
    """The synchronous writer for the settings' API."""
    if settings.api == "v2":
        from inferload.observe.sink import V2Writer

        return V2Writer(settings)
    from inferload.observe.sink import V1Writer

    return V1Writer(settings)


def open_sink(settings: SinkSettings, writer: Writer | None = None, start: bool = True) -> BackgroundWriter:
    """A BackgroundWriter for the settings (started unless `start` is False)."""
    sink = BackgroundWriter(
        writer if writer is not None else make_writer(settings),
        batch_size=settings.batch_size,
        flush_interval_s=settings.flush_interval_s,
        max_buffer_points=settings.max_buffer_points,
        backoff_initial_s=settings.backoff_initial_s,
        backoff_max_s=settings.backoff_max_s,
    )
    if start:
        sink.start()
    return sink
