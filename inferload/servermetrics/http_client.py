"""The one HTTP client servermetrics reads with: a ``requests.Session`` per reader (connections are
kept between reads), a timeout on every call, and every failure as a ``ScrapeError`` whose message
says what happened. "connection refused" is said only when the OS answered ECONNREFUSED.

Safe under gevent once the process is monkey-patched (Locust's), and in plain threads (the collector).
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import requests
from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError


# Prometheus text → samples by family name, with prometheus_client's parser and one ``_total`` rule.
#
# The rule: a metric is looked up by its **family name, without ``_total``**, whatever the endpoint
# writes. prometheus_client strips ``_total`` from counter family names and may add it to sample
# names (Triton writes ``nv_inference_count``, TorchServe ``ts_inference_requests_total``; both come
# back as families ``nv_inference_count`` and ``ts_inference_requests``). Of a family's samples only
# the value samples are kept (``<family>`` or ``<family>_total``), never ``_created``, ``_bucket`` and
# the like. The tests pin this on captures of the real endpoints (tests/captures/).
@dataclass(frozen=True)
class Sample:
    labels: Mapping[str, str]
    value: float


Families = dict[str, list[Sample]]


def parse_families(text: str) -> Families:
    """Every family's value samples, by family name; ScrapeError when the text does not parse."""
    families: Families = {}
    try:
        for family in text_string_to_metric_families(text):
            names = (family.name, f"{family.name}_total")
            samples = families.setdefault(family.name, [])
            samples.extend(Sample(dict(s.labels), float(s.value)) for s in family.samples if s.name in names)
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None
    return families


def total(families: Families, name: str, label: str, value: str) -> float | None:
    """The sum of family ``name``'s samples whose ``label`` is ``value``; None when there is none."""
    matching = [s.value for s in families.get(name, ()) if s.labels.get(label) == value]
    return sum(matching) if matching else None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``__cause__``, ``__context__``, urllib3's ``reason``, exception args)."""
    found: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        wrapped = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        pending.extend(item for item in wrapped if isinstance(item, BaseException))
    return found


def tls_problem(exc: BaseException) -> str | None:
    """The TLS library's own reason when ``exc`` wraps a TLS failure (``CERTIFICATE_VERIFY_FAILED: ...``), else None."""
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLError):
            detail = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or ""
            reason = str(getattr(cause, "reason", "") or type(cause).__name__)
            return f"TLS failed ({reason}: {detail})" if detail and detail != reason else f"TLS failed ({reason})"
    return None


def connection_problem(exc: BaseException) -> str:
    """Why a connection failed, in a few words: 'connection refused' only for a real ECONNREFUSED."""
    causes = _causes(exc)
    tls = tls_problem(exc)
    if tls:
        return tls
    if any(isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED for cause in causes):
        return "connection refused"
    os_errors = [cause for cause in causes if isinstance(cause, OSError) and cause.errno is not None]
    if os_errors:
        cause = os_errors[-1]
        return f"cannot connect ({errno.errorcode.get(cause.errno or 0, cause.errno)}: {cause.strerror})"
    return f"cannot connect ({type(exc).__name__})"


class PageClient(Protocol):
    """What a metrics-page reader needs: a page's text (ScrapeError on failure), and close()."""

    def text(self, url: str) -> str: ...

    def close(self) -> None: ...


class HttpClient:
    """GETs with one session and one timeout (seconds); a ``PageClient``."""

    def __init__(self, timeout_s: float, tls: dict[str, Any] | None = None) -> None:
        """``tls``: ``requests``' ``verify`` and ``cert`` for https:// pages (``inferload.scenario.tls.requests_tls``)."""
        self.timeout_s = timeout_s
        self._session = requests.Session()
        for key, value in (tls or {}).items():
            setattr(self._session, key, value)

    def _get(self, url: str) -> requests.Response:
        try:
            response = self._session.get(url, timeout=self.timeout_s)
        except requests.Timeout:
            raise ScrapeError(f"GET {url}: no answer within {self.timeout_s:g} s") from None
        except requests.ConnectionError as exc:
            raise ScrapeError(f"GET {url}: {connection_problem(exc)}") from None
        except requests.RequestException as exc:
            raise ScrapeError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
            raise ScrapeError(f"GET {url}: HTTP {response.status_code}" + (f": {detail}" if detail else ""))
        return response

    def text(self, url: str) -> str:
        return self._get(url).text

    def json(self, url: str) -> dict[str, Any]:
        response = self._get(url)
        try:
            answer = response.json()
        except ValueError as exc:
            raise ScrapeError(f"GET {url}: not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise ScrapeError(f"GET {url}: expected a JSON object; got {type(answer).__name__}")
        return answer

    def close(self) -> None:
        self._session.close()
