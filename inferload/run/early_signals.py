"""Stop signals that come while a process starts, before its own handlers are installed.

A process's imports and checks take a second or more (Locust imports inferload and checks the
models; the CLI validates the scenario). A SIGINT then was a KeyboardInterrupt traceback wherever it
landed (seen in a tune step's run.log), and in a process started with ``&`` by a non-interactive
shell (SIGINT ignored) it was lost: the run went on. `hold` makes a handler note SIGINT and SIGTERM
and nothing else: inferload's locustfile holds them as Locust loads it; the CLI from main's first
line, until a command that runs children at once (run, sweep, tune, worker) installs its handlers;
any other command (demo too, whose servers start first) gets Python's own back once its options
are read, and stops with 128 + the signal if one came meanwhile. The handlers installed later take what was
held (`take`) and act on it: the CLI stops before it starts anything (`StoppedBeforeStart`: 128 +
the signal's number), Locust's `RunStopper` as a signal at that moment would (the run not started:
no results, exit 130/143). The CLI starts Locust through `inferload.run.locust_entry`, which holds
them from its first line, before Locust's own imports (half a second). Left unheld: the
interpreter's start and the few imports before the hold (tens of milliseconds).

Signal dispositions belong to the process, so what was held is this module's (one list per process).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

HELD_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
_held: list[int] = []


def _note(signum: int, _frame: FrameType | None) -> None:
    _held.append(signum)


def hold() -> Callable[[], None]:
    """Note SIGINT and SIGTERM from now on (until another handler replaces this one); the function
    that puts the handlers from before back."""
    previous = {signum: signal.signal(signum, _note) for signum in HELD_SIGNALS}

    def release() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    return release


def take() -> list[int]:
    """The signals noted so far (oldest first); none are kept."""
    taken = list(_held)
    _held.clear()
    return taken
