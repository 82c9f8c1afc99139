"""Waiting for a state with a deadline, instead of sleeping a fixed time and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: str,
    interval_s: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (OSError,),
) -> T:
    """Call `predicate` until it returns something truthy (returned) or `timeout_s` passes.

    Exceptions of the `ignore` types count as "not yet" (a server that does not answer yet);
    the failure names `what` was awaited and the last value or error seen.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            value, last = None, exc
        else:
            last = value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last seen: {last!r})")
        time.sleep(interval_s)  # poll interval, not a wait for the state itself
