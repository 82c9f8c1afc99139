"""The values of the `inferload` command's options, checked as argparse reads them.

Each function is an argparse ``type=``: it returns the value or raises ``argparse.ArgumentTypeError``
with what was expected, so a bad option ends the command with one line that names it and exit
code 2 (argparse's usage code) before anything starts: no server is contacted, no process is
started. Hosts are checked the way they will be used: a host to listen on must be an address of
this machine (it is bound once, on port 0), a host to connect to must resolve.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import socket
from collections.abc import Callable

from inferload.scenario.limits import MAX_REMOTE_WORKERS, max_local_workers
from inferload.scenario.messages import DURATION_HINT, parse_duration

_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
#: the longest wait an option may ask for (a day): longer is a typo, or a hang
MAX_WAIT_S = 86_400.0


def whole_number(low: int, high: int | None = None, why: str = "") -> Callable[[str], int]:
    """A whole number in ``[low, high]`` (``why``: the reason for ``high``, for the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number; got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high:,}" if high is not None else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"expected a whole number {bound}{why}; got {text!r}")
        return value

    return parse


def local_workers(text: str) -> int:
    """``--workers``: local worker processes, 0 (one process) to 4 per CPU core."""
    return whole_number(0, max_local_workers(), " (4 per CPU core of this machine)")(text)


def remote_workers(text: str) -> int:
    """``--remote-workers``: workers on other machines, 0 to MAX_REMOTE_WORKERS."""
    return whole_number(0, MAX_REMOTE_WORKERS)(text)


def finite_number(low: float, *, above: bool = False, high: float | None = None) -> Callable[[str], float]:
    """A finite number of at least ``low`` (``above``: more than ``low``) and at most ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
        too_low = value <= low if above else value < low
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            lower = f"above {low:g}" if above else f"of {low:g} or more"
            upper = f" and at most {high:g}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"expected a finite number {lower}{upper}; got {text!r}")
        return value

    return parse


def wait_seconds(text: str) -> float:
    """Seconds to wait: finite, 0 or more, at most a day."""
    return finite_number(0.0, high=MAX_WAIT_S)(text)


def duration(text: str) -> float:
    """A duration such as ``3s`` or ``1m30s`` (0 allowed: a warm-up may be none), at most a day."""
    try:
        value = parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {DURATION_HINT}; got {text!r}") from None
    if not 0 <= value <= MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"expected a duration from 0 to 24h; got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    return whole_number(1, 65535)(text)


def listen_host(text: str) -> str:
    """An address of this machine to listen on (``0.0.0.0``/``*``: every one): bound once to be sure."""
    if text in ("*", "0.0.0.0", "::"):
        return text
    try:
        infos = socket.getaddrinfo(text, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise argparse.ArgumentTypeError(f"cannot resolve {text!r}: {_reason(error)}") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an address of this machine ({error.strerror or error}); use 127.0.0.1, 0.0.0.0 or one of its own"
        ) from None
    return text


def connect_host(text: str) -> str:
    """A host name (RFC 1123 labels) or an IP address to connect to. Not resolved here: a master's name may
    resolve only once it runs (a Kubernetes service), and the connection is retried until then."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if not text or len(text) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise argparse.ArgumentTypeError(f"expected a host name or an IP address; got {text!r}")
    return text


def _reason(error: Exception) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__
