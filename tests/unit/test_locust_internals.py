"""What inferload relies on inside Locust beyond its public API, checked against the installed
Locust: a Locust that renames any of it fails here, not in a user's run (pyproject pins Locust to the
minor versions this covers)."""

from __future__ import annotations

import types
from collections.abc import Iterator

import locust.main

from inferload.run.signals import LOCUST_AUTOQUIT_WAIT


def code_names(code: types.CodeType) -> Iterator[str]:
    yield code.co_name
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from code_names(constant)


def test_locust_s_main_still_waits_for_autoquit_in_the_function_the_signals_look_for() -> None:
    """`run/signals.py` ends `--autostart --autoquit`'s wait by finding this function's frame in
    Locust's main greenlet."""
    assert LOCUST_AUTOQUIT_WAIT in set(code_names(locust.main.main.__code__))
