"""inferload's failure vocabulary on the Python transport: whatever a client library raised turned
into one of inferload's request errors, and the rules that read an answer (docs/engine.md, "Failures").

Locust groups failures by their message, so every message here is stable: it names the class of
failure and the peer, never a per-request number. The native engine gives the same texts by the
same rules (``native/src/engine/checks.rs``), held equal answer by answer by
``tests/unit/test_engine_checks.py``:

- a refused status: ``HTTP {status}: {reason}`` / ``gRPC {CODE}: {reason}``: `error_reason` (the
  first of some key paths of an error JSON that holds a non-blank string, else the body's own
  text), cut to its `first_line`;
- an answer of the wrong form: ``bad output: expected ...; got ...`` (`describe_answer` names what
  came, never its values) and ``bad output shape: 'NAME' expected [..]; got [..]``;
- an answer its protocol cannot read: ``bad answer: ...``.

JSON is read as RFC 8259 has it (`read_json`: UTF-8, no NaN or Infinity, finite numbers, at most
127 levels deep, no lone surrogate), which is what the engine's reader (serde_json) takes.
"""

from __future__ import annotations

import errno
import json
import math
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from tritonclient.utils import InferenceServerException

from inferload.errors import (
    BadOutputShape,
    ConnectionRefused,
    GrpcStatusError,
    HttpStatusError,
    RequestError,
    RequestTimeout,
)

_REFUSED_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH}
#: the hints of a refused connection in a gRPC UNAVAILABLE status's message
GRPC_REFUSED_HINTS = ("failed to connect", "connection refused", "connect failed", "socket closed")
#: at most this many characters of a gRPC status's message go in a failure
GRPC_REASON_CHARS = 160
#: what a reason is stripped of: ASCII whitespace
WHITESPACE = " \t\n\r\x0b\x0c"
_LINE_BREAK = re.compile(r"[\r\n]")
#: grpcio's status message for an answer its deserializer refused
_GRPC_UNDECODABLE = "Exception deserializing response!"
#: what an answer that does not decode as a ModelInferResponse is (`bad answer: ...`)
NOT_A_RESPONSE = "not a ModelInferResponse"
#: what a Triton HTTP answer whose JSON header cannot be read is
NOT_A_TRITON_RESPONSE = "not a Triton inference response"
#: what an answer that stopped before its end is
CUT_SHORT = "cut short: the connection closed before its end"
#: what an answer that is not HTTP/1.1, or whose framing (chunks, length) breaks, is
BROKEN_FRAMING = "broken HTTP framing"
#: what a gRPC answer that is not HTTP/2 (an HTTP/1 server's, say) is
BROKEN_HTTP2_FRAMING = "broken HTTP/2 framing"
#: grpcio's words for a peer whose bytes are not HTTP/2 (in its UNAVAILABLE "failed to connect ...")
_GRPC_NOT_HTTP2 = "failed parsing http/2"


def classify_exception(exc: BaseException, address: str) -> RequestError:
    """Map a client-side exception to a RequestError with a stable message."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, InferenceServerException):
        return _classify_triton(exc, address)
    if isinstance(exc, HTTPConnectionClosed):
        return RequestError(f"closed: {address} closed the connection before answering")
    if isinstance(exc, HTTPParseError):
        cut = "incomplete response" in str(exc).lower() or "connection closed" in str(exc).lower()
        return bad_answer(CUT_SHORT if cut else BROKEN_FRAMING)
    if isinstance(exc, (socket.timeout, TimeoutError)) or type(exc).__name__ == "Timeout":
        return timed_out(address)
    if isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno in _REFUSED_ERRNOS):
        return refused(address)
    if isinstance(exc, OSError):
        return ConnectionRefused(f"connection error to {address}: {type(exc).__name__}")
    return RequestError(f"client error: {type(exc).__name__}: {exc}")


def _classify_triton(exc: InferenceServerException, address: str) -> RequestError:
    status = str(exc.status() or "")
    message = str(exc.message() or "")
    if status.startswith("StatusCode."):
        code = status.removeprefix("StatusCode.")
        if code == "DEADLINE_EXCEEDED":
            return timed_out(address)
        if code == "UNAVAILABLE" and _GRPC_NOT_HTTP2 in message.lower():
            return bad_answer(BROKEN_HTTP2_FRAMING)
        if code == "UNAVAILABLE" and any(h in message.lower() for h in GRPC_REFUSED_HINTS):
            return refused(address)
        if code == "INTERNAL" and message == _GRPC_UNDECODABLE:
            return bad_answer(NOT_A_RESPONSE)
        return GrpcStatusError(code, first_line(message, GRPC_REASON_CHARS))
    if status.isdigit():
        return HttpStatusError(int(status), first_line(message, GRPC_REASON_CHARS))
    lowered = message.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return timed_out(address)
    if "refused" in lowered:
        return refused(address)
    return RequestError(f"triton error: {first_line(message, GRPC_REASON_CHARS)}")


def timed_out(address: str) -> RequestTimeout:
    """``timeout: no answer from {address} in time``: no whole answer within the call's deadline."""
    return RequestTimeout(f"timeout: no answer from {address} in time")


def refused(address: str) -> ConnectionRefused:
    """``refused: cannot connect to {address}``."""
    return ConnectionRefused(f"refused: cannot connect to {address}")


