"""The v1 write API: `POST /write?db=...` with line protocol. Every InfluxDB generation serves it
(1.x natively, 2.x through its compatibility API and a DBRP mapping, 3.x natively)."""

from __future__ import annotations

import requests

from inferload.observe.sink.errors import SinkError, is_retryable_status
from inferload.observe.sink.secrets import mask_secrets
from inferload.observe.sink.settings import SinkSettings


class V1Writer:
    """Writes line protocol bodies synchronously; raises SinkError on any failure."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._session = requests.Session()
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
        except requests.RequestException as exc:
            raise SinkError(self._mask(f"cannot reach {url}: {exc}"), retryable=True) from None
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
