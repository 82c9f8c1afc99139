"""The one HTTP client servermetrics reads with: a ``requests.Session`` per reader (connections are
kept between reads), a timeout on every call, and every failure as a ``ScrapeError`` whose message
says what happened. "connection refused" is said only when the OS answered ECONNREFUSED.

Safe under gevent once the process is monkey-patched (Locust's), and in plain threads (the collector).
"""

from __future__ import annotations

import errno
import ssl
from typing import Any, Protocol

import requests

from inferload.errors import ScrapeError


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
