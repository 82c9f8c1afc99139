"""The one HTTP client servermetrics reads with: a ``requests.Session`` per reader (connections are
kept between reads), a timeout on every call, and every failure as a ``ScrapeError`` whose message
says what happened. "connection refused" is said only when the OS answered ECONNREFUSED.

Every session inferload reads a server with is mounted with `BoundedAdapter` (`bounded_session`):
http.client skips interim (1xx) answers without end, each well within the socket's timeout, so a
server that sends ``100 Continue`` for ever would hang the read; past `MAX_INTERIM_ANSWERS` of
them the answer is refused.

Safe under gevent once the process is monkey-patched (Locust's), and in plain threads (the collector).
"""

from __future__ import annotations

import errno
import http.client
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any, Protocol

import requests
import requests.adapters
import urllib3
import urllib3.connection
from prometheus_client.parser import text_string_to_metric_families
from urllib3 import exceptions as urllib3_exceptions

from inferload.errors import ScrapeError
from inferload.scenario.limits import MAX_SERVER_PAGE_BYTES


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


def not_http_answer(exc: BaseException) -> bool:
    """The port answered, but not with HTTP/1.x (a gRPC port sends HTTP/2 frames)."""
    causes = _causes(exc)
    refused = any(
        isinstance(c, OSError) and c.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH) for c in causes
    )
    return not refused and any(isinstance(c, HTTPException) for c in causes)


def connection_problem(exc: BaseException) -> str:
    """Why a connection failed, in a few words: 'connection refused' only for a real ECONNREFUSED, 'a
    broken HTTP answer (...)' when the server answered in something that is not HTTP/1.x."""
    causes = _causes(exc)
    tls = tls_problem(exc)
    if tls:
        return tls
    if any(isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED for cause in causes):
        return "connection refused"
    if not_http_answer(exc):  # it connected and answered, but not in HTTP/1.x
        broken = next(cause for cause in causes if isinstance(cause, HTTPException))
        detail = str(broken).strip().splitlines()[0][:120] if str(broken).strip() else ""
        return f"a broken HTTP answer ({type(broken).__name__}{': ' + detail if detail else ''})"
    os_errors = [cause for cause in causes if isinstance(cause, OSError) and cause.errno is not None]
    if os_errors:
        cause = os_errors[-1]
        return f"cannot connect ({errno.errorcode.get(cause.errno or 0, cause.errno)}: {cause.strerror})"
    return f"cannot connect ({type(exc).__name__})"


class AnswerTooLarge(requests.RequestException):
    """An answer longer than the reader's bound (what came of it is dropped)."""


class AnswerTooSlow(requests.Timeout):
    """An answer still coming in at the reader's deadline (a server that drips its bytes)."""


#: bytes asked of the socket per read of a bounded answer
_READ_BYTES = 64 * 1024