def bad_answer(what: str) -> RequestError:
    """``bad answer: {what}``: an answer its protocol cannot read."""
    return RequestError(f"bad answer: {what}")


def first_line(text: str, limit: int) -> str:
    """A text's first line: stripped of ASCII whitespace, up to its first CR or LF, at most ``limit`` characters."""
    return _LINE_BREAK.split(text.strip(WHITESPACE), maxsplit=1)[0][:limit]


#: stands for a body that did not decode as JSON
NOT_JSON: Any = object()
#: the deepest nesting of arrays and objects a JSON answer may have
MAX_JSON_DEPTH = 127
#: the largest magnitude a JSON number may have (a double's)
_MAX_NUMBER = 1.7976931348623157e308


def _refuse(text: str) -> Any:
    raise ValueError(f"not JSON: {text}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    if abs(value) > _MAX_NUMBER:
        raise ValueError("a number out of range")
    return value


def _within_rfc(value: Any) -> bool:
    """At most `MAX_JSON_DEPTH` levels of arrays and objects, and every string (and key) valid Unicode."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= MAX_JSON_DEPTH:
                return False
            children = list(item.items()) if isinstance(item, dict) else [(None, child) for child in item]
            for key, child in children:
                if key is not None and not _valid_text(key):
                    return False
                stack.append((child, depth + 1))
        elif isinstance(item, str) and not _valid_text(item):
            return False
    return True


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \u escape
        return False
    return True


def read_json(body: bytes) -> Any:
    """The answer as JSON (RFC 8259, UTF-8), or `NOT_JSON`."""
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_refuse, parse_float=_finite_float, parse_int=_bounded_int)
    except (ValueError, RecursionError):
        return NOT_JSON
    # the walk only where it can find something: past the depth needs that many brackets, a lone
    # surrogate a \u escape (strict UTF-8 decoding refuses one written raw)
    deep = body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    if (deep or b"\\u" in body) and not _within_rfc(value):
        return NOT_JSON
    return value


def _at_path(answer: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(answer, dict):
            return None
        answer = answer.get(key)
    return answer


@dataclass(frozen=True)
class Reason:
    """Where a server puts the reason of a refused request: `error_reason`'s key paths and length,
    one per server kind, for both transports (`engine_check`: the engine's ``check.detail``)."""

    key_paths: tuple[str, ...]
    chars: int

    def of(self, body: bytes) -> str:
        return error_reason(body, self.key_paths, self.chars)

    def engine_check(self) -> dict[str, Any]:
        return {"json_keys": list(self.key_paths), "chars": self.chars}


def error_reason(body: bytes, key_paths: Sequence[str], chars: int) -> str:
    """An error answer's reason: the first of ``key_paths`` (``a.b``: key b of the object at key a)
    that holds a non-blank string, when the body is a JSON object; else the body's own text (its
    first ``4 * chars`` bytes, invalid UTF-8 replaced); its `first_line`, at most ``chars`` characters."""
    answer = read_json(body)
    if isinstance(answer, dict):
        for path in key_paths:
            stated = _at_path(answer, path)
            if isinstance(stated, str) and stated.strip(WHITESPACE):
                return first_line(stated, chars)
    return first_line(body[: 4 * chars].decode("utf-8", "replace"), chars)


def check_output_shape(name: str, got: tuple[int, ...], expected: tuple[int, ...]) -> None:
    """Raise BadOutputShape when a response tensor has the wrong shape (-1 matches any size)."""
    if len(got) != len(expected) or any(e != -1 and e != g for g, e in zip(got, expected, strict=False)):
        raise BadOutputShape(f"bad output shape: '{name}' expected {list(expected)}; got {list(got)}")


#: at most this many keys of a JSON object are named in a failure message
_KEYS_SHOWN = 5


def check_json_list(body: bytes, batch_size: int) -> None:
    """Raise BadOutputShape unless ``body`` is a JSON list of ``batch_size`` items (``response_check: shape``).

    The message names what came instead by its type (and a list's length or an object's keys),
    never its values, so Locust groups the failures.
    """
    answer = read_json(body)
    if isinstance(answer, list) and len(answer) == batch_size:
        return
    raise BadOutputShape(
        f"bad output: expected a JSON list of {batch_size} item{'s' if batch_size != 1 else ''}; got {describe_answer(answer)}"
    )


def describe_answer(answer: object) -> str:
    """A short, value-free description of a decoded JSON answer (`NOT_JSON`: not JSON)."""
    if answer is NOT_JSON:
        return "a body that is not JSON"
    if isinstance(answer, list):
        return f"a list of {len(answer)} item{'s' if len(answer) != 1 else ''}"
    if isinstance(answer, dict):
        keys = sorted(str(key) for key in answer)
        shown = ", ".join(keys[:_KEYS_SHOWN]) + (", ..." if len(keys) > _KEYS_SHOWN else "")
        return f"an object with keys [{shown}]" if keys else "an empty object"
    if answer is None:
        return "null"
    if isinstance(answer, bool):
        return "a boolean"
    if isinstance(answer, (int, float)):
        return "a number"
    if isinstance(answer, str):
        return "a string"
    return type(answer).__name__  # not a JSON value (a caller's own object)
