"""The v2 write API through influxdb-client (InfluxDB 2.x, 3.x, and 1.8+'s v2 endpoints).

Only the client's synchronous write is used: batching, retries and the bounded buffer are ours
(`BackgroundWriter`), so the client's reactivex threads never run and `close()` never waits.
"""

from __future__ import annotations

from influxdb_client import InfluxDBClient, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException
from urllib3.exceptions import HTTPError

from inferload.observe.sink.errors import SinkError, is_retryable_status
from inferload.observe.sink.secrets import mask_secrets
from inferload.observe.sink.settings import SinkSettings


class V2Writer:
    """Writes line protocol bodies synchronously; raises SinkError on any failure."""

    def __init__(self, settings: SinkSettings) -> None:
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
            raise SinkError(self._mask(f"cannot reach {url}: {exc}"), retryable=True) from None

    def close(self) -> None:
        self._client.close()

    def _mask(self, text: str) -> str:
        return mask_secrets(text, self.settings.secrets())