def bounded_request(
    session: requests.Session | Any, method: str, url: str, *, deadline: float, max_bytes: int, timeout_s: float, **options: Any
) -> requests.Response:
    """``session.request(method, url, **options)`` read whole by the monotonic ``deadline`` and within
    ``max_bytes``: AnswerTooSlow past the deadline (however the server paces its bytes: ``timeout_s``
    bounds each wait on the socket, the deadline the whole answer), AnswerTooLarge past the bound
    (a declared Content-Length before any byte is read). The response is returned read: ``.json()``,
    ``.text`` and ``.raise_for_status()`` work on it as on any ``requests`` response."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise AnswerTooSlow(f"{method} {url}: no whole answer by the deadline")
    response = session.request(method, url, stream=True, timeout=min(timeout_s, remaining), **options)
    try:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise AnswerTooLarge(f"{method} {url}: answer larger than {max_bytes} bytes (Content-Length {declared})")
        body = bytearray()
        while chunk := response.raw.read1(_READ_BYTES, decode_content=True):
            body += chunk
            if len(body) > max_bytes:
                raise AnswerTooLarge(f"{method} {url}: answer larger than {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise AnswerTooSlow(f"{method} {url}: the answer was still coming in at the deadline ({len(body)} bytes)")
    except urllib3_exceptions.HTTPError as exc:  # raised by raw reads, not wrapped by requests
        raise requests.ConnectionError(exc) from None
    finally:
        response.close()
    # the body read here is the response's content, as requests keeps it after a read without stream
    response._content = bytes(body)
    response._content_consumed = True
    return response


class BoundedSession(requests.Session):
    """A ``requests.Session`` for one check: every answer read whole by one deadline, ``deadline_s``
    from the session's start, and each within ``max_bytes`` (``bounded_request``); a call's own
    ``timeout`` bounds each wait on the socket."""

    def __init__(self, deadline_s: float, max_bytes: int = MAX_SERVER_PAGE_BYTES) -> None:
        super().__init__()
        bounded_session(self)
        self.deadline = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **options: Any) -> requests.Response:
        if options.pop("stream", False) or args:
            raise TypeError("BoundedSession.request takes keyword options and reads every answer whole")
        timeout_s = float(options.pop("timeout", None) or self.deadline_s)
        return bounded_request(
            super(),
            str(method),
            str(url),
            deadline=self.deadline,
            max_bytes=self.max_bytes,
            timeout_s=timeout_s,
            **options,
        )


#: interim (1xx) answers taken before an answer's own: more is a server that never answers
MAX_INTERIM_ANSWERS = 32


class _InterimBoundedResponse(http.client.HTTPResponse):
    """http.client's response, refusing more than `MAX_INTERIM_ANSWERS` interim answers before its own."""

    _status_lines = 0

    def _read_status(self) -> tuple[str, int, str]:
        self._status_lines += 1
        if self._status_lines > MAX_INTERIM_ANSWERS + 1:
            raise HTTPException(f"more than {MAX_INTERIM_ANSWERS} interim (1xx) answers and no answer")
        status: tuple[str, int, str] = super()._read_status()  # type: ignore[misc]
        return status


class _Connection(urllib3.connection.HTTPConnection):
    response_class = _InterimBoundedResponse


class _TlsConnection(urllib3.connection.HTTPSConnection):
    response_class = _InterimBoundedResponse


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _TlsPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TlsConnection


class BoundedAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections refuse an endless run of interim answers; with
    ``server_name``, https:// connections present and verify it (SNI) instead of the URL's host."""

    def __init__(self, server_name: str | None = None) -> None:
        self.server_name = server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **options: Any) -> None:
        if self.server_name:
            options.update(server_hostname=self.server_name, assert_hostname=self.server_name)
        super().init_poolmanager(*args, **options)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TlsPool}


def bounded_session(session: requests.Session | None = None) -> requests.Session:
    """``session`` (a new one when None) with `BoundedAdapter` mounted for http:// and https://."""
    session = session if session is not None else requests.Session()
    session.mount("http://", BoundedAdapter())
    session.mount("https://", BoundedAdapter())
    return session


def use_server_name(session: requests.Session, server_name: str | None) -> None:
    """The session's https:// connections present and verify ``server_name`` (a TLS target's ``tls.server_name``)."""
    if server_name:
        session.mount("https://", BoundedAdapter(server_name))


class PageClient(Protocol):
    """What a metrics-page reader needs: a page's text (ScrapeError on failure), and close()."""

    def text(self, url: str) -> str: ...

    def close(self) -> None: ...


class HttpClient:
    """GETs with one session and one timeout (seconds); a ``PageClient``."""

    def __init__(self, timeout_s: float, tls: dict[str, Any] | None = None, max_bytes: int = MAX_SERVER_PAGE_BYTES) -> None:
        """``tls``: ``requests``' ``verify`` and ``cert`` for https:// pages (``inferload.scenario.tls.requests_tls``);
        each page is read whole within ``timeout_s`` and ``max_bytes``."""
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._session = bounded_session()
        for key, value in (tls or {}).items():
            setattr(self._session, key, value)

    def _get(self, url: str) -> requests.Response:
        try:
            deadline = time.monotonic() + self.timeout_s
            response = bounded_request(
                self._session, "GET", url, deadline=deadline, max_bytes=self.max_bytes, timeout_s=self.timeout_s
            )
        except AnswerTooLarge as exc:
            raise ScrapeError(str(exc)) from None
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
        except RecursionError:  # a document nested deeper than the parser goes
            raise ScrapeError(f"GET {url}: not JSON: nested too deep") from None
        if not isinstance(answer, dict):
            raise ScrapeError(f"GET {url}: expected a JSON object; got {type(answer).__name__}")
        return answer

    def close(self) -> None:
        self._session.close()
