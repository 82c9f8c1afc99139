"""Where and how points are written: one frozen settings object for every writer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from inferload.observe.sink.secrets import mask_secrets

ENV_VARS = {
    "url": "INFLUX_URL",
    "api": "INFLUX_API",
    "database": "INFLUX_DB",
    "org": "INFLUX_ORG",
    "token": "INFLUX_TOKEN",
    "username": "INFLUX_USER",
    "password": "INFLUX_PASSWORD",
}


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
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL like 'http://127.0.0.1:8086'; got {value!r}")
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
    variables filling what is missing; None when no URL is given anywhere."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    for key, var in ENV_VARS.items():
        if key not in merged and env.get(var):
            merged[key] = env[var]
    if not merged.get("url"):
        return None
    return SinkSettings.model_validate(merged)
