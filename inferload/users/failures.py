"""Turn whatever a client library raised into one of inferload's request errors.

Locust groups failures by their message, so every message here is stable: it names the class
of failure and the peer, never a per-request number.
"""

from __future__ import annotations

import errno
import json
import socket

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
_GRPC_REFUSED_HINTS = ("failed to connect", "connection refused", "connect failed", "socket closed")


def classify_exception(exc: BaseException, address: str) -> RequestError:
    """Map a client-side exception to a RequestError with a stable message."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, InferenceServerException):
        return _classify_triton(exc, address)
    if isinstance(exc, (socket.timeout, TimeoutError)) or type(exc).__name__ == "Timeout":
        return RequestTimeout(f"timeout: no answer from {address} in time")
    if isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno in _REFUSED_ERRNOS):
        return ConnectionRefused(f"refused: cannot connect to {address}")
    if isinstance(exc, OSError):
        return ConnectionRefused(f"connection error to {address}: {type(exc).__name__}")
    return RequestError(f"client error: {type(exc).__name__}: {exc}")


def _classify_triton(exc: InferenceServerException, address: str) -> RequestError:
    status = str(exc.status() or "")
    message = str(exc.message() or "")
    if status.startswith("StatusCode."):
        code = status.removeprefix("StatusCode.")
        if code == "DEADLINE_EXCEEDED":
            return RequestTimeout(f"timeout: no answer from {address} in time")
        if code == "UNAVAILABLE" and any(h in message.lower() for h in _GRPC_REFUSED_HINTS):
            return ConnectionRefused(f"refused: cannot connect to {address}")
        return GrpcStatusError(code, _first_line(message))
    if status.isdigit():
        return HttpStatusError(int(status), _first_line(message))
    lowered = message.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return RequestTimeout(f"timeout: no answer from {address} in time")
    if "refused" in lowered:
        return ConnectionRefused(f"refused: cannot connect to {address}")
    return RequestError(f"triton error: {_first_line(message)}")


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def check_output_shape(name: str, got: tuple[int, ...], expected: tuple[int, ...]) -> None:
    """Raise BadOutputShape when a response tensor has the wrong shape (-1 matches any size)."""
    if len(got) != len(expected) or any(e != -1 and e != g for g, e in zip(got, expected, strict=False)):
        raise BadOutputShape(f"bad output shape: '{name}' expected {list(expected)}; got {list(got)}")


#: at most this many keys of a JSON object are named in a failure message
_KEYS_SHOWN = 5
#: stands for a body that did not decode as JSON
_NOT_JSON = object()


def check_json_list(body: bytes, batch_size: int) -> None:
    """Raise BadOutputShape unless ``body`` is a JSON list of ``batch_size`` items (``response_check: shape``).

    The message names what came instead by its type (and a list's length or an object's keys),
    never its values, so Locust groups the failures.
    """
    try:
        answer = json.loads(body)
    except ValueError:
        answer = _NOT_JSON
    if isinstance(answer, list) and len(answer) == batch_size:
        return
    raise BadOutputShape(
        f"bad output: expected a JSON list of {batch_size} item{'s' if batch_size != 1 else ''}; got {describe_answer(answer)}"
    )


def describe_answer(answer: object) -> str:
    """A short, value-free description of a decoded JSON answer."""
    if answer is _NOT_JSON:
        return "a body that is not JSON"
    if isinstance(answer, list):
        return f"a list of {len(answer)} item{'s' if len(answer) != 1 else ''}"
    if isinstance(answer, dict):
        keys = sorted(str(key) for key in answer)
        shown = ", ".join(keys[:_KEYS_SHOWN]) + (", ..." if len(keys) > _KEYS_SHOWN else "")
        return f"an object with keys [{shown}]" if keys else "an empty object"
    if answer is None:
        return "null"
    return type(answer).__name__  # bool, int, float, str: the value itself may differ per request
